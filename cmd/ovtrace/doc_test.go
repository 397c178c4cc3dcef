package main

import (
	"testing"

	"github.com/ovtoolkit/ovrun/internal/doccheck"
)

// Every ovtrace command line in README.md and docs/ parses against the real
// command definitions, with flags after arguments as main allows.
func TestDocumentedCommandLines(t *testing.T) {
	lines, err := doccheck.Find("../..", "ovtrace")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 15 {
		t.Fatalf("found only %d documented ovtrace command lines; is the extraction broken?", len(lines))
	}
	for _, l := range lines {
		if err := doccheck.Check(newApp(), l, flagsFirst); err != nil {
			t.Errorf("%s\n\t%v", l, err)
		}
	}
}
