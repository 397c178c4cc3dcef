package ov

import (
	"slices"
	"testing"
)

func TestElementTypes(t *testing.T) {
	tests := []struct {
		et   ElementType
		name string
		size int
	}{
		{F32, "f32", 4},
		{F16, "f16", 2},
		{BF16, "bf16", 2},
		{I64, "i64", 8},
		{I32, "i32", 4},
		{I8, "i8", 1},
		{U8, "u8", 1},
		{Boolean, "boolean", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.et.String() != tt.name || tt.et.Size() != tt.size {
				t.Errorf("got %s/%d, want %s/%d", tt.et, tt.et.Size(), tt.name, tt.size)
			}
			// The library agrees with the header values we compiled in.
			tn, err := NewTensor(tt.et, []int64{2, 3})
			if err != nil {
				t.Fatal(err)
			}
			defer tn.Close()
			if got := tn.ElementType(); got != tt.et {
				t.Errorf("tensor reports %s, want %s", got, tt.et)
			}
			if got := len(tn.Bytes()); got != 6*tt.size {
				t.Errorf("byte size %d, want %d", got, 6*tt.size)
			}
			shape, err := tn.Shape()
			if err != nil || !slices.Equal(shape, []int64{2, 3}) {
				t.Errorf("Shape() = %v, %v; want [2 3]", shape, err)
			}
		})
	}
	if s := ElementType(-1).String(); s != "element_type(-1)" {
		t.Errorf("unknown type String() = %q", s)
	}
}

func TestTypedViews(t *testing.T) {
	f, err := NewTensor(F32, []int64{3})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	i, err := NewTensor(I64, []int64{2})
	if err != nil {
		t.Fatal(err)
	}
	defer i.Close()
	if len(f.Float32s()) != 3 || f.Int64s() != nil {
		t.Errorf("F32 tensor: Float32s len %d, Int64s %v", len(f.Float32s()), f.Int64s())
	}
	if len(i.Int64s()) != 2 || i.Float32s() != nil {
		t.Errorf("I64 tensor: Int64s len %d, Float32s %v", len(i.Int64s()), i.Float32s())
	}
	i.Int64s()[1] = 42
	if i.Int64s()[1] != 42 {
		t.Error("Int64s is not a view of the tensor's memory")
	}
}

func TestHostBuffer(t *testing.T) {
	for _, n := range []int{0, 1, 63, 4096, 1 << 20} {
		b, err := AllocHost(n)
		if err != nil {
			t.Fatal(err)
		}
		if uintptr(b.Ptr())%HostAlign != 0 {
			t.Errorf("AllocHost(%d) at %p, not %d-aligned", n, b.Ptr(), HostAlign)
		}
		if b.Len() != n || len(b.Bytes()) != n {
			t.Errorf("AllocHost(%d): Len %d, len(Bytes) %d", n, b.Len(), len(b.Bytes()))
		}
		for i, v := range b.Bytes() {
			if v != 0 {
				t.Fatalf("AllocHost(%d): byte %d = %d, want zero", n, i, v)
			}
		}
		b.Free()
		b.Free()
		if b.Ptr() != nil || b.Bytes() != nil || b.Len() != 0 {
			t.Errorf("after Free: %p %v %d", b.Ptr(), b.Bytes(), b.Len())
		}
	}
	u, err := AllocHostUninit(100)
	if err != nil {
		t.Fatal(err)
	}
	if uintptr(u.Ptr())%HostAlign != 0 || u.Len() != 100 {
		t.Errorf("AllocHostUninit(100): %p len %d", u.Ptr(), u.Len())
	}
	u.Free()
	if _, err := AllocHost(-1); err == nil {
		t.Error("AllocHost(-1) succeeded")
	}
}

func TestTensorArgumentErrors(t *testing.T) {
	b, err := AllocHost(16)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	tests := []struct {
		name  string
		et    ElementType
		shape []int64
	}{
		{"buffer too small", F32, []int64{2, 3}},
		{"negative dimension", F32, []int64{-1, 2}},
		{"unknown type", ElementType(-1), []int64{1}},
		{"overflow", I64, []int64{1 << 40, 1 << 40}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tn, err := NewTensorFromHost(tt.et, tt.shape, b); err == nil {
				tn.Close()
				t.Errorf("NewTensorFromHost(%s, %v) succeeded", tt.et, tt.shape)
			}
		})
	}
	if _, err := NewTensorFromPtr(F32, []int64{1}, nil); err == nil {
		t.Error("NewTensorFromPtr(nil) succeeded")
	}
	freed, _ := AllocHost(8)
	freed.Free()
	if _, err := NewTensorFromHost(F32, []int64{2}, freed); err == nil {
		t.Error("NewTensorFromHost(freed buffer) succeeded")
	}
}
