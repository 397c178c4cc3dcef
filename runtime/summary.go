package runtime

import "github.com/ovtoolkit/ovrun/tracing"

// SummarySchema is a Summary's schema field (docs/outputs.md).
const SummarySchema = "ovrun.run/1"

// Summary is the run summary written by `ovrun run --json`. Fields ending in
// _s are seconds: *_start_s and *_end_s are offsets from process start, the
// rest durations. See docs/outputs.md for every field, and docs/design.md
// §6 for the metrics' definitions.
type Summary struct {
	// Schema is SummarySchema in every summary made here; "" in a file
	// written before summaries carried one.
	Schema          string `json:"schema"`
	Policy          string `json:"policy"`
	Model           string `json:"model"`
	Device          string `json:"device"`
	Precision       string `json:"precision,omitempty"`           // asked for
	PrecisionUsed   string `json:"precision_effective,omitempty"` // what the device reports it runs
	Attention       string `json:"attention,omitempty"`           // paged, bounded or static, or, where auto splits the ladder, each with its capacities ("static 256-1024, bounded 2048")
	KVPrecision     string `json:"kv_precision,omitempty"`        // element type of the KV cache (auto resolved)
	Weights         string `json:"weights,omitempty"`             // how the graphs hold the weights: native, rounded, f32, kernel or kernel-q8
	OpenVINOVersion string `json:"openvino_version"`
	Ladder          []int  `json:"ladder"`
	PromptTokens    int    `json:"prompt_tokens"`
	DecodeTokens    int    `json:"decode_tokens"`  // decode steps asked for
	DecodedTokens   int    `json:"decoded_tokens"` // decode steps done
	TeacherForced   bool   `json:"teacher_forced"`
	Seed            uint64 `json:"seed"`

	ForegroundCompileS          float64 `json:"foreground_compile_s"`
	PrefillS                    float64 `json:"prefill_s"`
	CriticalPathS               float64 `json:"critical_path_s"`
	DecodeS                     float64 `json:"decode_s"`
	BoundaryWaitS               float64 `json:"boundary_wait_s"`
	SuccessorCompileOverlappedS float64 `json:"successor_compile_overlapped_s"`
	MigrateS                    float64 `json:"migrate_s"`
	MigrateBytes                int64   `json:"migrate_bytes"`
	VerifyS                     float64 `json:"verify_s,omitempty"` // excluded from critical_path_s

	KVReservedAvgBytes  float64 `json:"kv_reserved_avg_bytes"`
	KVReservedPeakBytes int64   `json:"kv_reserved_peak_bytes"`
	KVLiveAvgBytes      float64 `json:"kv_live_avg_bytes"`
	KVLiveFinalBytes    int64   `json:"kv_live_final_bytes"`
	KVMeasured          string  `json:"kv_measured"`              // "allocated" (buffer sizes) or "committed" (private pages, /proc/self/pagemap)
	RemapFallback       bool    `json:"remap_fallback,omitempty"` // grow-remap ran with copies (device cannot take views)
	PeakRSSBytes        int64   `json:"peak_rss_bytes"`

	RunStartS     float64 `json:"run_start_s"`
	PrefillStartS float64 `json:"prefill_start_s"`
	PrefillEndS   float64 `json:"prefill_end_s"`
	EndS          float64 `json:"end_s"`

	// TTFTS is process start to the first token (the prediction after the
	// prompt): loading, foreground compiles and prefill.
	TTFTS float64 `json:"ttft_s"`
	// PrefillMode is the mode asked for (auto, graph, decode), PrefillUsed
	// what the prompt went through (graph, decode, decode+graph) and
	// PrefillReason why; PrefillDecodeTokens counts the prompt tokens fed
	// through the decode graph.
	PrefillMode         string `json:"prefill_mode,omitempty"`
	PrefillUsed         string `json:"prefill_used,omitempty"`
	PrefillReason       string `json:"prefill_reason,omitempty"`
	PrefillDecodeTokens int    `json:"prefill_decode_tokens"`
	// SharedStepPenalty is how much longer than the decode graph's prefill
	// mode auto estimated a shared graph's steps for this model, as a
	// fraction (compilecost.SharedStepPenalty), when it weighed a shared
	// first rung against the prompt; 0 where it did not.
	SharedStepPenalty float64 `json:"shared_step_penalty,omitempty"`

	Rungs      []RungSummary     `json:"rungs"`
	Compiles   []CompileRecord   `json:"compiles"`
	KVTimeline []KVSample        `json:"kv_timeline"`
	Boundaries []BoundarySummary `json:"boundaries"`
	Budgets    []Budget          `json:"budgets,omitempty"` // with --compile-cost
	// RungWait is the request's wait in a server's queue for the rung its
	// prompt starts on, nil where it waited for none.
	RungWait    *RungWait `json:"rung_wait,omitempty"`
	Predictions []int64   `json:"predictions"`
	Notes       []string  `json:"notes,omitempty"`
	// Text is the generated text (predictions decoded, a final
	// end-of-generation token left out) of a run given a text prompt.
	Text string `json:"text,omitempty"`

	FinishReason string `json:"finish_reason"` // length, stop, capacity, compile_error, interrupted, error
	Error        string `json:"error,omitempty"`

	// CompileIn is where compiles ran: "process" (this process's threads)
	// or "worker" (a child process per compile, its result imported).
	CompileIn string `json:"compile_in,omitempty"`
}

