package ov

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// This file tests ovrun's kernel (ov/ext/gguf_linear.cc) on its own,
// against float64 references written here from its documented layout (an
// implementation of the layout independent of model/kernel.go's).

// kernelFormats are the kernel's layouts by name: the block type's bytes a
// block, whether its quants are nibbles, whether it stores a minimum.
var kernelFormats = map[string]struct {
	bytes   int
	q4, min bool
}{"q4_1x8": {20, true, true}, "q4_0x8": {18, true, false}, "q8_0x8": {34, false, false}}

// kernelBlocks are random rows of the block type of layout typ (rows x k,
// the file's block bytes, scales ordinary f16 values) and their decoded
// weights.
func kernelBlocks(rng *rand.Rand, typ string, rows, k int) (blocks []byte, w [][]float64) {
	bb, q4, hasMin := kernelFormats[typ].bytes, kernelFormats[typ].q4, kernelFormats[typ].min
	nb := k / 32
	blocks = make([]byte, rows*nb*bb)
	w = make([][]float64, rows)
	for r := range rows {
		w[r] = make([]float64, k)
		for b := range nb {
			blk := blocks[(r*nb+b)*bb:]
			d := f16Bits(rng.Float64()*0.02 + 0.001)
			binary.LittleEndian.PutUint16(blk, d)
			if q4 {
				quants, m := blk[2:], -8*f16Value(d) // Q4_0: w = d*(q - 8)
				if hasMin {
					mb := f16Bits(-rng.Float64() * 0.1)
					binary.LittleEndian.PutUint16(blk[2:], mb)
					quants, m = blk[4:], f16Value(mb)
				}
				for e := range 16 {
					lo, hi := rng.IntN(16), rng.IntN(16)
					quants[e] = byte(lo | hi<<4)
					w[r][b*32+e] = f16Value(d)*float64(lo) + m
					w[r][b*32+16+e] = f16Value(d)*float64(hi) + m
				}
				continue
			}
			for e := range 32 {
				q := int8(rng.IntN(256) - 128)
				blk[2+e] = byte(q)
				w[r][b*32+e] = f16Value(d) * float64(q)
			}
		}
	}
	return blocks, w
}

// kernelLayout repacks rows of blocks as the kernel reads them: per run of
// 8 rows and block, the 8 scales, (Q4_1: the 8 minima,) then byte 32j + 4r
// + i = row r's quant byte of elements 4j+i (Q4: 4j+i and 16+4j+i).
func kernelLayout(blocks []byte, typ string, rows, k int) []byte {
	bb, hasMin := kernelFormats[typ].bytes, kernelFormats[typ].min
	nb := k / 32
	out := make([]byte, len(blocks))
	for row := range rows {
		run, r := row/8, row%8
		for b := range nb {
			src := blocks[(row*nb+b)*bb : (row*nb+b+1)*bb]
			g := out[(run*nb+b)*8*bb:]
			copy(g[2*r:2*r+2], src[0:2])
			quants, base := src[2:], 16
			if hasMin {
				copy(g[16+2*r:16+2*r+2], src[2:4])
				quants, base = src[4:], 32
			}
			for e, q := range quants {
				g[base+32*(e/4)+4*r+e%4] = q
			}
		}
	}
	return out
}

