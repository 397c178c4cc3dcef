package profiling

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

func readTestdata(f *testing.F, name string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

func FuzzParsePerfScript(f *testing.F) {
	f.Add(readTestdata(f, "perf-script.txt"))
	f.Add([]byte("comm 1/1 [000] 1.0: 10 cpu-clock:\n\t0 f (/lib/x.so)\n"))
	f.Add([]byte("\tstray frame\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePerfScript(bytes.NewReader(b), PerfOptions{})
		if err != nil {
			return
		}
		if err := p.CheckValid(); err != nil {
			t.Fatalf("invalid profile: %v", err)
		}
		if _, err := Top(p, TopOptions{N: 5}); err != nil && !strings.Contains(err.Error(), "sample") {
			t.Logf("Top: %v", err)
		}
	})
}

func FuzzParseCallgrind(f *testing.F) {
	f.Add(readTestdata(f, "compressed.callgrind"))
	f.Add([]byte("events: Ir\nfn=(1) a\n0 5\ncfn=(2) b\ncalls=1000000000 0\n0 7\nfn=(2)\n0 3\n"))
	f.Add([]byte("events: Ir\nfn=(1) a\ncfn=(1)\ncalls=2 0\n0 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := ParseCallgrind(bytes.NewReader(b))
		if err != nil {
			return
		}
		p, err := g.Profile(CallgraphOptions{})
		if err != nil {
			return
		}
		if err := p.CheckValid(); err != nil {
			t.Fatalf("invalid profile: %v", err)
		}
	})
}

// FuzzReadFile: any file is a valid profile or an error, never a panic,
// and a gzip bomb stops at the expansion limit.
func FuzzReadFile(f *testing.F) {
	defer func(n int64) { MaxProfileExpandedBytes = n }(MaxProfileExpandedBytes)
	MaxProfileExpandedBytes = 1 << 20
	g, err := ParseCallgrind(bytes.NewReader(readTestdata(f, "compressed.callgrind")))
	if err != nil {
		f.Fatal(err)
	}
	p, err := g.Profile(CallgraphOptions{})
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	p.Write(&buf)
	f.Add(buf.Bytes())
	p.WriteUncompressed(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "p.pb.gz")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := ReadFile(path)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		if err := p.CheckValid(); err != nil {
			t.Fatalf("invalid profile accepted: %v", err)
		}
	})
}

func TestReadFileStopsAGzipBomb(t *testing.T) {
	defer func(n int64) { MaxProfileExpandedBytes = n }(MaxProfileExpandedBytes)
	MaxProfileExpandedBytes = 4 << 20
	path := filepath.Join(t.TempDir(), "bomb.pb.gz")
	out, _ := os.Create(path)
	zw, _ := gzip.NewWriterLevel(out, gzip.BestCompression)
	io.CopyN(zw, zeroReader{}, 5<<20)
	zw.Close()
	out.Close()
	_, err := ReadFile(path)
	if !errors.Is(err, safefile.ErrTooLarge) || !strings.Contains(err.Error(), "decompressed") {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if _, err := ReadFile("/dev/zero"); !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("/dev/zero: %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestShortenAnyWidth(t *testing.T) {
	name := "ov::intel_cpu::Node::execute(dnnl::stream)"
	for _, w := range []int{-5, 0, 1, 2, 3, MinNameWidth, 20, 1000} {
		got := shorten(name, w)
		if len(got) > max(w, MinNameWidth) {
			t.Errorf("shorten(%d) = %q", w, got)
		}
	}
}
