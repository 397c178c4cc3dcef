package ovexec

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/rungcache"
	"github.com/ovtoolkit/ovrun/runtime"
)

// compileOnce opens a compiler with opts on a checkpoint, checks what
// Cached says, compiles one decode graph, runs eight greedy steps and
// returns the graph's origin, notes and tokens.
func compileOnce(t *testing.T, dir string, opts Options, cached bool) (runtime.Origin, []string, []int64) {
	t.Helper()
	ck, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	comp, err := NewCompiler(ck, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer comp.Close()
	spec := model.GraphSpec{Capacity: 16, Chunk: 1}
	if got := comp.Cached(spec); got != cached {
		t.Errorf("Cached before compiling = %v, want %v", got, cached)
	}
	exe, err := comp.Compile(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	buf, kv, err := runtime.AllocFullView(comp.KVShape(), spec.Capacity)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	if err := exe.Bind(kv); err != nil {
		t.Fatal(err)
	}
	// Greedy from token 1: eight steps.
	tokens := []int64{1}
	for p := range 8 {
		logits, err := exe.Step(tokens[p:p+1], p)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, int64(runtime.Argmax(logits)))
	}
	e := exe.(*executable)
	return e.Origin(), e.CompileNotes(), tokens
}

// The cache's key covers what changes the compiled graph: the same
// checkpoint and options import, another precision or one changed weight
// compile again, and the imported graph predicts what the compiled one did.
func TestRungCacheKey(t *testing.T) {
	src := testenv.Synth(t, "tiny", "F32")
	cache := t.TempDir()
	opts := Options{Device: "CPU", Precision: "f32", CacheDir: cache}

	first, _, want := compileOnce(t, src, opts, false)
	if first.Source != runtime.OriginCompiled || first.ExportS <= 0 {
		t.Fatalf("first compile: origin %+v, want compiled and exported", first)
	}
	again, notes, got := compileOnce(t, src, opts, true)
	if again.Source != runtime.OriginImported || again.ImportS <= 0 || len(notes) != 0 {
		t.Fatalf("second compile: origin %+v, notes %q; want imported", again, notes)
	}
	if !slices.Equal(got, want) {
		t.Errorf("imported graph predicts %v, the compiled one %v", got, want)
	}

	bf16 := opts
	bf16.Precision = "bf16"
	if o, _, _ := compileOnce(t, src, bf16, false); o.Source != runtime.OriginCompiled {
		t.Errorf("another precision: %s, want compiled (a new key)", o.Source)
	}

	// One weight changed: copy the checkpoint and flip the last byte of
	// the safetensors data (the last tensor's last element).
	changed := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "model.safetensors" {
			b[len(b)-2] ^= 0x01
		}
		if err := os.WriteFile(filepath.Join(changed, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if o, _, _ := compileOnce(t, changed, opts, false); o.Source != runtime.OriginCompiled {
		t.Errorf("one weight changed: %s, want compiled (a new key)", o.Source)
	}
	rc, err := rungcache.Open(cache, 0)
	if err != nil {
		t.Fatal(err)
	}
	if es, _ := rc.List(); len(es) != 3 {
		t.Errorf("%d entries, want 3 (f32, bf16, changed weight)", len(es))
	}
}

// OpenVINO's own CACHE_DIR imports a blob with a flipped byte without a
// word, which is why the compiled-rung cache checks its blobs itself.
func TestOpenVINOCacheDirTakesAFlippedBlob(t *testing.T) {
	src := testenv.Synth(t, "tiny", "F32")
	dir := t.TempDir()
	opts := Options{Device: "CPU", Precision: "f32", Properties: map[string]string{"CACHE_DIR": dir}}
	compileOnce(t, src, opts, false)
	blobs, _ := filepath.Glob(filepath.Join(dir, "*.blob"))
	if len(blobs) != 1 {
		t.Fatalf("CACHE_DIR holds %d blobs, want 1", len(blobs))
	}
	b, err := os.ReadFile(blobs[0])
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte in the last quarter, where the weights are.
	i := len(b) * 3 / 4
	b[i] ^= 0x55
	if err := os.WriteFile(blobs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	compileOnce(t, src, opts, false) // no error: OpenVINO took the damaged blob
	after, err := os.ReadFile(blobs[0])
	if err != nil || !bytes.Equal(after, b) {
		t.Fatal("OpenVINO rewrote the damaged blob: it detected the damage after all")
	}
}

// A graph's key does not depend on the graphs built before it in the
// process (the builder places small constants in build order).
func TestRungCacheKeyIgnoresBuildOrder(t *testing.T) {
	ck, err := model.Load(testenv.Synth(t, "tiny", "F32"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	keyAfter := func(first, then model.GraphSpec) rungcache.Key {
		comp, err := NewCompiler(ck, Options{Device: "CPU", CacheDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer comp.Close()
		if _, err := comp.BuildIR(first); err != nil {
			t.Fatal(err)
		}
		xml, err := comp.BuildIR(then)
		if err != nil {
			t.Fatal(err)
		}
		return comp.key(then, xml)
	}
	a, b := model.GraphSpec{Capacity: 16, Chunk: 1}, model.GraphSpec{Capacity: 48, Chunk: 1}
	if keyAfter(a, b) != keyAfter(b, b) {
		t.Error("the key of decode-c48 changed with the graph built before it")
	}
	if keyAfter(a, b) == keyAfter(b, a) {
		t.Error("two graphs got one key")
	}
}

// A second start on a cache remembers the digest of the weights: it keys
// and imports a cached graph without reading the weights, reads them for
// the first graph it compiles (under the key a start without the memo
// computes), and a checkpoint rewritten in place is keyed anew.
func TestWarmStartReadsNoWeights(t *testing.T) {
	src := testenv.Synth(t, "tiny", "F32")
	cache := t.TempDir()
	opts := Options{Device: "CPU", Precision: "f32", CacheDir: cache}
	_, _, want := compileOnce(t, src, opts, false)

	comp := openCompiler(t, src, opts)
	if r := comp.WeightsRegion(); r.Len != 0 {
		t.Fatalf("a warm start read the weights (%d bytes)", r.Len)
	}
	decode, chunked := model.GraphSpec{Capacity: 16, Chunk: 1}, model.GraphSpec{Capacity: 16, Chunk: 4}
	exe, err := comp.Compile(context.Background(), decode)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	if o := exe.(*executable).Origin(); o.Source != runtime.OriginImported {
		t.Fatalf("cached graph: %s, want imported", o.Source)
	}
	if r := comp.WeightsRegion(); r.Len != 0 {
		t.Fatalf("an import read the weights (%d bytes)", r.Len)
	}
	exe2, err := comp.Compile(context.Background(), chunked)
	if err != nil {
		t.Fatal(err)
	}
	defer exe2.Close()
	if r := comp.WeightsRegion(); r.Len == 0 {
		t.Fatal("a compile ran without the weights")
	}
	// Without the memo the weights are hashed again: same key.
	if err := os.RemoveAll(filepath.Join(cache, "digests")); err != nil {
		t.Fatal(err)
	}
	fresh := openCompiler(t, src, opts)
	if !fresh.Cached(chunked) || !fresh.Cached(decode) {
		t.Error("a start that hashed the weights keys the graphs otherwise")
	}

	// The same file rewritten with one weight changed: a new key, and the
	// graph predicts what a compile of the changed weights does.
	_, _, again := compileOnce(t, src, opts, true)
	if !slices.Equal(again, want) {
		t.Fatalf("imported %v, compiled %v", again, want)
	}
	path := filepath.Join(src, "model.safetensors")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if o, _, _ := compileOnce(t, src, opts, false); o.Source != runtime.OriginCompiled {
		t.Errorf("weights rewritten in place: %s, want compiled (a new key)", o.Source)
	}
}

// BenchmarkWeightsDigest hashes a blob the size of qwen2.5-0.5b's weights
// in bf16 (about 1 GB): the one-time cost of a compiled-rung cache's key.
func BenchmarkWeightsDigest(b *testing.B) {
	blob := make([]byte, 988<<20)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	b.SetBytes(int64(len(blob)))
	for b.Loop() {
		weightsDigest(blob)
	}
}