// kernelXML is GGUFLinear(x [m, k], blocks) -> y and GGUFGather(blocks,
// ids [n]) -> rows, the blocks one constant of the weights.
func kernelXML(typ, act string, m, k, n, ids, rowBytes int) string {
	return fmt.Sprintf(`<?xml version="1.0"?>
<net name="kernel" version="11"><layers>
<layer id="0" name="x" type="Parameter" version="opset1"><data shape="%[3]d,%[4]d" element_type="f32"/><output><port id="0" precision="FP32" names="x"><dim>%[3]d</dim><dim>%[4]d</dim></port></output></layer>
<layer id="1" name="w" type="Const" version="opset1"><data element_type="u8" shape="%[5]d,%[7]d" offset="0" size="%[8]d"/><output><port id="0" precision="U8"><dim>%[5]d</dim><dim>%[7]d</dim></port></output></layer>
<layer id="2" name="lin" type="GGUFLinear" version="ovrun"><data type="%[1]s" activations="%[2]s"/><input><port id="0"><dim>%[3]d</dim><dim>%[4]d</dim></port><port id="1"><dim>%[5]d</dim><dim>%[7]d</dim></port><port id="2"><dim>1</dim></port></input><output><port id="3" precision="FP32" names="y"><dim>%[3]d</dim><dim>%[5]d</dim></port></output></layer>
<layer id="3" name="y" type="Result" version="opset1"><input><port id="0"><dim>%[3]d</dim><dim>%[5]d</dim></port></input></layer>
<layer id="4" name="ids" type="Parameter" version="opset1"><data shape="%[6]d" element_type="i64"/><output><port id="0" precision="I64" names="ids"><dim>%[6]d</dim></port></output></layer>
<layer id="5" name="gather" type="GGUFGather" version="ovrun"><data type="%[1]s"/><input><port id="0"><dim>%[5]d</dim><dim>%[7]d</dim></port><port id="1"><dim>%[6]d</dim></port></input><output><port id="2" precision="FP32" names="rows"><dim>%[6]d</dim><dim>%[4]d</dim></port></output></layer>
<layer id="6" name="rows" type="Result" version="opset1"><input><port id="0"><dim>%[6]d</dim><dim>%[4]d</dim></port></input></layer>
<layer id="7" name="want" type="Parameter" version="opset1"><data shape="1" element_type="i64"/><output><port id="0" precision="I64" names="want"><dim>1</dim></port></output></layer>
</layers><edges>
<edge from-layer="0" from-port="0" to-layer="2" to-port="0"/><edge from-layer="1" from-port="0" to-layer="2" to-port="1"/><edge from-layer="7" from-port="0" to-layer="2" to-port="2"/><edge from-layer="2" from-port="3" to-layer="3" to-port="0"/>
<edge from-layer="1" from-port="0" to-layer="5" to-port="0"/><edge from-layer="4" from-port="0" to-layer="5" to-port="1"/><edge from-layer="5" from-port="2" to-layer="6" to-port="0"/>
</edges></net>`, typ, act, m, k, n, ids, rowBytes, n*rowBytes)
}

// quantized is x as the kernel's 8-bit activations decode: per 32
// elements d = max|x|/127 (in f32), q = x/d rounded half to even.
func quantized(x []float32) []float64 {
	out := make([]float64, len(x))
	for b := 0; b < len(x); b += 32 {
		var amax float32
		for _, v := range x[b : b+32] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		if d == 0 {
			continue
		}
		id := 1 / d
		for e, v := range x[b : b+32] {
			out[b+e] = float64(d) * math.RoundToEven(float64(v*id))
		}
	}
	return out
}

