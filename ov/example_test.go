package ov_test

import (
	"fmt"
	"unsafe"

	"github.com/ovtoolkit/ovrun/ov"
)

// A model with no weights: y = x + x. Weights, when there are any, go in a
// HostBuffer wrapped as a U8 tensor and passed to ReadModel.
const doubleXML = `<net name="double" version="11"><layers>
<layer id="0" name="x" type="Parameter" version="opset1"><data shape="1,3" element_type="f32"/>
 <output><port id="0" precision="FP32" names="x"><dim>1</dim><dim>3</dim></port></output></layer>
<layer id="1" name="y" type="Add" version="opset1"><data auto_broadcast="numpy"/>
 <input><port id="0"><dim>1</dim><dim>3</dim></port><port id="1"><dim>1</dim><dim>3</dim></port></input>
 <output><port id="2" precision="FP32" names="y"><dim>1</dim><dim>3</dim></port></output></layer>
<layer id="2" name="y/sink" type="Result" version="opset1">
 <input><port id="0"><dim>1</dim><dim>3</dim></port></input></layer>
</layers><edges>
<edge from-layer="0" from-port="0" to-layer="1" to-port="0"/>
<edge from-layer="0" from-port="0" to-layer="1" to-port="1"/>
<edge from-layer="1" from-port="2" to-layer="2" to-port="0"/>
</edges></net>`

// Example shows the life cycle: read, compile, bind host memory, infer, and
// close in reverse order (memory last).
func Example() {
	core, err := ov.NewCore()
	if err != nil {
		fmt.Println(err) // e.g. the library is missing: one line saying what to do
		return
	}
	defer core.Close()

	model, err := core.ReadModel([]byte(doubleXML), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer model.Close()
	compiled, err := core.CompileModel(model, "CPU",
		ov.Property{Key: "INFERENCE_PRECISION_HINT", Value: "f32"},
		ov.Property{Key: "INFERENCE_NUM_THREADS", Value: "1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer compiled.Close()

	buf, err := ov.AllocHost(3 * 4) // outlives the tensor and the request
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Free()
	copy(unsafe.Slice((*float32)(buf.Ptr()), 3), []float32{1, 2.5, -4})
	x, err := ov.NewTensorFromHost(ov.F32, []int64{1, 3}, buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer x.Close()

	req, err := compiled.NewInferRequest()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer req.Close()
	if err := req.SetTensor("x", x); err != nil {
		fmt.Println(err)
		return
	}
	if err := req.Infer(); err != nil {
		fmt.Println(err)
		return
	}
	y, err := req.Tensor("y")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer y.Close()
	fmt.Println(y.Float32s())
	// Output: [2 5 -8]
}
