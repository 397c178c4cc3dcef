package ovexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovtoolkit/ovrun/internal/childproc"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/rungcache"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Compile workers (docs/design.md §4, "A compile in a worker"): a child
// process of the same binary reads the checkpoint, builds the graph with the
// Compiler's own code, compiles it, exports the compiled model to a file
// and exits; the parent imports the file. The child's threads are not the
// decoding process's threads, so a CPU set and a nice value reach all of
// them (the child inherits both from the thread that forks it: the
// runtime's background compile thread), a crash or an out-of-memory kill
// ends only the child, and a timeout or a memory limit can end it cleanly.

// WorkerOptions say how to start compile workers.
type WorkerOptions struct {
	Exe  string   // the binary: ovrun, or a test binary that runs WorkerMain
	Args []string // its arguments before "--graph NAME --out PATH" (e.g. "compile-worker")
	Env  []string // added to this process's environment
	// Timeout kills a worker that runs longer; 0: none.
	Timeout time.Duration
	// MemoryMiB kills a worker whose resident set grows past it; 0: none.
	MemoryMiB int
	// TempDir holds the compiled blobs while they pass from child to
	// parent; "" is the system's temporary directory.
	TempDir string
}

// workerRequest is what the parent asks a worker for, on its stdin.
type workerRequest struct {
	Model   string          `json:"model"`
	Options Options         `json:"options"`
	Spec    model.GraphSpec `json:"spec"`
}

