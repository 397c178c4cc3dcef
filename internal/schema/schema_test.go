package schema

import (
	"errors"
	"fmt"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, got string
		want      error
	}{
		{"absent: written before the field", "", nil},
		{"same", "ovrun.run/2", nil},
		{"older", "ovrun.run/1", nil},
		{"newer", "ovrun.run/3", ErrNewer},
		{"another kind", "ovrun.cost/1", ErrKind},
		{"no version", "ovrun.run", ErrMalformed},
		{"version 0", "ovrun.run/0", ErrMalformed},
		{"version with sign", "ovrun.run/+2", ErrMalformed},
		{"no name", "/2", ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.got, "ovrun.run/2")
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("Check(%q) = %v, want %v", tc.got, err, tc.want)
			}
		})
	}
	if err := Check("ovrun.run/1", "run"); !errors.Is(err, ErrMalformed) {
		t.Errorf("a malformed reader schema: %v", err)
	}
}

func TestCheckJSON(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      error
	}{
		{"no field", `{"model": "m"}`, nil},
		{"null", `{"schema": null}`, nil},
		{"same", `{"schema": "ovrun.cost/1", "rungs": []}`, nil},
		{"newer", `{"schema": "ovrun.cost/2", "rungs": "changed"}`, ErrNewer},
		{"a number", `{"schema": 2}`, ErrMalformed},
		{"not an object: left to the caller", `[1, 2]`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckJSON([]byte(tc.doc), "ovrun.cost/1")
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("CheckJSON(%s) = %v, want %v", tc.doc, err, tc.want)
			}
		})
	}
}

func ExampleCheck() {
	fmt.Println(Check("ovrun.cost/2", "ovrun.cost/1"))
	// Output: schema ovrun.cost/2 is newer than this ovrun reads (ovrun.cost/1): read it with the ovrun that wrote it, or a newer one
}
