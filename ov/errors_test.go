package ov

import "testing"

// status looks a status up by its enumerator name, so tests hold no numbers.
func status(t *testing.T, name string) int {
	t.Helper()
	for v, n := range statusNames {
		if n == name {
			return v
		}
	}
	t.Fatalf("no status %s", name)
	return 0
}

func TestErrorText(t *testing.T) {
	general := status(t, "GENERAL_ERROR")
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{"no message", &Error{Op: "ov_core_create", Status: status(t, "INVALID_C_PARAM")}, "ov_core_create: INVALID_C_PARAM"},
		{"openvino chain", &Error{Op: "ov_core_compile_model", Status: general, Msg: "Exception from src/inference/src/cpp/core.cpp:117:\nException from src/plugins/intel_cpu/src/config.cpp:506:\nNotFound: Unsupported property X by CPU plugin.\n"},
			"ov_core_compile_model: GENERAL_ERROR: NotFound: Unsupported property X by CPU plugin."},
		{"check line", &Error{Op: "op", Status: general, Msg: "Check 'a == b' failed at x.cpp:1:\nbad  thing\nmore"}, "op: GENERAL_ERROR: bad thing more"},
		{"only locations", &Error{Op: "op", Status: general, Msg: "Exception from a.cpp:1:"}, "op: GENERAL_ERROR: Exception from a.cpp:1:"},
		{"unknown status", &Error{Op: "op", Status: -1000}, "op: STATUS(-1000)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}
