package ov

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

func TestVersion(t *testing.T) {
	v, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "2026.3") {
		t.Errorf("Version() = %q, want prefix 2026.3", v)
	}
	if LibraryPath() == "" {
		t.Error("LibraryPath() is empty after a successful Load")
	}
}

func TestAvailableDevicesHasCPU(t *testing.T) {
	devs, err := needCore(t).AvailableDevices()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(devs, "CPU") {
		t.Errorf("AvailableDevices() = %v, want CPU among them", devs)
	}
}

func TestCoreProperty(t *testing.T) {
	c := needCore(t)
	if err := c.SetProperty("CPU", "INFERENCE_NUM_THREADS", "1"); err != nil {
		t.Fatal(err)
	}
	got, err := c.Property("CPU", "INFERENCE_NUM_THREADS")
	if err != nil {
		t.Fatal(err)
	}
	if got != "1" {
		t.Errorf("INFERENCE_NUM_THREADS = %q, want 1", got)
	}
	if err := c.SetProperty("CPU", "OVRUN_NO_SUCH_KEY", "1"); err == nil {
		t.Error("SetProperty with an unknown key succeeded")
	}
}

func TestInferMatchesGo(t *testing.T) {
	c := needCore(t)
	cm := compileLinear(t, c)

	prec, err := cm.Property("INFERENCE_PRECISION_HINT")
	if err != nil {
		t.Fatal(err)
	}
	if prec != "f32" {
		t.Errorf("INFERENCE_PRECISION_HINT = %q, want f32", prec)
	}

	req, err := cm.NewInferRequest()
	if err != nil {
		t.Fatal(err)
	}
	defer req.Close()
	xb, err := AllocHost(8 * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer xb.Free()
	in, err := NewTensorFromHost(F32, []int64{2, 4}, xb)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if in.Data() != xb.Ptr() {
		t.Fatalf("tensor data %p, want the host buffer %p", in.Data(), xb.Ptr())
	}
	x := unsafe.Slice((*float32)(xb.Ptr()), 8)
	copy(x, []float32{1, 2, 3, 4, -0.5, 0.25, -3, 8})
	if err := req.SetTensor("x", in); err != nil {
		t.Fatal(err)
	}

	// The request must read the host buffer itself: bound once, the second
	// run sees values written after SetTensor.
	bound, err := req.Tensor("x")
	if err != nil {
		t.Fatal(err)
	}
	if bound.Data() != xb.Ptr() {
		t.Errorf("request input data %p, want the host buffer %p (copied?)", bound.Data(), xb.Ptr())
	}
	bound.Close()

	for run, fill := range [][]float32{nil, {0.1, -0.2, 0.3, -0.4, 5, 6, 7, 8}} {
		if fill != nil {
			copy(x, fill)
		}
		if err := req.Infer(); err != nil {
			t.Fatal(err)
		}
		out, err := req.Tensor("y")
		if err != nil {
			t.Fatal(err)
		}
		shape, err := out.Shape()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(shape, []int64{2, 3}) || out.ElementType() != F32 {
			t.Errorf("run %d: output %s %v, want f32 [2 3]", run, out.ElementType(), shape)
		}
		assertClose(t, out.Float32s(), linearRef(x), 1e-5)
		out.Close()
	}
}

func TestExportImport(t *testing.T) {
	c := needCore(t)
	cm := compileLinear(t, c)
	x := []float32{1, -1, 2, -2, 0.5, 0.5, 0.5, 0.5}
	want := runLinear(t, cm, x)
	assertClose(t, want, linearRef(x), 1e-5)

	path := filepath.Join(t.TempDir(), "linear.blob")
	if err := cm.Export(path); err != nil {
		t.Fatal(err)
	}
	blob, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	imported, err := c.ImportModel(blob, "CPU")
	if err != nil {
		t.Fatalf("ImportModel: %v", err)
	}
	defer imported.Close()
	assertClose(t, runLinear(t, imported, x), want, 0)
}

func TestInferContext(t *testing.T) {
	cm := compileLinear(t, needCore(t))
	req, err := cm.NewInferRequest()
	if err != nil {
		t.Fatal(err)
	}
	defer req.Close()
	in, err := NewTensor(F32, []int64{2, 4})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	copy(in.Float32s(), x)
	if err := req.SetTensor("x", in); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	if err := req.InferContext(ctx); err != nil { // the async path
		t.Fatal(err)
	}
	out, err := req.Tensor("y")
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, out.Float32s(), linearRef(x), 1e-5)
	out.Close()

	cancel()
	if err := req.InferContext(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("InferContext(cancelled) = %v, want context.Canceled", err)
	}
}

func TestErrors(t *testing.T) {
	c := needCore(t)
	m := readLinear(t, c)
	tests := []struct {
		name string
		run  func() error
	}{
		{"malformed xml", func() error {
			m, err := c.ReadModel([]byte("<net name='broken' version='11'><layers>"), nil)
			m.Close()
			return err
		}},
		{"unknown property", func() error {
			cm, err := c.CompileModel(m, "CPU", Property{"OVRUN_NO_SUCH_KEY", "1"})
			cm.Close()
			return err
		}},
		{"unknown device", func() error {
			cm, err := c.CompileModel(m, "OVRUN_NO_SUCH_DEVICE")
			cm.Close()
			return err
		}},
		{"import garbage", func() error {
			cm, err := c.ImportModel([]byte("not a blob"), "CPU")
			cm.Close()
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			t.Log(err)
			var oe *Error
			if !errors.As(err, &oe) {
				t.Fatalf("error %v (%T), want *Error", err, err)
			}
			if oe.Msg == "" || oe.Status == 0 || oe.Op == "" {
				t.Errorf("incomplete *Error %#v", oe)
			}
			if !strings.HasPrefix(err.Error(), oe.Op+": "+StatusName(oe.Status)+": ") {
				t.Errorf("Error() = %q, want op: STATUS: message", err)
			}
			if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "Exception from") {
				t.Errorf("Error() = %q, want one line without source locations", err)
			}
		})
	}
}

