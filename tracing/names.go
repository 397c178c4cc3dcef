// Package tracing sets up OpenTelemetry for ovrun (OTLP gRPC export and a
// local OTLP JSON file), names the spans and attributes of a run, reads a
// trace file back and renders it as a timeline picture.
//
// A run's trace is one root span (SpanRun) with children: compile, prefill,
// decode (one per rung window), migrate and boundary.wait. Variable data is
// carried by attributes set at span start; names stay short and fixed.
package tracing

import "go.opentelemetry.io/otel/attribute"

// ServiceName is the service.name ovrun reports.
const ServiceName = "ovrun"

// ScopeName is the instrumentation scope of ovrun's tracer.
const ScopeName = "github.com/ovtoolkit/ovrun"

// Span names.
const (
	SpanRun          = "ovrun.run"     // the whole run: root of the trace
	SpanCompile      = "compile"       // one compile attempt of one graph
	SpanPrefill      = "prefill"       // the prompt, through the prefill graph or the decode graph
	SpanDecode       = "decode"        // the decode steps of one rung window
	SpanMigrate      = "migrate"       // moving live KV into the next rung
	SpanBoundaryWait = "boundary.wait" // a step waiting at a boundary for its graph
	// SpanBudget is a budgeted compile (--compile-cost) from its launch to
	// its graph being ready, in every trace whose run it overlaps;
	// SpanRungWait a request waiting in the queue for the rung its prompt
	// starts on (ovrun serve's admission).
	SpanBudget   = "compile.budget"
	SpanRungWait = "rung.wait"

	// A batched server (continuous batching): one trace per request, its
	// root SpanRequest, and one trace per step, SpanBatchStep, linked to
	// the requests it carried (links, not a span per token).
	SpanRequest   = "ovrun.request"
	SpanBatchStep = "batch.step"
)

// EventKV is the name of the root span's KV timeline events.
const EventKV = "kv"

