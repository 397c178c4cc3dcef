package ov

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The search never looks in the working directory: point it at the
	// project's library (the tests of the search itself set their own).
	if os.Getenv(EnvLibrary) == "" && os.Getenv(helperEnv) == "" {
		if libs, err := filepath.Abs(filepath.Join("..", ".venv", "openvino", "libs")); err == nil {
			os.Setenv(EnvLibrary, libs)
		}
	}
	goleak.VerifyTestMain(m)
}

// needCore returns a Core closed at the end of the test. The library is a
// hard requirement of this package's tests: a missing one fails them with
// Load's message, which says how to install it.
func needCore(t *testing.T) *Core {
	t.Helper()
	c, err := NewCore()
	if err != nil {
		t.Fatalf("NewCore: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Core.Close: %v", err)
		}
	})
	return c
}

// The test model: y = x·Wᵀ + b with x [2,4], W [3,4], b [3], y [2,3].
// W is at offset 0 (48 bytes) of the weights, b at offset 48 (12 bytes).
const linearXML = `<?xml version="1.0"?>
<net name="linear" version="11">
  <layers>
    <layer id="0" name="x" type="Parameter" version="opset1">
      <data shape="2,4" element_type="f32"/>
      <output><port id="0" precision="FP32" names="x"><dim>2</dim><dim>4</dim></port></output>
    </layer>
    <layer id="1" name="w" type="Const" version="opset1">
      <data element_type="f32" shape="3,4" offset="0" size="48"/>
      <output><port id="0" precision="FP32"><dim>3</dim><dim>4</dim></port></output>
    </layer>
    <layer id="2" name="xw" type="MatMul" version="opset1">
      <data transpose_a="false" transpose_b="true"/>
      <input><port id="0"><dim>2</dim><dim>4</dim></port><port id="1"><dim>3</dim><dim>4</dim></port></input>
      <output><port id="2" precision="FP32"><dim>2</dim><dim>3</dim></port></output>
    </layer>
    <layer id="3" name="b" type="Const" version="opset1">
      <data element_type="f32" shape="3" offset="48" size="12"/>
      <output><port id="0" precision="FP32"><dim>3</dim></port></output>
    </layer>
    <layer id="4" name="y" type="Add" version="opset1">
      <data auto_broadcast="numpy"/>
      <input><port id="0"><dim>2</dim><dim>3</dim></port><port id="1"><dim>3</dim></port></input>
      <output><port id="2" precision="FP32" names="y"><dim>2</dim><dim>3</dim></port></output>
    </layer>
    <layer id="5" name="y/sink" type="Result" version="opset1">
      <input><port id="0"><dim>2</dim><dim>3</dim></port></input>
    </layer>
  </layers>
  <edges>
    <edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>
    <edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>
    <edge from-layer="2" from-port="2" to-layer="4" to-port="0"/>
    <edge from-layer="3" from-port="0" to-layer="4" to-port="1"/>
    <edge from-layer="4" from-port="2" to-layer="5" to-port="0"/>
  </edges>
</net>
`

var (
	linearW = [3][4]float32{
		{0.5, -1, 2, 0.25},
		{-0.75, 1.5, 0, 3},
		{1, 1, -1, -2},
	}
	linearB = [3]float32{0.1, -0.2, 0.3}
)

// linearRef computes y = x·Wᵀ + b in Go, in float64.
func linearRef(x []float32) []float32 {
	y := make([]float32, 6)
	for i := 0; i < 2; i++ {
		for j := 0; j < 3; j++ {
			s := float64(linearB[j])
			for k := 0; k < 4; k++ {
				s += float64(x[i*4+k]) * float64(linearW[j][k])
			}
			y[i*3+j] = float32(s)
		}
	}
	return y
}

// compileOpts keeps test compiles exact (f32) and light on a shared machine.
var compileOpts = []Property{
	{"INFERENCE_PRECISION_HINT", "f32"},
	{"INFERENCE_NUM_THREADS", "1"},
	{"ENABLE_CPU_PINNING", "NO"},
}

// readLinear reads the test model with its weights in a HostBuffer. The
// buffer is freed after everything the test closes (cleanups run in reverse).
func readLinear(t *testing.T, c *Core) *Model {
	t.Helper()
	m, wb, err := readLinearNoT(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wb.Free)
	t.Cleanup(m.Close)
	return m
}

// readLinearNoT is readLinear for goroutines that cannot use t: the caller
// closes the model, then frees the buffer.
func readLinearNoT(c *Core) (*Model, *HostBuffer, error) {
	wb, err := AllocHost(60)
	if err != nil {
		return nil, nil, err
	}
	b := wb.Bytes()
	for j := 0; j < 3; j++ {
		for k := 0; k < 4; k++ {
			binary.LittleEndian.PutUint32(b[(j*4+k)*4:], math.Float32bits(linearW[j][k]))
		}
		binary.LittleEndian.PutUint32(b[48+j*4:], math.Float32bits(linearB[j]))
	}
	wt, err := NewTensorFromHost(U8, []int64{60}, wb)
	if err != nil {
		wb.Free()
		return nil, nil, err
	}
	defer wt.Close() // the model keeps the memory, not the handle
	m, err := c.ReadModel([]byte(linearXML), wt)
	if err != nil {
		wb.Free()
		return nil, nil, err
	}
	return m, wb, nil
}

func compileLinear(t *testing.T, c *Core) *CompiledModel {
	t.Helper()
	cm, err := c.CompileModel(readLinear(t, c), "CPU", compileOpts...)
	if err != nil {
		t.Fatalf("CompileModel: %v", err)
	}
	t.Cleanup(cm.Close)
	return cm
}

// runLinear binds x (over a HostBuffer) and returns y from one Infer.
func runLinear(t *testing.T, cm *CompiledModel, x []float32) []float32 {
	t.Helper()
	req, err := cm.NewInferRequest()
	if err != nil {
		t.Fatal(err)
	}
	defer req.Close()
	xb, err := AllocHost(len(x) * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer xb.Free()
	in, err := NewTensorFromHost(F32, []int64{2, 4}, xb)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	copy(in.Float32s(), x)
	if err := req.SetTensor("x", in); err != nil {
		t.Fatal(err)
	}
	if err := req.Infer(); err != nil {
		t.Fatal(err)
	}
	out, err := req.Tensor("y")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	return append([]float32(nil), out.Float32s()...)
}

func assertClose(t *testing.T, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d values %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > tol {
			t.Errorf("[%d] = %v, want %v (|diff| %g > %g)", i, got[i], want[i], d, tol)
		}
	}
}
