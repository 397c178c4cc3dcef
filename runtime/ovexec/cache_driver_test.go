package ovexec

import (
	"errors"
	"testing"
)

// The driver part of a rung cache key: the NPU's driver and compiler
// versions, none for the CPU (whose keys stay as they were) or for a
// property the device does not report.
func TestDriverOf(t *testing.T) {
	props := map[string]string{"NPU_DRIVER_VERSION": "1688", "NPU_COMPILER_VERSION": "458752"}
	for _, tc := range []struct {
		device, want string
		props        map[string]string
	}{
		{"CPU", "", props},
		{"GPU", "", props},
		{"NPU", "NPU_DRIVER_VERSION=1688,NPU_COMPILER_VERSION=458752", props},
		{"npu.0", "NPU_DRIVER_VERSION=1688,NPU_COMPILER_VERSION=458752", props},
		{"NPU", "NPU_COMPILER_VERSION=458752", map[string]string{"NPU_COMPILER_VERSION": "458752"}},
		{"NPU", "", nil},
	} {
		var asked []string
		get := func(device, key string) (string, error) {
			asked = append(asked, key)
			if device != tc.device {
				t.Errorf("asked device %q, want %q", device, tc.device)
			}
			if v, ok := tc.props[key]; ok {
				return v, nil
			}
			return "", errors.New("unsupported property")
		}
		if got := driverOf(tc.device, get); got != tc.want {
			t.Errorf("driverOf(%s) = %q, want %q", tc.device, got, tc.want)
		}
		if tc.device == "CPU" && len(asked) > 0 {
			t.Errorf("the CPU was asked %q", asked)
		}
	}
}
