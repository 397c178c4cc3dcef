package childproc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRunReportsHowTheChildEnded(t *testing.T) {
	sh := func(script string) Cmd { return Cmd{Name: "child", Path: "/bin/sh", Args: []string{"-c", script}} }
	tests := []struct {
		name  string
		cmd   Cmd
		wants []string
	}{
		{name: "exit status", cmd: sh("echo first >&2; echo 'the last line' >&2; exit 3"), wants: []string{"child exited with status 3", `its last stderr line: "the last line"`}},
		{name: "signal", cmd: sh("kill -SEGV $$"), wants: []string{"child was killed by signal SIGSEGV"}},
		{name: "timeout", cmd: func() Cmd { c := sh("sleep 5"); c.Timeout = 50 * time.Millisecond; return c }(), wants: []string{"child ran past its 50ms timeout: killed"}},
		{name: "memory", cmd: func() Cmd { c := sh("sleep 5"); c.MemoryMiB = 1; return c }(), wants: []string{"child exceeded its 1 MiB memory limit", "killed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cmd)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want *Error", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) || strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q: want one line with %q", err, w)
				}
			}
		})
	}
}

func TestRunReturnsStdoutAndHonoursCancel(t *testing.T) {
	out, err := Run(context.Background(), Cmd{Name: "child", Path: "/bin/sh", Args: []string{"-c", `cat; echo '{"n": 2}'`}, Stdin: []byte("noise\n")})
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ N int }
	if err := DecodeLastJSONLine(out, &v); err != nil || v.N != 2 {
		t.Errorf("decoded %+v, %v from %q", v, err, out)
	}
	if err := DecodeLastJSONLine([]byte("no json\n"), &v); err == nil {
		t.Error("a line-less output decoded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Run(ctx, Cmd{Name: "child", Path: "/bin/sh", Args: []string{"-c", "sleep 5"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled run: %v", err)
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	b := &tailBuffer{max: 8}
	b.Write([]byte("0123456789"))
	b.Write([]byte("ab"))
	if got := b.String(); got != "456789ab" {
		t.Errorf("tail %q", got)
	}
	if got := EnvWithout([]string{"A=1", "B=2", "AB=3"}, "A"); strings.Join(got, ",") != "B=2,AB=3" {
		t.Errorf("EnvWithout: %v", got)
	}
}
