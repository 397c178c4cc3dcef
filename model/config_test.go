package model

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

func validConfig() Config {
	return Config{ModelType: "llama", VocabSize: 256, HiddenSize: 64, IntermediateSize: 128,
		NumHiddenLayers: 2, NumAttentionHeads: 4, RMSNormEps: 1e-6}
}

func TestValidateLimitsAndSigns(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"a billion layers", func(c *Config) { c.NumHiddenLayers = 1_000_000_000 }, "num_hidden_layers 1000000000 is beyond the limit"},
		{"huge vocabulary", func(c *Config) { c.VocabSize = 1 << 40 }, "vocab_size"},
		{"huge hidden", func(c *Config) { c.HiddenSize = 1 << 30; c.NumAttentionHeads = 1 }, "hidden_size"},
		{"negative head_dim", func(c *Config) { c.HeadDimField = -8 }, "head_dim must be positive when given, got -8"},
		{"negative kv heads", func(c *Config) { c.NumKeyValueHeads = -1 }, "num_key_value_heads must be positive when given"},
		{"negative rope_theta", func(c *Config) { c.RopeTheta = -1 }, "rope_theta must be positive when given"},
		{"huge head_dim", func(c *Config) { c.HeadDimField = 1 << 20 }, "head_dim"},
		{"too many parameters", func(c *Config) {
			c.NumHiddenLayers, c.HiddenSize, c.IntermediateSize, c.NumAttentionHeads = 1024, 1<<17, 1<<19, 1<<10
		}, "parameters is beyond the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

// TestLoadConfigHugeLayerCountIsCheap: a 400-byte config.json claiming a
// billion layers used to exhaust memory listing tensors.
func TestLoadConfigHugeLayerCountIsCheap(t *testing.T) {
	dir := t.TempDir()
	c := validConfig()
	c.NumHiddenLayers = 1_000_000_000
	b, _ := json.Marshal(c)
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	_, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), "num_hidden_layers") {
		t.Fatalf("Load = %v", err)
	}
}

// TestLoadRefusesNonRegularInputs: FIFOs and devices in place of
// config.json, the index or a shard are refused at once, never read.
func TestLoadRefusesNonRegularInputs(t *testing.T) {
	src := synthTo(t, "tiny", 4, DTypeF32)
	cfg, _ := os.ReadFile(filepath.Join(src, "config.json"))
	mk := func(setup func(dir string)) string {
		dir := t.TempDir()
		setup(dir)
		return dir
	}
	fifo := func(p string) {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	withConfig := func(dir string) { os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644) }
	for _, tc := range []struct {
		name string
		dir  string
		want string
	}{
		{"FIFO config.json", mk(func(d string) { fifo(filepath.Join(d, "config.json")) }), "named pipe"},
		{"config.json -> /dev/zero", mk(func(d string) { os.Symlink("/dev/zero", filepath.Join(d, "config.json")) }), "character device"},
		{"FIFO model.safetensors", mk(func(d string) { withConfig(d); fifo(filepath.Join(d, SafetensorsName)) }), "named pipe"},
		{"index -> /dev/zero", mk(func(d string) { withConfig(d); os.Symlink("/dev/zero", filepath.Join(d, IndexName)) }), "character device"},
		{"FIFO shard", mk(func(d string) {
			withConfig(d)
			os.WriteFile(filepath.Join(d, IndexName), []byte(`{"weight_map":{"model.norm.weight":"s.safetensors"}}`), 0o644)
			fifo(filepath.Join(d, "s.safetensors"))
		}), "named pipe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := Load(tc.dir); done <- err }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, safefile.ErrNotRegular) {
					t.Errorf("Load = %v, want a not-a-regular-file error naming %q", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Load blocked on a non-regular file")
			}
		})
	}
}