// RungSummary is what one capacity cost and did.
type RungSummary struct {
	Capacity        int     `json:"capacity"`
	Compiled        bool    `json:"compiled"`
	CompileS        float64 `json:"compile_s"`
	CompileStartS   float64 `json:"compile_start_s"`
	CompileEndS     float64 `json:"compile_end_s"`
	Foreground      bool    `json:"foreground"`
	CompileAttempts int     `json:"compile_attempts"`
	CompileError    string  `json:"compile_error,omitempty"`
	CompileSource   string  `json:"compile_source,omitempty"`  // compiled, imported or reused; empty when never compiled
	CompileStopped  bool    `json:"compile_stopped,omitempty"` // its background compile was stopped when the run ended
	Shared          bool    `json:"shared,omitempty"`          // its graph is a shared one (prompt chunks and decode steps)
	ImportS         float64 `json:"import_s"`
	ExportS         float64 `json:"export_s"`
	ReadyAtBoundary bool    `json:"ready_at_boundary"`
	WaitS           float64 `json:"wait_s"`
	MigrateS        float64 `json:"migrate_s"`
	MigrateBytes    int64   `json:"migrate_bytes"`
	FirstStep       int     `json:"first_step"` // decode step index (1-based), -1 when unused
	LastStep        int     `json:"last_step"`
	DecodeS         float64 `json:"decode_s"`
	TokensPerS      float64 `json:"tokens_per_s"`
	WaitStartS      float64 `json:"wait_start_s,omitempty"`
	MigrateStartS   float64 `json:"migrate_start_s,omitempty"`
	DecodeStartS    float64 `json:"decode_start_s,omitempty"`
	DecodeEndS      float64 `json:"decode_end_s,omitempty"`
}

// CompileRecord is one compile attempt of one graph.
type CompileRecord struct {
	Capacity   int     `json:"capacity"`
	Chunk      int     `json:"chunk"`
	Kind       string  `json:"kind"` // decode, prefill, verify
	Foreground bool    `json:"foreground"`
	Attempt    int     `json:"attempt"`
	StartS     float64 `json:"start_s"`
	EndS       float64 `json:"end_s"`
	CompileS   float64 `json:"compile_s"`
	IRBytes    int     `json:"ir_bytes,omitempty"`       // size of the emitted IR XML
	Source     string  `json:"compile_source,omitempty"` // compiled, imported or reused (Origin); empty when it failed
	Stopped    bool    `json:"stopped,omitempty"`        // ended unfinished when the ladder closed: not needed, not failed
	ImportS    float64 `json:"import_s,omitempty"`
	ExportS    float64 `json:"export_s,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// KVSample is the KV level at a moment of the decode.
type KVSample struct {
	TS            float64 `json:"t_s"`
	ReservedBytes int64   `json:"reserved_bytes"`
	LiveBytes     int64   `json:"live_bytes"`
}

// BoundarySummary compares the first step after a switch with a control
// that never switched (same inputs).
type BoundarySummary struct {
	From     int     `json:"from"`
	To       int     `json:"to"`
	Step     int     `json:"step"`
	Top1     int64   `json:"top1"`
	Top1Ctl  int64   `json:"top1_control"`
	Top1OK   bool    `json:"top1_match"`
	Cosine   float64 `json:"cosine"`
	MaxAbs   float64 `json:"max_abs_diff"`
	Verified bool    `json:"verified"`
}

// Outcome is the compile's outcome as spans and metrics name it:
// tracing.OutcomeOK, OutcomeError or OutcomeStopped.
func (c CompileRecord) Outcome() string {
	switch {
	case c.Error != "":
		return tracing.OutcomeError
	case c.Stopped:
		return tracing.OutcomeStopped
	}
	return tracing.OutcomeOK
}

// RungWait is a request's wait in a server's queue for the rung its prompt
// starts on, compiling when it arrived (runtime.CompiledLadder.Await).
type RungWait struct {
	Capacity int     `json:"capacity"`
	StartS   float64 `json:"start_s"` // offset from the run's start
	WaitS    float64 `json:"wait_s"`
	// ExpectedS is the predicted wait when it began; -1 without a
	// compile-cost profile.
	ExpectedS float64 `json:"expected_s"`
}
