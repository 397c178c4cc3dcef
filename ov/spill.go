package ov

import (
	"fmt"
	"os"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Spill backs the parts of a MapHost buffer that no file backs (the room
// for weights converted into it, and after them) by an unlinked file in
// dir, mapped shared and writable at the same addresses. Call it before
// anything is written to those parts: they read as zeros, as the file
// starts, and nothing is copied. What is written afterwards goes straight
// to the file's pages, the page cache's, so ReleaseFiles can drop them from
// the process's resident set as it drops the checkpoint files' (a later
// read faults them back in). Converting weights into memory and copying
// them out instead wrote them twice (SmolLM2 Q4_1: 0.17-0.31 s of a cold
// start for its 93 MB on this VM's ext4). The file is gone from dir at
// once; its space is freed with the mapping. On error b is unchanged.
func (b *HostBuffer) Spill(dir string) error {
	if b == nil || b.base == nil || !b.mapped {
		return fmt.Errorf("ov: spill: only a MapHost buffer can spill")
	}
	page := int64(os.Getpagesize())
	gaps := b.gaps(page)
	if len(gaps) == 0 {
		return nil
	}
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("ov: spill into %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close() // the mappings keep the file
	var at int64
	for _, g := range gaps {
		at += g.Size
	}
	if err := f.Truncate(at); err != nil { // whole pages behind every mapping
		return fmt.Errorf("ov: spill into %s: %w", dir, err)
	}
	at = 0
	for i, g := range gaps {
		// MAP_FIXED replaces the anonymous pages with the file's, zeros
		// both: no reader sees a difference.
		if _, err := unix.MmapPtr(int(f.Fd()), at, unsafe.Add(b.base, g.Offset), uintptr(g.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
			if i == 0 {
				return fmt.Errorf("ov: spill into %s: %w", dir, err)
			}
			// Some gaps are file-backed already: they stay so (zeros both).
			b.files = append(b.files, gaps[:i]...)
			return fmt.Errorf("ov: spill into %s: %w", dir, err)
		}
		at += g.Size
	}
	b.files = append(b.files, gaps...)
	return nil
}

// gaps are the page-aligned regions of b that none of its files backs.
func (b *HostBuffer) gaps(page int64) []HostFile {
	files := append([]HostFile(nil), b.files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Offset < files[j].Offset })
	var out []HostFile
	var from int64
	name := "spilled weights"
	add := func(to int64) {
		if to > from {
			out = append(out, HostFile{Path: name, Offset: from, Size: to - from})
		}
	}
	for _, f := range files {
		add(f.Offset)
		from = max(from, (f.Offset+f.Size+page-1)/page*page)
	}
	add((int64(b.n) + page - 1) / page * page)
	return out
}