func TestCompilePropertyCount(t *testing.T) {
	c := needCore(t)
	m := readLinear(t, c)
	// Every pair reaches OpenVINO: the 16th is an unknown key, so the call fails.
	props := slices.Repeat([]Property{{"INFERENCE_NUM_THREADS", "1"}}, MaxCompileProperties-1)
	props = append(props, Property{"OVRUN_NO_SUCH_KEY", "1"})
	if cm, err := c.CompileModel(m, "CPU", props...); err == nil || !strings.Contains(err.Error(), "OVRUN_NO_SUCH_KEY") {
		cm.Close()
		t.Errorf("16 pairs, last unknown: err = %v, want one naming OVRUN_NO_SUCH_KEY", err)
	}
	props[len(props)-1] = Property{"INFERENCE_PRECISION_HINT", "f32"}
	cm, err := c.CompileModel(m, "CPU", props...)
	if err != nil {
		t.Fatalf("16 valid pairs: %v", err)
	}
	cm.Close()
	props = append(props, Property{"INFERENCE_NUM_THREADS", "1"})
	if cm, err := c.CompileModel(m, "CPU", props...); err == nil {
		cm.Close()
		t.Error("17 pairs accepted")
	}
}

func TestClosedObjects(t *testing.T) {
	var (
		nilCore *Core
		nilCM   *CompiledModel
		nilReq  *InferRequest
		nilT    *Tensor
	)
	c, err := NewCore()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	nilCore.Close()
	(*Model)(nil).Close()
	nilCM.Close()
	nilReq.Close()
	nilT.Close()
	(*HostBuffer)(nil).Free()

	tests := []struct {
		name string
		err  error
	}{
		{"closed core", func() error { _, err := c.AvailableDevices(); return err }()},
		{"nil core", func() error { _, err := nilCore.CompileModel(nil, "CPU"); return err }()},
		{"nil compiled", func() error { _, err := nilCM.NewInferRequest(); return err }()},
		{"nil request", nilReq.Infer()},
		{"nil tensor", func() error { _, err := nilT.Shape(); return err }()},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, ErrClosed) {
			t.Errorf("%s: err = %v, want ErrClosed", tt.name, tt.err)
		}
	}
}

// TestPluginSignalStack guards against a crash seen with the CPU plugin:
// creating the plugin (on first compile) installs its own sigaltstack on the
// calling thread, and destroying it (when the core closes) frees that stack
// but restores the previous one only if it runs on the same thread. Go moves
// goroutines between threads, so without the shim's save/restore around
// such calls, the first thread was left with a freed signal stack and the
// next signal to it (Go sends SIGURG routinely) killed the process.
func TestPluginSignalStack(t *testing.T) {
	type result struct {
		tid int
		c   *Core
		cm  *CompiledModel
		m   *Model
		wb  *HostBuffer
		err error
	}
	created := make(chan result)
	release := make(chan struct{})
	done := make(chan struct{})
	go func() { // thread A: creates the plugin, then stays alive
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var r result
		r.tid = syscall.Gettid()
		r.c, r.err = NewCore()
		if r.err == nil {
			r.m, r.wb, r.err = readLinearNoT(r.c)
		}
		if r.err == nil {
			r.cm, r.err = r.c.CompileModel(r.m, "CPU", compileOpts...)
		}
		created <- r
		<-release
	}()
	r := <-created
	if r.err != nil {
		close(release)
		<-done
		t.Fatal(r.err)
	}
	closed := make(chan struct{})
	go func() { // thread B: destroys the plugin
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r.cm.Close()
		r.m.Close()
		r.c.Close()
		r.wb.Free()
		close(closed)
	}()
	<-closed
	// A signal to thread A must find a usable signal stack.
	for i := 0; i < 3; i++ {
		if err := syscall.Tgkill(syscall.Getpid(), r.tid, syscall.SIGURG); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	<-done
}

// TestImportMapped imports an exported model in place from a read-only
// mapping of its file: the same outputs as the compiled model, the mapping
// released only once the imported model is closed, and a damaged blob an
// error rather than a crash.
func TestImportMapped(t *testing.T) {
	c := needCore(t)
	cm := compileLinear(t, c)
	x := []float32{1, -1, 2, -2, 0.5, 0.5, 0.5, 0.5}
	want := runLinear(t, cm, x)
	path := filepath.Join(t.TempDir(), "linear.blob")
	if err := cm.Export(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	blob, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	unmapped := false
	imported, err := c.ImportMapped(blob, "CPU", func() { unmapped = true; syscall.Munmap(blob) })
	if errors.Is(err, ErrNoImportMapped) {
		syscall.Munmap(blob)
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatalf("ImportMapped: %v", err)
	}
	assertClose(t, runLinear(t, imported, x), want, 0)
	if unmapped {
		t.Fatal("the blob was released while the model lives")
	}
	imported.Close()
	if !unmapped {
		t.Fatal("closing the imported model did not release the blob")
	}
	junk := []byte("not a blob at all, but long enough to be read")
	if bad, err := c.ImportMapped(junk, "CPU", nil); err == nil {
		bad.Close()
		t.Fatal("ImportMapped took a damaged blob")
	}
}
