package cliutil

import (
	"os"
	"strings"
	"testing"
)

func TestStatusDrawsAndClears(t *testing.T) {
	var b strings.Builder
	s := StatusTo(&b)
	s.Clear() // nothing drawn yet
	s.Show("step %d/%d", 1, 2)
	s.Show("step %d/%d", 2, 2)
	s.Clear()
	s.Clear()
	if got, want := b.String(), "\r\033[Kstep 1/2\r\033[Kstep 2/2\r\033[K"; got != want {
		t.Errorf("drew %q, want %q", got, want)
	}
	var none *Status
	none.Show("x")
	none.Clear()
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if NewStatus(f, false) != nil || NewStatus(os.Stderr, true) != nil {
		t.Error("a status on a regular file, or a quiet one, draws")
	}
}
