// Package schema names and checks the versions of ovrun's JSON outputs
// (docs/outputs.md). Every output carries a "schema" field, written first,
// of the form "ovrun.NAME/VERSION": "ovrun.generate/1", "ovrun.run/1".
// VERSION grows when a field is removed or renamed or changes its type,
// unit or meaning; adding a field keeps it. A reader accepts a file
// without the field (written before outputs carried one), its own
// kind at its own version or an older one, and refuses a newer version
// or another kind with one clear error.
package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNewer is wrapped by Check's error for a file written by a newer ovrun.
var ErrNewer = errors.New("newer than this ovrun reads")

// ErrKind is wrapped by Check's error for a file of another kind (a run
// summary where a cost profile was wanted).
var ErrKind = errors.New("another kind of file")

// ErrMalformed is wrapped by Check's error for a schema field that is not
// NAME/VERSION.
var ErrMalformed = errors.New("malformed schema")

// Parse splits a schema into its name and version: "ovrun.run/1" is
// "ovrun.run", 1.
func Parse(id string) (name string, version int, err error) {
	name, v, ok := strings.Cut(id, "/")
	n, verr := strconv.Atoi(v)
	if !ok || name == "" || verr != nil || n < 1 || strconv.Itoa(n) != v {
		return "", 0, fmt.Errorf("%w: %q (want NAME/VERSION, e.g. ovrun.run/1)", ErrMalformed, id)
	}
	return name, n, nil
}

// Check accepts a file's schema, got, for a reader of want: got empty
// (the file predates the field), or want's name at want's version or an
// older one.
func Check(got, want string) error {
	wname, wver, err := Parse(want)
	if err != nil {
		return fmt.Errorf("reader's schema %w", err)
	}
	if got == "" {
		return nil
	}
	name, ver, err := Parse(got)
	switch {
	case err != nil:
		return fmt.Errorf("schema %w", err)
	case name != wname:
		return fmt.Errorf("schema %s: %w (want %s)", got, ErrKind, wname)
	case ver > wver:
		return fmt.Errorf("schema %s is %w (%s): read it with the ovrun that wrote it, or a newer one", got, ErrNewer, want)
	}
	return nil
}

// CheckJSON reads the "schema" field of a JSON object and checks it
// against want, before the caller decodes the rest into want's type (a
// newer file may not decode). A document that is not a JSON object is
// left to the caller's decoding to report.
func CheckJSON(doc []byte, want string) error {
	var head struct {
		Schema json.RawMessage `json:"schema"`
	}
	if json.Unmarshal(doc, &head) != nil || head.Schema == nil {
		return Check("", want)
	}
	var got string
	if err := json.Unmarshal(head.Schema, &got); err != nil {
		return fmt.Errorf("schema %w: %s is not a string", ErrMalformed, head.Schema)
	}
	return Check(got, want)
}
