package compilebench

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// memoFile builds a counter file as patches/dyncast-memo writes it: slots
// claimed `used`, each slot's counters given.
func memoFile(used uint32, slots [][]uint64) []byte {
	const slotBytes, nslots = 64, 4
	b := make([]byte, memoHeaderBytes+nslots*slotBytes)
	copy(b, memoMagic)
	le := binary.LittleEndian
	le.PutUint32(b[8:], 1)
	le.PutUint32(b[12:], slotBytes)
	le.PutUint32(b[16:], nslots)
	le.PutUint32(b[20:], used)
	le.PutUint32(b[24:], 3)
	copy(b[32:], "dyncast-memo")
	copy(b[64:], "calls,hits,misses")
	for i, s := range slots {
		for j, v := range s {
			le.PutUint64(b[memoHeaderBytes+i*slotBytes+8*j:], v)
		}
	}
	return b
}

func TestParseMemoStats(t *testing.T) {
	// Slot 0 is shared; slots 1 and 2 are two threads'; slot 3 is unclaimed
	// and must not count even though it holds numbers.
	b := memoFile(3, [][]uint64{{1, 0, 1}, {100, 90, 10}, {50, 49, 1}, {7, 7, 7}})
	m, err := ParseMemoStats(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Patch != "dyncast-memo" || m.Counters["calls"] != 151 || m.Counters["hits"] != 139 || m.Counters["misses"] != 12 {
		t.Errorf("got %+v", m)
	}
	if r := m.HitRate(); r < 0.9205 || r > 0.9206 {
		t.Errorf("hit rate %v, want 139/151", r)
	}
	// More threads than slots: they share slot 0, and used stays above.
	if m, err := ParseMemoStats(memoFile(9, [][]uint64{{1, 1, 0}, {1, 1, 0}, {1, 1, 0}, {1, 1, 0}})); err != nil || m.Counters["calls"] != 4 {
		t.Errorf("used beyond the slots: %+v, %v", m, err)
	}
	d := m.Sub(&MemoStats{Counters: map[string]uint64{"calls": 100, "hits": 95, "misses": 50}})
	if d.Counters["calls"] != 51 || d.Counters["hits"] != 44 || d.Counters["misses"] != 0 || d.Patch != "dyncast-memo" {
		t.Errorf("Sub = %+v", d)
	}
	var none *MemoStats
	if none.Sub(m) != nil || none.HitRate() != 0 {
		t.Error("a nil MemoStats is not empty")
	}
}

func TestParseMemoStatsErrors(t *testing.T) {
	good := memoFile(2, nil)
	tests := []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"short", func(b []byte) []byte { return b[:100] }, "no OVTMEMO1 header"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, "no OVTMEMO1 header"},
		{"version", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 2); return b }, "version 2"},
		{"counters", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[24:], 9); return b }, "9 counters"},
		{"truncated slots", func(b []byte) []byte { return b[:memoHeaderBytes+64] }, "the header promises"},
		{"names", func(b []byte) []byte { copy(b[64:], "calls,hits\x00\x00\x00\x00\x00\x00\x00"); return b }, "2 counter names for 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseMemoStats(tt.edit(slices.Clone(good)))
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestReadMemoStats(t *testing.T) {
	dir := t.TempDir()
	if m, err := ReadMemoStats(filepath.Join(dir, "none")); m != nil || err != nil {
		t.Errorf("missing file: %v, %v; want nothing (no patch counted)", m, err)
	}
	path := filepath.Join(dir, "memo.stats")
	if err := os.WriteFile(path, memoFile(2, [][]uint64{{0, 0, 0}, {3, 2, 1}}), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadMemoStats(path); err != nil || m.Counters["hits"] != 2 {
		t.Errorf("got %+v, %v", m, err)
	}
	if _, err := ReadMemoStats(dir); err == nil {
		t.Error("a folder read as a counter file")
	}
	// Created (O_EXCL, ftruncate) but the header not yet written: no counts.
	fresh := filepath.Join(dir, "fresh.stats")
	if err := os.WriteFile(fresh, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadMemoStats(fresh); m != nil || err != nil {
		t.Errorf("uninitialised file: %v, %v; want nothing yet", m, err)
	}
	bad := filepath.Join(dir, "bad.stats")
	if err := os.WriteFile(bad, []byte("NOTMEMO1 and more bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMemoStats(bad); err == nil {
		t.Error("a foreign file read as counters")
	}
	p, err := memoStatsPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) || filepath.Dir(p) != dir {
		t.Errorf("memoStatsPath %s: %v, want a free name in %s", p, err, dir)
	}
}

func TestSummariseMemo(t *testing.T) {
	vs := []Variant{{Name: "base"}, {Name: "memo"}}
	st := func(calls, hits uint64) *MemoStats {
		return &MemoStats{Patch: "dyncast-memo", Counters: map[string]uint64{"calls": calls, "hits": hits, "misses": calls - hits}}
	}
	trials := []Trial{
		{Pair: 1, Variant: "base"}, {Pair: 1, Variant: "memo", Memo: st(1000, 990)},
		{Pair: 2, Variant: "memo", Memo: st(1000, 970)}, {Pair: 2, Variant: "base"},
	}
	got := summariseMemo(vs, trials)
	if len(got) != 1 {
		t.Fatalf("got %+v, want the memo variant only", got)
	}
	s := got[0]
	if s.Variant != "memo" || s.Trials != 2 || s.CallsPerCompile != 1000 || s.HitRate != 0.98 || s.Counters["misses"] != 40 {
		t.Errorf("summary = %+v", s)
	}
}

func TestCompareCompiled(t *testing.T) {
	vs := []Variant{{Name: "base"}, {Name: "memo"}}
	run := func(v, h string) Trial { return Trial{Variant: v, ExportSHA256: h} }
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	tests := []struct {
		name                 string
		runs                 []Trial
		equal, deterministic bool
		detail               string
	}{
		{"identical", []Trial{run("base", a), run("memo", a), run("memo", a), run("base", a)}, true, true, "all 4 exported compiled models are byte-identical"},
		{"treatment differs once", []Trial{run("base", a), run("memo", a), run("memo", b), run("base", a)}, false, true, "memo exported models other than base's"},
		{"control not deterministic", []Trial{run("base", a), run("memo", a), run("base", b)}, false, false, "not deterministic"},
		{"treatment did not export", []Trial{run("base", a), run("memo", "")}, false, true, "memo exported models other than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := compareCompiled(vs, tt.runs)
			if c.Equal != tt.equal || c.Deterministic != tt.deterministic || !strings.Contains(c.Detail, tt.detail) {
				t.Errorf("got %+v", c)
			}
		})
	}
	if compareCompiled(vs, []Trial{run("base", ""), run("memo", "")}) != nil {
		t.Error("no exports gave a verdict")
	}
}

func TestNewMemoStatsPath(t *testing.T) {
	for _, shm := range []string{shmDir, filepath.Join(t.TempDir(), "no-shm")} {
		old := shmDir
		shmDir = shm
		path, cleanup, err := NewMemoStatsPath()
		shmDir = old
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Dir(path)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Errorf("%s: folder %s: %v", shm, dir, err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s: %s exists; the patch must create it (O_EXCL)", shm, path)
		}
		cleanup()
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: cleanup left %s", shm, dir)
		}
	}
}

// FuzzParseMemoStats: any bytes are refused with one line or give counters
// that sum no more slots than the header declares.
func FuzzParseMemoStats(f *testing.F) {
	f.Add(memoFile(3, [][]uint64{{1, 0, 1}, {100, 90, 10}}))
	f.Add(memoFile(1<<31, nil))
	f.Add([]byte(memoMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMemoStats(b)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		if m.Counters == nil || m.HitRate() < 0 {
			t.Fatalf("got %+v", m)
		}
	})
}
