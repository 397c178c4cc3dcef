package ov

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"unsafe"
)

// InferRequest runs a compiled model on bound tensors. One request must not
// be used from two goroutines at once; make one request per goroutine.
type InferRequest struct {
	p *C.ov_infer_request_t
}

// SetTensor binds t to the input or output tensor called name. No data is
// copied: the request reads (or writes) t's memory on each Infer, so that
// memory must outlive the binding.
func (r *InferRequest) SetTensor(name string, t *Tensor) error {
	if r == nil || r.p == nil {
		return closedError("set tensor")
	}
	if t == nil || t.p == nil {
		return closedError("set tensor: tensor")
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return statusError("ov_infer_request_set_tensor", C.ovr_infer_request_set_tensor(r.p, cname, t.p))
}

// Tensor returns the tensor called name (an input, or an output after Infer).
// The returned Tensor is a new handle: Close it when done. It views the
// request's memory, which may change on the next Infer.
func (r *InferRequest) Tensor(name string) (*Tensor, error) {
	if r == nil || r.p == nil {
		return nil, closedError("get tensor")
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var t *C.ov_tensor_t
	if err := statusError("ov_infer_request_get_tensor", C.ovr_infer_request_get_tensor(r.p, cname, &t)); err != nil {
		return nil, err
	}
	return &Tensor{p: t}, nil
}

// Infer runs the model synchronously on the calling goroutine's thread.
func (r *InferRequest) Infer() error {
	if r == nil || r.p == nil {
		return closedError("infer")
	}
	return statusError("ov_infer_request_infer", C.ovr_infer_request_infer(r.p))
}

// InferContext runs the model and asks OpenVINO to cancel it when ctx is
// done. A cancelled run returns an error wrapping both ctx.Err() and the
// *Error with status INFER_CANCELLED.
func (r *InferRequest) InferContext(ctx context.Context) error {
	if r == nil || r.p == nil {
		return closedError("infer")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if ctx.Done() == nil {
		return r.Infer()
	}
	if err := statusError("ov_infer_request_start_async", C.ovr_infer_request_start_async(r.p)); err != nil {
		return err
	}
	finished := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case <-ctx.Done():
			// Cancelling a request that already finished does nothing.
			C.ovr_infer_request_cancel(r.p)
		case <-finished:
		}
	}()
	st := C.ovr_infer_request_wait(r.p)
	close(finished)
	<-watcherDone
	err := statusError("ov_infer_request_wait", st)
	if err != nil && ctx.Err() != nil {
		var oe *Error
		if errors.As(err, &oe) && oe.Status == int(C.INFER_CANCELLED) {
			return fmt.Errorf("ov: infer: %w (%w)", ctx.Err(), err)
		}
	}
	return err
}

// Close frees the request. Tensors obtained from it must still be closed,
// before or after; read their data only while the request is open.
func (r *InferRequest) Close() {
	if r == nil || r.p == nil {
		return
	}
	C.ovr_infer_request_free(r.p)
	r.p = nil
}