// WorkerResult is the worker's one JSON line on stdout.
type WorkerResult struct {
	LoadS        float64 `json:"load_s"`    // checkpoint and weights blob
	CompileS     float64 `json:"compile_s"` // IR, read, compile
	ExportS      float64 `json:"export_s"`  // export to the output file
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	IRBytes      int     `json:"ir_bytes"`
	Precision    string  `json:"precision"` // INFERENCE_PRECISION_HINT of the compiled model
	// With a compiled-rung cache: the graph's key, and whether the graph
	// is in the cache for the parent to import from there (Cached: it was
	// already, nothing was compiled; otherwise the worker compiled and
	// stored it). Notes are what the cache had to say.
	Key     string   `json:"key,omitempty"`
	InCache bool     `json:"in_cache,omitempty"`
	Cached  bool     `json:"cached,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// compileInWorker compiles spec in a child process and imports the result.
// A worker that fails, crashes, is killed or passes a limit is a failed
// compile whose error names the graph, how the worker ended and its last
// stderr line; the blob never outlives the call.
func (c *Compiler) compileInWorker(ctx context.Context, spec model.GraphSpec) (runtime.Executable, error) {
	if err := c.injectedFailure(spec); err != nil {
		return nil, err
	}
	w := c.opts.Worker
	dir, err := os.MkdirTemp(w.TempDir, "ovrun-compile-worker-*")
	if err != nil {
		return nil, fmt.Errorf("compile worker for graph %s: %w", spec.Name(), err)
	}
	defer os.RemoveAll(dir)
	blob := filepath.Join(dir, spec.Name()+".blob")
	opts := c.opts
	opts.Worker = nil
	req, err := json.Marshal(workerRequest{Model: c.ck.Dir, Options: opts, Spec: spec})
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("compile worker for graph %s (capacity %d)", spec.Name(), spec.Capacity)
	run := func() (WorkerResult, error) {
		var res WorkerResult
		out, err := childproc.Run(ctx, childproc.Cmd{
			Name: name, Path: w.Exe, Args: append(slices.Clone(w.Args), "--graph", spec.Name(), "--out", blob),
			// The parent injects faults (OVRUN_FAIL_COMPILE) once per compile; a
			// fresh child would fire them again on every retry.
			Env:   childproc.EnvWithout(append(os.Environ(), w.Env...), FailCompileEnv),
			Stdin: req, Timeout: w.Timeout, MemoryMiB: w.MemoryMiB,
		})
		if err != nil {
			var ce *childproc.Error
			if errors.As(err, &ce) && ce.Limit != "" {
				return res, fmt.Errorf("%w (limits: --compile-timeout, --compile-memory; 0 lifts them)", err)
			}
			return res, err
		}
		if err := childproc.DecodeLastJSONLine(out, &res); err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		return res, nil
	}
	res, err := run()
	if err != nil {
		return nil, err
	}
	origin := runtime.Origin{Source: runtime.OriginCompiled}
	var cm *ov.CompiledModel
	drop := func() {} // a graph imported in place from the cache: importEntry's
	if res.Cached {
		// The worker found the graph cached and compiled nothing. An entry
		// that does not read back whole (damaged, or evicted meanwhile) is
		// discarded: the worker compiles the graph again.
		var note string
		if cm, origin.ImportS, note, drop, err = c.importWorkerEntry(res.Key); err != nil {
			return nil, err
		}
		if cm != nil {
			origin.Source = runtime.OriginImported
		} else {
			if res, err = run(); err != nil {
				return nil, err
			}
			res.Notes = append([]string{fmt.Sprintf("graph %s: %s", spec.Name(), note)}, res.Notes...)
		}
	}
	if cm == nil {
		origin.ExportS = res.ExportS
		if res.InCache {
			var note string
			if cm, origin.ImportS, note, drop, err = c.importWorkerEntry(res.Key); err == nil && cm == nil {
				err = errors.New(note)
			}
		} else {
			t0 := time.Now()
			cm, err = c.importFile(blob)
			origin.ImportS = time.Since(t0).Seconds()
		}
		if err != nil {
			return nil, fmt.Errorf("import graph %s compiled by a worker: %w", spec.Name(), err)
		}
	}
	if p, err := cm.Property("INFERENCE_PRECISION_HINT"); err == nil && res.Precision != "" && p != res.Precision {
		cm.Close()
		return nil, fmt.Errorf("import graph %s: the worker compiled it for %s but it imported as %s", spec.Name(), res.Precision, p)
	}
	c.recordPrecision(cm)
	return c.newExecutable(spec, cm, res.IRBytes, origin, drop, res.Notes...)
}

// importWorkerEntry imports the cache entry a worker named by key
// (importEntry); note says why there was none to import.
func (c *Compiler) importWorkerEntry(key string) (cm *ov.CompiledModel, importS float64, note string, drop func(), err error) {
	if c.workerCache == nil {
		return nil, 0, "", func() {}, errors.New("the worker used a compiled-rung cache this process did not open")
	}
	k, err := rungcache.ParseKey(key)
	if err != nil {
		return nil, 0, "", func() {}, fmt.Errorf("the worker's cache key: %w", err)
	}
	if cm, importS, _, note, drop = c.importEntry(c.workerCache, k); cm == nil && note == "" {
		note = fmt.Sprintf("rung cache: entry %s is gone (evicted by another process?); compiling it again", k.Short())
	}
	return cm, importS, note, drop, nil
}

// importFile imports a compiled model from a file mapped for the call: its
// pages leave this process with the unmap instead of staying in Go's heap.
func (c *Compiler) importFile(path string) (*ov.CompiledModel, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 || st.Size() != int64(int(st.Size())) {
		return nil, fmt.Errorf("%s: %d bytes is not a compiled model", path, st.Size())
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	defer unix.Munmap(data)
	return c.core.ImportModel(data, c.opts.Device)
}

// WorkerMain is the body of a compile worker: it reads a request from in,
// compiles the graph, exports it to blob (written beside it and renamed,
// so the parent never reads half a file) and prints a WorkerResult on out.
// graph is the graph's name on the command line (where ps and tests see
// it); the request must be for that graph.
func WorkerMain(ctx context.Context, in io.Reader, out io.Writer, graph, blob string) error {
	var req workerRequest
	dec := json.NewDecoder(io.LimitReader(in, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("compile worker: read the request on stdin: %w", err)
	}
	if blob == "" {
		return errors.New("compile worker: give the output file: --out PATH")
	}
	if graph != req.Spec.Name() {
		return fmt.Errorf("compile worker: --graph %q but the request on stdin is for %s", graph, req.Spec.Name())
	}
	if err := ov.Load(); err != nil {
		return err
	}
	t0 := time.Now()
	ck, err := model.Load(req.Model)
	if err != nil {
		return err
	}
	defer ck.Close()
	req.Options.Worker = nil
	comp, err := NewCompiler(ck, req.Options)
	if err != nil {
		return err
	}
	defer comp.Close()
	res := WorkerResult{LoadS: time.Since(t0).Seconds()}
	if err := ctx.Err(); err != nil {
		return err
	}
	t1 := time.Now()
	xml, err := model.BuildIR(comp.weights, req.Spec)
	if err != nil {
		return err
	}
	res.IRBytes = len(xml)
	var key rungcache.Key
	if comp.cache != nil {
		key = comp.key(req.Spec, xml)
		res.Key = key.String()
		if comp.cache.store.Has(key) {
			res.Cached, res.InCache = true, true
			return printResult(out, res)
		}
	}
	cm, err := comp.compileModel(req.Spec, xml)
	if err != nil {
		return err
	}
	defer cm.Close()
	res.CompileS, res.Precision = time.Since(t1).Seconds(), comp.EffectivePrecision()
	if comp.cache != nil {
		o, notes := comp.export(req.Spec, key, cm, res.CompileS)
		res.ExportS, res.Notes = o.ExportS, notes
		if res.InCache = comp.cache.store.Has(key); res.InCache {
			return printResult(out, res)
		}
		// Not stored (a note says why): the parent takes the file below.
	}
	t2 := time.Now()
	tmp := blob + ".partial"
	if err := cm.Export(tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("export graph %s: %w", req.Spec.Name(), err)
	}
	if err := os.Rename(tmp, blob); err != nil {
		os.Remove(tmp)
		return err
	}
	res.ExportS += time.Since(t2).Seconds()
	return printResult(out, res)
}

// printResult writes a worker's result, with its peak RSS so far, as its
// one JSON line.
func printResult(out io.Writer, res WorkerResult) error {
	res.PeakRSSBytes = runtime.PeakRSS()
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}
