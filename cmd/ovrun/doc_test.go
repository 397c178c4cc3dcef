package main

import (
	"testing"

	"github.com/ovtoolkit/ovrun/internal/doccheck"
)

// Every ovrun command line in README.md and docs/ parses against the real
// command definitions.
func TestDocumentedCommandLines(t *testing.T) {
	lines, err := doccheck.Find("../..", "ovrun")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 20 {
		t.Fatalf("found only %d documented ovrun command lines; is the extraction broken?", len(lines))
	}
	for _, l := range lines {
		if err := doccheck.Check(newApp(), l, nil); err != nil {
			t.Errorf("%s\n\t%v", l, err)
		}
	}
}
