package ov

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// ErrClosed is returned (wrapped) when a method is called on a nil or closed
// Core, Model, CompiledModel, InferRequest or Tensor.
var ErrClosed = errors.New("use of closed openvino object")

// Error is a failed OpenVINO C call: the function, its ov_status_e and the
// message OpenVINO recorded for it.
type Error struct {
	Op     string // C function that failed, e.g. "ov_core_compile_model"
	Status int    // ov_status_e value
	Msg    string // OpenVINO's full message (often several lines); empty when the status carries none
}

// Error returns one line, "op: STATUS_NAME: message", where message is Msg
// without OpenVINO's "Exception from <file>:<line>:" and "Check ... failed
// at ...:" location lines.
func (e *Error) Error() string {
	if e.Msg == "" {
		return e.Op + ": " + StatusName(e.Status)
	}
	return e.Op + ": " + StatusName(e.Status) + ": " + summarize(e.Msg)
}

// summarize drops the source-location lines of an OpenVINO message and
// joins the rest onto one line.
func summarize(msg string) string {
	var keep []string
	for _, line := range strings.Split(msg, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasSuffix(line, ":") &&
			(strings.HasPrefix(line, "Exception from ") || strings.HasPrefix(line, "Check ")) {
			continue
		}
		keep = append(keep, line)
	}
	if len(keep) == 0 {
		return oneLine(msg)
	}
	return oneLine(strings.Join(keep, " "))
}

var statusNames = map[int]string{
	int(C.OK):                     "OK",
	int(C.GENERAL_ERROR):          "GENERAL_ERROR",
	int(C.NOT_IMPLEMENTED):        "NOT_IMPLEMENTED",
	int(C.NETWORK_NOT_LOADED):     "NETWORK_NOT_LOADED",
	int(C.PARAMETER_MISMATCH):     "PARAMETER_MISMATCH",
	int(C.NOT_FOUND):              "NOT_FOUND",
	int(C.OUT_OF_BOUNDS):          "OUT_OF_BOUNDS",
	int(C.UNEXPECTED):             "UNEXPECTED",
	int(C.REQUEST_BUSY):           "REQUEST_BUSY",
	int(C.RESULT_NOT_READY):       "RESULT_NOT_READY",
	int(C.NOT_ALLOCATED):          "NOT_ALLOCATED",
	int(C.INFER_NOT_STARTED):      "INFER_NOT_STARTED",
	int(C.NETWORK_NOT_READ):       "NETWORK_NOT_READ",
	int(C.INFER_CANCELLED):        "INFER_CANCELLED",
	int(C.INVALID_C_PARAM):        "INVALID_C_PARAM",
	int(C.UNKNOWN_C_ERROR):        "UNKNOWN_C_ERROR",
	int(C.NOT_IMPLEMENT_C_METHOD): "NOT_IMPLEMENT_C_METHOD",
	int(C.UNKNOW_EXCEPTION):       "UNKNOW_EXCEPTION",
}

// StatusName returns the ov_status_e enumerator name for s, or
// "STATUS(<n>)" for a value the headers do not define.
func StatusName(s int) string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("STATUS(%d)", s)
}

// errMu keeps our reads of OpenVINO's last-error string in order.
var errMu sync.Mutex

// statusError is the one place a C status becomes a Go error. It returns nil
// for OK and otherwise an *Error carrying ov_get_last_err_msg's text (freed
// here with ov_free).
//
// OpenVINO keeps a single process-wide last message, set only when a call
// fails by exception (GENERAL_ERROR, NOT_IMPLEMENTED, REQUEST_BUSY,
// INFER_CANCELLED, UNKNOW_EXCEPTION) and never cleared on success. For other
// statuses, such as INVALID_C_PARAM, the message would be stale, so none is
// read. If two calls fail at the same moment on different threads, one error
// may carry the other's message; the status is always right.
func statusError(op string, st C.ov_status_e) error {
	if st == C.OK {
		return nil
	}
	e := &Error{Op: op, Status: int(st)}
	switch st {
	case C.GENERAL_ERROR, C.NOT_IMPLEMENTED, C.REQUEST_BUSY, C.INFER_CANCELLED, C.UNKNOW_EXCEPTION:
		errMu.Lock()
		if msg := C.ovr_get_last_err_msg(); msg != nil {
			e.Msg = strings.TrimSpace(C.GoString(msg))
			C.ovr_free(msg)
		}
		errMu.Unlock()
	}
	return e
}

func closedError(what string) error {
	return fmt.Errorf("ov: %s: %w", what, ErrClosed)
}
