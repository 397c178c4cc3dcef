package runtime

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"time"

	"github.com/ovtoolkit/ovrun/model"
)

// ContentionConfig sets up a measurement of how much a background compile
// slows decode when both share the host's CPUs.
type ContentionConfig struct {
	Capacity        int // decode graph capacity
	CompileCapacity int // graph compiled in the background
	Steps           int // decode steps measured alone
	Background      BackgroundOptions
	DecodeCPUs      []int // pin the decoding thread; empty leaves it alone
}

// ContentionResult compares decode alone with decode next to a compile.
type ContentionResult struct {
	AloneTokensPerS       float64 `json:"alone_tokens_per_s"`
	UnderCompileTokensPer float64 `json:"under_compile_tokens_per_s"`
	DecodeSlowdownPct     float64 `json:"decode_slowdown_pct"`
	CompileAloneS         float64 `json:"compile_alone_s"`
	CompileUnderDecodeS   float64 `json:"compile_under_decode_s"`
	CompileSlowdownPct    float64 `json:"compile_slowdown_pct"`
	StepsUnderCompile     int     `json:"steps_under_compile"`
	CompileIn             string  `json:"compile_in,omitempty"` // process or worker (set by the caller)
}

// MeasureContention decodes cfg.Steps tokens alone, compiles the background
// graph alone, then decodes continuously while the same graph compiles on the
// background thread (with cfg.Background's affinity and nice value).
//
// Ctrl-C (ctx) stops it between decode steps; a compile already running is
// waited for.
func MeasureContention(ctx context.Context, comp Compiler, shape KVShape, cfg ContentionConfig) (*ContentionResult, error) {
	if cfg.Steps < 1 {
		return nil, fmt.Errorf("decode steps must be at least 1, got %d", cfg.Steps)
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if len(cfg.DecodeCPUs) > 0 {
		if err := PinCurrentThread(cfg.DecodeCPUs); err != nil {
			return nil, err
		}
	}
	step, done, err := decodeLoop(ctx, comp, shape, cfg.Capacity, 1)
	if err != nil {
		return nil, err
	}
	defer done()
	res := &ContentionResult{}
	t0 := time.Now()
	for i := 0; i < cfg.Steps; i++ {
		if err := step(); err != nil {
			return nil, err
		}
	}
	alone := time.Since(t0).Seconds()
	if alone <= 0 {
		return nil, fmt.Errorf("%d decode steps took no measurable time", cfg.Steps)
	}
	res.AloneTokensPerS = float64(cfg.Steps) / alone

	spec := model.GraphSpec{Capacity: cfg.CompileCapacity, Chunk: 1}
	sch := newCompileWorker(ctx, comp, cfg.Background, time.Now)
	solo := sch.background(spec)
	<-solo.done
	if solo.err != nil {
		return nil, errors.Join(solo.err, sch.close())
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(err, sch.close())
	}
	res.CompileAloneS = solo.seconds()

	under, err := compileBeside(sch, spec, step)
	if err != nil {
		return nil, err
	}
	res.CompileUnderDecodeS = under.CompileS
	res.StepsUnderCompile = under.Steps
	if res.CompileAloneS <= 0 {
		return nil, fmt.Errorf("the %v s compile took no measurable time", res.CompileAloneS)
	}
	res.UnderCompileTokensPer = under.TokensPerS
	res.DecodeSlowdownPct = 100 * (1 - res.UnderCompileTokensPer/res.AloneTokensPerS)
	res.CompileSlowdownPct = 100 * (res.CompileUnderDecodeS/res.CompileAloneS - 1)
	return res, nil
}

// UnderDecode is one compile made beside a decode loop.
type UnderDecode struct {
	CompileS   float64 // the compile's wall time, as the ladder times it
	Steps      int     // decode steps that finished while it ran
	TokensPerS float64 // their rate
}

// MeasureCompileUnderDecode compiles spec as a ladder compiles its next
// rung: on the background compile thread (with bg's affinity and nice
// value) while the decode graph of decodeCapacity steps continuously on
// this thread, cycling through the second half of its cache. The decode
// graph is compiled and warmed up first, untimed. With batch > 1 the
// decode graph is the static batched variant of decodeCapacity for batch
// sequences, each stepping one token a step (a batched server's rung
// below; spec is then normally the next rung's variant of the same batch).
func MeasureCompileUnderDecode(ctx context.Context, comp Compiler, shape KVShape, decodeCapacity, batch int, spec model.GraphSpec, bg BackgroundOptions) (*UnderDecode, error) {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	step, done, err := decodeLoop(ctx, comp, shape, decodeCapacity, batch)
	if err != nil {
		return nil, err
	}
	defer done()
	u, err := compileBeside(newCompileWorker(ctx, comp, bg, time.Now), spec, step)
	if err == nil {
		u.TokensPerS *= float64(batch) // every step decodes a token of each sequence
	}
	return u, err
}

// decodeLoop compiles the decode graph of capacity, binds it a cache and
// warms it up: step runs one decode step, cycling through the second half
// of the cache so that every step attends over a realistic, constant
// amount of past; done frees the graph and the cache.
func decodeLoop(ctx context.Context, comp Compiler, shape KVShape, capacity, batch int) (step func() error, done func(), err error) {
	if capacity < 2 {
		return nil, nil, fmt.Errorf("capacity must be at least 2, got %d", capacity)
	}
	if batch < 1 || batch > 1024 {
		return nil, nil, fmt.Errorf("decode batch %d: want 1..1024", batch)
	}
	spec := model.GraphSpec{Capacity: capacity, Chunk: 1}
	if batch > 1 {
		spec.Attention, spec.Batch = model.AttentionStatic, batch
	}
	exe, err := comp.Compile(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	bx, batched := exe.(BatchExecutable)
	if batch > 1 && !batched {
		return nil, nil, errors.Join(fmt.Errorf("a decode batch of %d needs batched graphs; %T has no StepBatch", batch, exe), exe.Close())
	}
	buf, kv, err := AllocFullView(shape, batch*capacity)
	if err != nil {
		return nil, nil, errors.Join(err, exe.Close())
	}
	done = func() { exe.Close(); buf.Free() } // the graph first: it has the cache bound
	if err := exe.Bind(kv); err != nil {
		done()
		return nil, nil, err
	}
	pos := capacity / 2
	var bs BatchStep
	step = func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if pos >= capacity {
			pos = capacity / 2
		}
		var err error
		if batch > 1 {
			bs.IDs, bs.Seqs = bs.IDs[:0], bs.Seqs[:0]
			for b := range batch {
				bs.IDs = append(bs.IDs, 1)
				bs.Seqs = append(bs.Seqs, BatchSeq{Tokens: 1, Past: pos, Blocks: []int32{int32(b)}})
			}
			_, err = bx.StepBatch(&bs)
		} else {
			_, err = exe.Step([]int64{1}, pos)
		}
		pos++
		return err
	}
	for i := 0; i < 8; i++ { // warm-up
		if err := step(); err != nil {
			done()
			return nil, nil, err
		}
	}
	return step, done, nil
}

// compileBeside compiles spec on sch's background thread while step runs
// on this one, then closes sch.
func compileBeside(sch *compileWorker, spec model.GraphSpec, step func() error) (*UnderDecode, error) {
	under := sch.background(spec)
	<-under.startedCh()
	t1 := time.Now()
	n := 0
	for !under.ready() {
		if err := step(); err != nil {
			<-under.done
			return nil, errors.Join(err, sch.close())
		}
		n++
	}
	el := time.Since(t1).Seconds()
	if err := errors.Join(under.err, sch.close(), sch.threadError()); err != nil {
		return nil, err
	}
	if n == 0 || el <= 0 {
		return nil, fmt.Errorf("no decode step finished during the %.2f s compile", under.seconds())
	}
	return &UnderDecode{CompileS: under.seconds(), Steps: n, TokensPerS: float64(n) / el}, nil
}
