package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/internal/stats"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Config is a campaign: everything that decides what the runs measure. It is
// stored as DIR/campaign.json, and --resume refuses a different one.
type Config struct {
	// Model is the checkpoint folder, made absolute.
	Model string `json:"model"`
	// Ladder is the capacity ladder every run uses.
	Ladder []int `json:"ladder"`
	// Arms are run policies, each optionally with a prefill mode
	// (POLICY[+prefill=MODE][+compile-in=WHERE], see Arm); Arms[0] is the control.
	Arms []string `json:"arms"`
	// Pairs is the number of measured blocks; each holds every arm once.
	Pairs int `json:"pairs"`
	// Prompt is a text prompt every run gets (--prompt); "" uses a seeded
	// random prompt of PromptTokens tokens.
	Prompt        string `json:"prompt,omitempty"`
	PromptTokens  int    `json:"prompt_tokens"`
	DecodeTokens  int    `json:"decode_tokens"`
	TeacherForced bool   `json:"teacher_forced"`
	Seed          uint64 `json:"seed"`
	// Precision is passed as --precision when set ("" = the device default).
	Precision string `json:"precision,omitempty"`
	// Attention is passed as --attention when set ("" = auto, the
	// device's form per capacity: see ovexec.ResolveAttention).
	Attention string `json:"attention,omitempty"`
	// VerifyBoundaries passes --verify to every run (boundary logits are
	// compared with a control; the comparison is excluded from the timings).
	VerifyBoundaries bool `json:"verify_boundaries"`
	// CompileCost is a compile-cost profile (ovtrace compile) passed to
	// every run as --compile-cost, made absolute; "" runs without budgets.
	CompileCost string `json:"compile_cost,omitempty"`
	// RunFlags are extra flags handed verbatim to every `ovrun run`.
	RunFlags []string `json:"run_flags,omitempty"`
	// Cache is the compiled-rung cache of the runs: "" none, CacheCold a
	// fresh empty --cache-dir per run (every rung compiled and exported),
	// CacheWarm one campaign --cache-dir filled by the warm-up runs (every
	// measured run imports).
	Cache string `json:"cache,omitempty"`
}

// The --cache modes of a campaign.
const (
	CacheCold = "cold"
	CacheWarm = "warm"
)

// CacheDirName is the campaign's shared compiled-rung cache (CacheWarm),
// in the output folder; a cold run's is runs/<run>.cache, removed after it.
const CacheDirName = "rung-cache"

// ParseCache checks a --cache mode.
func ParseCache(s string) (string, error) {
	switch s {
	case "", CacheCold, CacheWarm:
		return s, nil
	}
	return "", fmt.Errorf("--cache %q: want cold (a fresh empty cache per run) or warm (a campaign cache the warm-up runs fill)", s)
}

// Control is the control arm.
func (c *Config) Control() string { return c.Arms[0] }

// reservedRunFlags are the run flags the campaign itself sets.
var reservedRunFlags = []string{"model", "ladder", "policy", "prompt", "prompt-file", "prompt-tokens", "prompt-ids",
	"decode-tokens", "teacher-forced", "seed", "precision", "attention", "verify", "compile-cost", "json", "quiet", "q", "cache-dir"}

// Validate checks the campaign. allowSmall admits designs too small or
// unbalanced for the sign-flip test to reach p < 0.05.
func (c *Config) Validate(allowSmall bool) error {
	if c.Model == "" {
		return errors.New("no --model")
	}
	if _, err := runtime.NewLadder(c.Ladder); err != nil {
		return err
	}
	if len(c.Arms) < 2 {
		return fmt.Errorf("--arms %q: want at least two arms, the control first", strings.Join(c.Arms, ","))
	}
	prefillArms, workerArms, weightArms, attentionArms := false, false, false, false
	for i, a := range c.Arms {
		arm, err := ParseArm(a)
		if err != nil {
			return fmt.Errorf("--arms: %w", err)
		}
		prefillArms = prefillArms || arm.Prefill != ""
		workerArms = workerArms || arm.CompileIn != ""
		weightArms = weightArms || arm.Weights != ""
		attentionArms = attentionArms || arm.Attention != ""
		if slices.Index(c.Arms, a) != i {
			return fmt.Errorf("--arms: %s appears twice", a)
		}
	}
	if attentionArms && c.Attention != "" {
		return fmt.Errorf("--attention %s with +attention= arms: the arms set it", c.Attention)
	}
	if c.Prompt == "" && c.PromptTokens < 1 {
		return errors.New("--prompt-tokens must be at least 1")
	}
	if c.PromptTokens >= c.Ladder[len(c.Ladder)-1] {
		return fmt.Errorf("--prompt-tokens %d: the largest rung holds %d, and the prompt needs one slot more", c.PromptTokens, c.Ladder[len(c.Ladder)-1])
	}
	if err := cliutil.CheckInt("decode-tokens", c.DecodeTokens, 1, runtime.MaxCapacity); err != nil {
		return err
	}
	if err := cliutil.CheckInt("pairs", c.Pairs, 1, maxPairs); err != nil {
		return err
	}
	if _, err := ParseCache(c.Cache); err != nil {
		return err
	}
	for _, f := range c.RunFlags {
		name := strings.TrimLeft(f, "-")
		name, _, _ = strings.Cut(name, "=")
		if !strings.HasPrefix(f, "-") {
			return fmt.Errorf("--run-flag %q: want a flag such as --infer-threads=1", f)
		}
		if slices.Contains(reservedRunFlags, name) || (prefillArms && name == "prefill") || (workerArms && name == "compile-in") || (weightArms && name == "weights") || (attentionArms && name == "attention") {
			return fmt.Errorf("--run-flag %q: the bench sets --%s itself", f, name)
		}
	}
	if allowSmall {
		return nil
	}
	if err := stats.CheckPairs(len(c.Arms), c.Pairs); err != nil {
		return fmt.Errorf("--pairs: %w; --allow-small to run anyway", err)
	}
	return nil
}

