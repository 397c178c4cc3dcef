package ov

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// TestMapHost maps two files into a buffer (a sharded checkpoint): their
// bytes read in place at their offsets, the rest zeroed and writable, their
// pages releasable without losing the bytes; offsets off a page boundary
// and a file shorter than asked are refused.
func TestMapHost(t *testing.T) {
	page := os.Getpagesize()
	data := bytes.Repeat([]byte("weights!"), page/4+3) // two pages and a bit
	path := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	second := []byte("shard two")
	path2 := filepath.Join(t.TempDir(), "w2.bin")
	if err := os.WriteFile(path2, second, 0o600); err != nil {
		t.Fatal(err)
	}
	n := 2*page + 4*page
	b, err := MapHost(n, []HostFile{{Path: path, Offset: int64(page), Size: int64(len(data))}, {Path: path2, Offset: int64(4 * page), Size: int64(len(second))}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	buf := b.Bytes()
	if !bytes.Equal(buf[page:page+len(data)], data) || !bytes.Equal(buf[4*page:4*page+len(second)], second) {
		t.Fatal("the files' regions do not hold the files")
	}
	for _, i := range []int{0, page - 1, n - 1} {
		if buf[i] != 0 {
			t.Fatalf("byte %d = %d outside the file, want 0", i, buf[i])
		}
	}
	buf[0], buf[n-1] = 7, 9 // writable outside the file
	if err := b.ReleaseFiles(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[page:page+len(data)], data) || !bytes.Equal(buf[4*page:4*page+len(second)], second) || buf[0] != 7 || buf[n-1] != 9 {
		t.Fatal("releasing the file's pages changed the buffer")
	}
	for _, bad := range []HostFile{
		{Path: path, Offset: 1, Size: int64(len(data))},
		{Path: path, Offset: 0, Size: int64(len(data)) + 1},
		{Path: path, Offset: int64(n), Size: 1},
	} {
		if _, err := MapHost(n, []HostFile{bad}); err == nil || !strings.Contains(err.Error(), "map host") {
			t.Errorf("MapHost(%+v) = %v, want an error", bad, err)
		}
	}
}

// TestSpill backs a fresh MapHost buffer's own parts (before, between and
// after a file, the last region ending inside the buffer's last page) by
// an unlinked file: they read as zeros, what is written afterwards
// survives the release of every file-backed page (it is in the file, not
// in anonymous memory), the file's region stays, and nothing is left in
// the folder.
func TestSpill(t *testing.T) {
	page := os.Getpagesize()
	data := bytes.Repeat([]byte("weights!"), page/8+1) // a page and a bit
	path := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	n := 5*page + 100
	b, err := MapHost(n, []HostFile{{Path: path, Offset: int64(page), Size: int64(len(data))}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	dir := t.TempDir()
	if err := b.Spill(dir); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("Spill left %d files in the folder", len(left))
	}
	buf := b.Bytes()
	if m := mappingOf(t, uintptr(unsafe.Pointer(&buf[0]))); !strings.HasSuffix(m, "(deleted)") {
		t.Fatalf("the spilled buffer is mapped from %q, want an unlinked file", m)
	}
	for at := range buf {
		if (at < page || at >= page+len(data)) && buf[at] != 0 {
			t.Fatalf("byte %d of a fresh spilled buffer is %d, not zero", at, buf[at])
		}
	}
	own := []int{0, page - 1, 3 * page, 4 * page, n - 1}
	for i, at := range own {
		buf[at] = byte(10 + i)
	}
	check := func(when string) {
		t.Helper()
		for i, at := range own {
			if buf[at] != byte(10+i) {
				t.Fatalf("%s: byte %d = %d, want %d", when, at, buf[at], 10+i)
			}
		}
		if !bytes.Equal(buf[page:page+len(data)], data) {
			t.Fatalf("%s: the file's region changed", when)
		}
	}
	check("after the writes")
	if err := b.ReleaseFiles(); err != nil {
		t.Fatal(err)
	}
	check("after releasing the pages")
	if err := (&HostBuffer{}).Spill(dir); err == nil {
		t.Error("Spill of a freed buffer succeeded")
	}
}

// mappingOf is the line of /proc/self/maps whose range holds addr.
func mappingOf(t *testing.T, addr uintptr) string {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(maps)), "\n") {
		var from, to uintptr
		if _, err := fmt.Sscanf(line, "%x-%x", &from, &to); err == nil && from <= addr && addr < to {
			return line
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return ""
}