// Attribute keys. Durations are seconds, sizes bytes.
const (
	// compile.budget and rung.wait
	AttrBudgetReason     = attribute.Key("ovrun.budget.reason")
	AttrBudgetPredictedS = attribute.Key("ovrun.budget.predicted_s")
	AttrBudgetActualS    = attribute.Key("ovrun.budget.actual_s")
	AttrBudgetProfileS   = attribute.Key("ovrun.budget.profile_s")
	AttrBudgetCorrection = attribute.Key("ovrun.budget.correction")
	AttrBudgetError      = attribute.Key("ovrun.budget.error")
	AttrBudgetWindowS    = attribute.Key("ovrun.budget.window_s")
	AttrBudgetMissedS    = attribute.Key("ovrun.budget.deadline_missed_by_s")
	AttrBudgetWaitS      = attribute.Key("ovrun.budget.wait_s")
	AttrBudgetBasis      = attribute.Key("ovrun.budget.basis")
	AttrExpectedS        = attribute.Key("ovrun.expected_s")

	// run (root span)
	AttrPolicy          = attribute.Key("ovrun.policy")
	AttrModel           = attribute.Key("ovrun.model")
	AttrDevice          = attribute.Key("ovrun.device")
	AttrPrecision       = attribute.Key("ovrun.precision")
	AttrOpenVINO        = attribute.Key("ovrun.openvino_version")
	AttrLadder          = attribute.Key("ovrun.ladder")
	AttrPromptTokens    = attribute.Key("ovrun.prompt_tokens")
	AttrDecodeTokens    = attribute.Key("ovrun.decode_tokens")
	AttrDecodedTokens   = attribute.Key("ovrun.decoded_tokens")
	AttrFinishReason    = attribute.Key("ovrun.finish_reason")
	AttrCriticalPathS   = attribute.Key("ovrun.critical_path_s")
	AttrForegroundS     = attribute.Key("ovrun.foreground_compile_s")
	AttrBoundaryWaitS   = attribute.Key("ovrun.boundary_wait_s")
	AttrOverlappedS     = attribute.Key("ovrun.successor_compile_overlapped_s")
	AttrKVReservedAvg   = attribute.Key("ovrun.kv_reserved_avg_bytes")
	AttrKVReservedPeak  = attribute.Key("ovrun.kv_reserved_peak_bytes")
	AttrKVLiveAvg       = attribute.Key("ovrun.kv_live_avg_bytes")
	AttrPeakRSS         = attribute.Key("ovrun.peak_rss_bytes")
	AttrKVReservedBytes = attribute.Key("ovrun.reserved_bytes") // kv events
	AttrKVLiveBytes     = attribute.Key("ovrun.live_bytes")     // kv events

	// compile, decode, boundary.wait
	AttrCapacity          = attribute.Key("ovrun.capacity")
	AttrChunk             = attribute.Key("ovrun.chunk")
	AttrCompileForeground = attribute.Key("ovrun.compile.foreground")
	AttrCompileKind       = attribute.Key("ovrun.compile.kind") // decode, prefill, verify
	AttrCompileAttempt    = attribute.Key("ovrun.compile.attempt")
	AttrCompileS          = attribute.Key("ovrun.compile_s")
	AttrIRBytes           = attribute.Key("ovrun.ir_bytes")       // when known
	AttrCompileSource     = attribute.Key("ovrun.compile.source") // compiled, imported, reused
	AttrImportS           = attribute.Key("ovrun.import_s")       // when a blob was imported
	AttrExportS           = attribute.Key("ovrun.export_s")       // when a blob was exported
	AttrCompileIn         = attribute.Key("ovrun.compile_in")     // process, worker (run span)
	AttrOutcome           = attribute.Key("ovrun.outcome")        // ok, error, stopped
	AttrTokens            = attribute.Key("ovrun.tokens")
	AttrFirstStep         = attribute.Key("ovrun.first_step")
	AttrLastStep          = attribute.Key("ovrun.last_step")
	AttrTokensPerS        = attribute.Key("ovrun.tokens_per_s")
	AttrDecodeS           = attribute.Key("ovrun.decode_s") // time inside decode infer calls
	AttrWaitS             = attribute.Key("ovrun.wait_s")
	AttrReady             = attribute.Key("ovrun.ready_at_boundary")

	// migrate, boundary.wait
	AttrFromCapacity = attribute.Key("ovrun.from_capacity")
	AttrToCapacity   = attribute.Key("ovrun.to_capacity")
	AttrBytes        = attribute.Key("ovrun.bytes")
	AttrMigrateS     = attribute.Key("ovrun.migrate_s")
	AttrStep         = attribute.Key("ovrun.step")
)

// Attribute keys of the prefill schedule (--prefill), on the run span and
// the prefill span, and the time to first token on the run span.
const (
	AttrTTFTS               = attribute.Key("ovrun.ttft_s")
	AttrPrefillMode         = attribute.Key("ovrun.prefill.mode")                // auto, graph, decode
	AttrPrefillUsed         = attribute.Key("ovrun.prefill.used")                // graph, decode, decode+graph
	AttrPrefillReason       = attribute.Key("ovrun.prefill.reason")              // the choice, in words
	AttrPrefillDecodeTokens = attribute.Key("ovrun.prefill.decode_tokens")       // prompt tokens through the decode graph
	AttrPrefillSharedCost   = attribute.Key("ovrun.prefill.shared_step_penalty") // auto's estimate of a shared graph's slower steps, where weighed
)

// Attribute keys of a batched server's spans.
const (
	AttrCachedTokens  = attribute.Key("ovrun.cached_tokens") // prompt tokens whose KV came from the prefix cache
	AttrQueueS        = attribute.Key("ovrun.queue_s")
	AttrBatchSeqs     = attribute.Key("ovrun.batch.sequences")
	AttrBatchTokens   = attribute.Key("ovrun.batch.tokens")
	AttrBatchPrefill  = attribute.Key("ovrun.batch.prefill_tokens")
	AttrBatchRequests = attribute.Key("ovrun.batch.request_ids")
)

// Outcomes of a compile span.
const (
	OutcomeOK    = "ok"
	OutcomeError = "error"
	// OutcomeStopped: a background compile the run no longer needed, ended
	// unfinished when its ladder closed.
	OutcomeStopped = "stopped"
)
