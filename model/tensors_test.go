package model

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRequiredTensors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		preset string
		count  int
		want   map[string][]int64 // a sample of names and shapes
		absent []string
	}{
		{
			name: "qwen2 tied with biases", preset: "tiny", count: 1 + 2*12 + 1,
			want: map[string][]int64{
				"model.embed_tokens.weight":              {512, 64},
				"model.layers.0.self_attn.q_proj.weight": {64, 64},
				"model.layers.0.self_attn.q_proj.bias":   {64},
				"model.layers.1.self_attn.k_proj.weight": {32, 64},
				"model.layers.1.self_attn.v_proj.bias":   {32},
				"model.layers.1.self_attn.o_proj.weight": {64, 64},
				"model.layers.1.mlp.down_proj.weight":    {64, 128},
				"model.norm.weight":                      {64},
			},
			absent: []string{"lm_head.weight"},
		},
		{
			name: "llama untied mqa explicit head_dim", preset: "tiny-llama", count: 1 + 2*9 + 2,
			want: map[string][]int64{
				"model.layers.0.self_attn.q_proj.weight": {96, 64},
				"model.layers.0.self_attn.k_proj.weight": {24, 64},
				"model.layers.0.self_attn.v_proj.weight": {24, 64},
				"model.layers.0.self_attn.o_proj.weight": {64, 96},
				"model.layers.1.mlp.gate_proj.weight":    {160, 64},
				"lm_head.weight":                         {384, 64},
			},
			absent: []string{"model.layers.0.self_attn.q_proj.bias"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := PresetConfig(tc.preset)
			if err != nil {
				t.Fatal(err)
			}
			specs := RequiredTensors(cfg)
			if len(specs) != tc.count {
				t.Errorf("%d tensors, want %d", len(specs), tc.count)
			}
			got := map[string][]int64{}
			for _, s := range specs {
				got[s.Name] = s.Shape
			}
			for n, shape := range tc.want {
				if !slices.Equal(got[n], shape) {
					t.Errorf("%s: shape %v, want %v", n, got[n], shape)
				}
			}
			for _, n := range tc.absent {
				if _, ok := got[n]; ok {
					t.Errorf("%s listed", n)
				}
			}
			if specs[0].Name != "model.embed_tokens.weight" || !strings.HasPrefix(specs[1].Name, "model.layers.0.input_layernorm") {
				t.Errorf("order starts %s, %s", specs[0].Name, specs[1].Name)
			}
			again := RequiredTensors(cfg)
			for i := range specs {
				if specs[i].Name != again[i].Name {
					t.Fatalf("order is not fixed at %d: %s, %s", i, specs[i].Name, again[i].Name)
				}
			}
		})
	}
}

func TestLlamaAttentionBias(t *testing.T) {
	cfg, _ := PresetConfig("tiny-llama")
	cfg.AttentionBias = new(true)
	names := map[string]bool{}
	for _, s := range RequiredTensors(cfg) {
		names[s.Name] = true
	}
	if !names["model.layers.1.self_attn.k_proj.bias"] {
		t.Error("attention_bias=true lists no k_proj.bias")
	}
}

func TestParamCount(t *testing.T) {
	for _, tc := range []struct {
		preset string
		want   int64
	}{
		{"qwen2.5-0.5b", 494_032_768}, // Qwen2.5-0.5B: 0.49B parameters
		{"llama-3.2-1b", 1_235_814_400},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			cfg, err := PresetConfig(tc.preset)
			if err != nil {
				t.Fatal(err)
			}
			if got := ParamCount(cfg); got != tc.want {
				t.Errorf("ParamCount = %d, want %d", got, tc.want)
			}
		})
	}
	if small, _ := PresetConfig("small"); ParamCount(small) < 20e6 || ParamCount(small) > 60e6 {
		t.Errorf("small has %d parameters, want a few tens of millions", ParamCount(small))
	}
}

func TestCheckTensorsDType(t *testing.T) {
	cfg, _ := PresetConfig("tiny")
	ts := map[string]*Tensor{}
	for _, s := range RequiredTensors(cfg) {
		ts[s.Name] = &Tensor{Name: s.Name, DType: DTypeF32, Shape: s.Shape}
	}
	if err := CheckTensors(cfg, ts); err != nil {
		t.Fatal(err)
	}
	ts["model.layers.1.mlp.up_proj.weight"].DType = DTypeI32
	err := CheckTensors(cfg, ts)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `tensor "model.layers.1.mlp.up_proj.weight" has dtype I32`) {
		t.Errorf("error %v", err)
	}
}