// TestKernelMatchesReference multiplies random Q4_1, Q4_0 and Q8_0 matrices by
// one token and by several (the prompt path), exactly and with 8-bit
// activations, and gathers rows, ids out of range among them, against
// float64 references: exact products to f32 rounding; 8-bit ones against
// the same quantization of x in float64 (the minimum's term with the
// exact sum of x), so a wrong scale, sign or lane is caught, not hidden in
// the quantization's error. The product's rows input (want) asks for the
// first rows alone, as a padded decode graph does: 5 tokens with 3
// wanted, and a call that wants none still runs.
func TestKernelMatchesReference(t *testing.T) {
	c := needCore(t)
	if err := c.GGUFLinear(); err != nil {
		t.Fatalf("kernel unavailable: %v", err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const n, k = 48, 96
	ids := []int64{0, n - 1, 9, -1, n, 8}
	for _, typ := range []string{"q4_1x8", "q4_0x8", "q8_0x8"} {
		bb, q4, hasMin := kernelFormats[typ].bytes, kernelFormats[typ].q4, kernelFormats[typ].min
		blocks, w := kernelBlocks(rng, typ, n, k)
		layout := kernelLayout(blocks, typ, n, k)
		for _, act := range []string{"f32", "q8"} {
			// 70 tokens: the prompt path's tiles of 64 and of 4, and
			// its remainders.
			for _, m := range []int{1, 5, 70} {
				t.Run(fmt.Sprintf("%s %s %d tokens", typ, act, m), func(t *testing.T) {
					wb, err := AllocHost(len(layout))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(wb.Free)
					copy(wb.Bytes(), layout)
					wt, err := NewTensorFromHost(U8, []int64{int64(len(layout))}, wb)
					if err != nil {
						t.Fatal(err)
					}
					defer wt.Close()
					model, err := c.ReadModel([]byte(kernelXML(typ, act, m, k, n, len(ids), k/32*bb)), wt)
					if err != nil {
						t.Fatal(err)
					}
					defer model.Close()
					// Two threads: the rows are split between them.
					req := requestOn(t, c, model, Property{"INFERENCE_NUM_THREADS", "2"}, Property{"ENABLE_CPU_PINNING", "NO"})
					x := make([]float32, m*k)
					for i := range x {
						x[i] = float32(rng.NormFloat64())
					}
					xt, err := NewTensor(F32, []int64{int64(m), k})
					if err != nil {
						t.Fatal(err)
					}
					defer xt.Close()
					copy(xt.Float32s(), x)
					it, err := NewTensor(I64, []int64{int64(len(ids))})
					if err != nil {
						t.Fatal(err)
					}
					defer it.Close()
					copy(it.Int64s(), ids)
					real := m // the rows wanted
					if m == 5 {
						real = 3
					}
					wt2, err := NewTensor(I64, []int64{1})
					if err != nil {
						t.Fatal(err)
					}
					defer wt2.Close()
					wt2.Int64s()[0] = int64(real)
					if err := req.SetTensor("want", wt2); err != nil {
						t.Fatal(err)
					}
					if err := req.SetTensor("x", xt); err != nil {
						t.Fatal(err)
					}
					if err := req.SetTensor("ids", it); err != nil {
						t.Fatal(err)
					}
					if err := req.Infer(); err != nil {
						t.Fatal(err)
					}
					y := outputOf(t, req, "y")
					for tok := range real {
						xs := make([]float64, k)
						for e := range k {
							xs[e] = float64(x[tok*k+e])
						}
						if act == "q8" {
							xs = quantized(x[tok*k : (tok+1)*k])
						}
						for r := range n {
							var want, scale float64
							for e := range k {
								// The minimum's term reads the exact x.
								wr := w[r][e]
								if q4 && act == "q8" {
									blk := blocks[(r*(k/32)+e/32)*bb:]
									mm := -8 * f16Value(binary.LittleEndian.Uint16(blk))
									if hasMin {
										mm = f16Value(binary.LittleEndian.Uint16(blk[2:]))
									}
									want += (wr-mm)*xs[e] + mm*float64(x[tok*k+e])
								} else {
									want += wr * xs[e]
								}
								scale += math.Abs(wr * float64(x[tok*k+e]))
							}
							if got := float64(y[tok*n+r]); math.Abs(got-want) > 1e-5*scale+1e-6 {
								t.Fatalf("token %d row %d: %g, want %g", tok, r, got, want)
							}
						}
					}
					rows := outputOf(t, req, "rows")
					for i, id := range ids {
						for e := range k {
							want := 0.0
							if id >= 0 && id < n {
								want = w[id][e]
							}
							if got := float64(rows[i*k+e]); math.Abs(got-want) > 1e-6*math.Abs(want) {
								t.Fatalf("gathered id %d, element %d: %g, want %g", id, e, got, want)
							}
						}
					}
					// No rows wanted: the call runs and multiplies nothing.
					wt2.Int64s()[0] = 0
					if err := req.Infer(); err != nil {
						t.Fatalf("a call that wants no rows: %v", err)
					}
				})
			}
		}
	}
}

// TestKernelMatchesReferenceAVX2 runs TestKernelMatchesReference again in
// a process limited to AVX2 by ONEDNN_MAX_CPU_ISA (read once, by the
// kernel's first product), so that the products without AVX512_VNNI are
// checked on a CPU that has it too.
func TestKernelMatchesReferenceAVX2(t *testing.T) {
	if os.Getenv("ONEDNN_MAX_CPU_ISA") != "" {
		t.Skip("this process is limited already")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelMatchesReference$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "ONEDNN_MAX_CPU_ISA=AVX2")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestKernelMatchesReference ") {
		t.Fatalf("with ONEDNN_MAX_CPU_ISA=AVX2: %v\n%s", err, out)
	}
}

// requestOn compiles model on the CPU at f32 with props and is an infer
// request on it; both are closed when the test ends.
func requestOn(t *testing.T, c *Core, model *Model, props ...Property) *InferRequest {
	t.Helper()
	cm, err := c.CompileModel(model, "CPU", append([]Property{{"INFERENCE_PRECISION_HINT", "f32"}}, props...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	req, err := cm.NewInferRequest()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { req.Close() })
	return req
}

func outputOf(t *testing.T, req *InferRequest, name string) []float32 {
	t.Helper()
	out, err := req.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	return append([]float32(nil), out.Float32s()...)
}

// f16Bits is v rounded to the nearest f16, as bits (normal values only).
func f16Bits(v float64) uint16 {
	f := math.Float32bits(float32(v))
	sign := uint16(f>>16) & 0x8000
	exp := int((f>>23)&0xff) - 127 + 15
	mant := f & 0x7fffff
	h := uint32(exp)<<10 | mant>>13
	if mant&0x1fff > 0x1000 || mant&0x1fff == 0x1000 && h&1 == 1 {
		h++
	}
	return sign | uint16(h)
}

// f16Value decodes a normal f16.
func f16Value(h uint16) float64 {
	v := math.Ldexp(1+float64(h&0x3ff)/1024, int(h>>10&0x1f)-15)
	if h&0x8000 != 0 {
		return -v
	}
	return v
}
