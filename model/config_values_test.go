package model

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateFloatsAndDivisibility: non-finite and absurd floating-point
// values, and head counts that do not divide, are refused naming the
// config.json field.
func TestValidateFloatsAndDivisibility(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"rms_norm_eps +Inf", func(c *Config) { c.RMSNormEps = math.Inf(1) }, "config.json: rms_norm_eps +Inf is not a finite number in [1e-30, 0.1]"},
		{"rms_norm_eps NaN", func(c *Config) { c.RMSNormEps = math.NaN() }, "config.json: rms_norm_eps NaN is not a finite number"},
		{"rms_norm_eps 1", func(c *Config) { c.RMSNormEps = 1 }, "config.json: rms_norm_eps 1 is not a finite number in [1e-30, 0.1]"},
		{"rms_norm_eps below f32", func(c *Config) { c.RMSNormEps = 1e-40 }, "config.json: rms_norm_eps 1e-40 is not a finite number in"},
		{"rms_norm_eps -Inf", func(c *Config) { c.RMSNormEps = math.Inf(-1) }, "config.json: rms_norm_eps must be positive, got -Inf"},
		{"rope_theta +Inf", func(c *Config) { c.RopeTheta = math.Inf(1) }, "config.json: rope_theta +Inf is not a finite number above 1 and at most 1e+12"},
		{"rope_theta NaN", func(c *Config) { c.RopeTheta = math.NaN() }, "config.json: rope_theta NaN is not a finite number above 1"},
		{"rope_theta 0.5", func(c *Config) { c.RopeTheta = 0.5 }, "config.json: rope_theta 0.5 is not a finite number above 1"},
		{"rope_theta 1e13", func(c *Config) { c.RopeTheta = 1e13 }, "config.json: rope_theta 1e+13 is not a finite number above 1 and at most 1e+12"},
		{"max_position_embeddings 2^25", func(c *Config) { c.MaxPositionEmbeddings = 1 << 25 }, "config.json: max_position_embeddings 33554432 is beyond the limit of 16777216"},
		{"negative max_position_embeddings", func(c *Config) { c.MaxPositionEmbeddings = -1 }, "config.json: max_position_embeddings must be positive when given, got -1"},
		{"kv heads do not divide", func(c *Config) { c.NumKeyValueHeads = 3 }, "config.json: num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
		{"heads do not divide the width", func(c *Config) { c.NumAttentionHeads = 3 }, "config.json: hidden_size 64 is not a multiple of num_attention_heads 3 and head_dim is absent"},
		{"odd head_dim", func(c *Config) { c.HeadDimField = 15 }, "config.json: head dimension 15 (head_dim) must be even"},
		{"odd derived head dimension", func(c *Config) { c.HiddenSize, c.NumAttentionHeads = 60, 4 }, "config.json: head dimension 15 (hidden_size / num_attention_heads) must be even"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	for _, ok := range []func(*Config){
		func(c *Config) { c.RMSNormEps = 0.1 },
		func(c *Config) { c.RMSNormEps = 1e-30 },
		func(c *Config) { c.RopeTheta = 1e12 },
		func(c *Config) { c.RopeTheta = 1.5 },
		func(c *Config) { c.MaxPositionEmbeddings = 1 << 24 },
	} {
		c := validConfig()
		ok(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// TestLoadConfigOverflowingNumbers: JSON cannot spell NaN or infinity, but
// numbers past float64 or int overflow; each is refused naming the field,
// and an explicit rope_theta of 0 is not read as absent.
func TestLoadConfigOverflowingNumbers(t *testing.T) {
	const base = `"model_type":"llama","vocab_size":256,"hidden_size":64,"intermediate_size":128,"num_attention_heads":4`
	for _, tc := range []struct {
		name, json, want string
	}{
		{"rms_norm_eps 1e400", `{` + base + `,"num_hidden_layers":2,"rms_norm_eps":1e400}`, "rms_norm_eps"},
		{"rope_theta 1e400", `{` + base + `,"num_hidden_layers":2,"rms_norm_eps":1e-6,"rope_theta":1e400}`, "rope_theta"},
		{"rope_theta 1e300", `{` + base + `,"num_hidden_layers":2,"rms_norm_eps":1e-6,"rope_theta":1e300}`, "rope_theta 1e+300 is not a finite number above 1"},
		{"rope_theta 0", `{` + base + `,"num_hidden_layers":2,"rms_norm_eps":1e-6,"rope_theta":0}`, "rope_theta must be positive when given, got 0"},
		{"layers 1e30", `{` + base + `,"num_hidden_layers":1e30,"rms_norm_eps":1e-6}`, "num_hidden_layers"},
		{"layers 2^63", `{` + base + `,"num_hidden_layers":9223372036854775808,"rms_norm_eps":1e-6}`, "num_hidden_layers"},
		{"rms_norm_eps 1e-400", `{` + base + `,"num_hidden_layers":2,"rms_norm_eps":1e-400}`, "rms_norm_eps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(tc.json), 0o644)
			_, err := LoadConfig(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("LoadConfig = %v, want one line containing %q", err, tc.want)
			}
		})
	}
}