// RunArgs are the arguments of `ovrun run` (after the program name) for one
// run of arm writing its summary to jsonPath, with the compiled-rung cache
// cacheDir ("" for none).
func (c *Config) RunArgs(arm, jsonPath, cacheDir string) []string {
	a, _ := ParseArm(arm) // checked by Validate
	args := append([]string{"run",
		"--model", c.Model,
		"--ladder", joinInts(c.Ladder),
	}, a.args()...)
	if c.Prompt != "" {
		args = append(args, "--prompt", c.Prompt)
	} else {
		args = append(args, "--prompt-tokens", strconv.Itoa(c.PromptTokens))
	}
	args = append(args, "--decode-tokens", strconv.Itoa(c.DecodeTokens), "--seed", strconv.FormatUint(c.Seed, 10))
	if c.TeacherForced {
		args = append(args, "--teacher-forced")
	}
	if c.Precision != "" {
		args = append(args, "--precision", c.Precision)
	}
	if c.Attention != "" {
		args = append(args, "--attention", c.Attention)
	}
	if c.VerifyBoundaries {
		args = append(args, "--verify")
	}
	if c.CompileCost != "" {
		args = append(args, "--compile-cost", c.CompileCost)
	}
	if cacheDir != "" {
		args = append(args, "--cache-dir", cacheDir)
	}
	args = append(args, c.RunFlags...)
	return append(args, "--json", jsonPath, "--quiet")
}

// Diff names the fields in which other differs from c, as "field: c vs other".
func (c *Config) Diff(other *Config) []string {
	var out []string
	add := func(name string, a, b any) {
		sa, sb := fmt.Sprint(a), fmt.Sprint(b)
		if sa != sb {
			out = append(out, fmt.Sprintf("%s: %s vs %s", name, sa, sb))
		}
	}
	add("model", c.Model, other.Model)
	add("ladder", joinInts(c.Ladder), joinInts(other.Ladder))
	add("arms", strings.Join(c.Arms, ","), strings.Join(other.Arms, ","))
	add("pairs", c.Pairs, other.Pairs)
	add("prompt", c.Prompt, other.Prompt)
	add("prompt-tokens", c.PromptTokens, other.PromptTokens)
	add("decode-tokens", c.DecodeTokens, other.DecodeTokens)
	add("teacher-forced", c.TeacherForced, other.TeacherForced)
	add("seed", c.Seed, other.Seed)
	add("precision", orDefault(c.Precision), orDefault(other.Precision))
	add("attention", orDefault(c.Attention), orDefault(other.Attention))
	add("verify-boundaries", c.VerifyBoundaries, other.VerifyBoundaries)
	add("compile-cost", c.CompileCost, other.CompileCost)
	add("run-flag", strings.Join(c.RunFlags, " "), strings.Join(other.RunFlags, " "))
	add("cache", orNone(c.Cache), orNone(other.Cache))
	return out
}

// matches reports whether a run summary was made by this campaign for arm
// and is complete; the reason says why not.
func (c *Config) matches(s *runtime.Summary, arm string) (bool, string) {
	a, err := ParseArm(arm)
	if err != nil {
		return false, err.Error()
	}
	if ok, why := a.made(s); !ok {
		return false, why
	}
	switch {
	case s.Model != c.Model:
		return false, fmt.Sprintf("model %s, want %s", s.Model, c.Model)
	case !slices.Equal(s.Ladder, c.Ladder):
		return false, "different ladder"
	case (c.Prompt == "" && s.PromptTokens != c.PromptTokens) || s.DecodeTokens != c.DecodeTokens:
		return false, "different token counts"
	case s.TeacherForced != c.TeacherForced || s.Seed != c.Seed:
		return false, "different token stream"
	case c.Precision != "" && s.Precision != c.Precision:
		return false, "different precision"
	case c.Attention != "" && s.Attention != c.Attention:
		return false, "different attention"
	case s.Error != "":
		return false, "run failed: " + s.Error
	case s.FinishReason != "length" && s.FinishReason != "stop" && s.FinishReason != "capacity":
		return false, "finish_reason " + s.FinishReason
	}
	return true, ""
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// CampaignFile is the name of the stored campaign config inside the output folder.
const CampaignFile = "campaign.json"

// maxPairs bounds --pairs: each pair is a run per arm, and a campaign of
// more runs than this would not finish.
const maxPairs = 10000

// maxJSONBytes bounds the campaign and run files read back on --resume.
const maxJSONBytes = 64 << 20

func loadConfig(dir string) (*Config, error) {
	b, err := safefile.ReadFile(filepath.Join(dir, CampaignFile), maxJSONBytes)
	if err != nil {
		return nil, err
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, CampaignFile), err)
	}
	return &c, nil
}

// writeJSON and writeFile write through safefile: a reader never sees half
// a file, and nothing but a regular file is ever replaced.
func writeJSON(path string, v any) error { return safefile.WriteJSON(path, v) }

func writeFile(path string, b []byte) error { return safefile.WriteFile(path, b) }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
