// Package npy writes and reads float32 matrices in NumPy's .npy format
// (version 1.0, little-endian, C order).
package npy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// WriteFile writes rows as a float32 [len(rows), cols] array. All rows must
// have the same length.
func WriteFile(path string, rows [][]float32) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := Write(w, rows); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Write encodes rows to w.
func Write(w io.Writer, rows [][]float32) error {
	cols := 0
	if len(rows) > 0 {
		cols = len(rows[0])
	}
	header := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", len(rows), cols)
	// magic(6) + version(2) + header length(2) + header + '\n' is padded to 64 bytes.
	pad := 64 - (10+len(header)+1)%64
	if pad == 64 {
		pad = 0
	}
	header += strings.Repeat(" ", pad) + "\n"
	if _, err := io.WriteString(w, "\x93NUMPY\x01\x00"); err != nil {
		return err
	}
	if err := binary.Write(w, binary.LittleEndian, uint16(len(header))); err != nil {
		return err
	}
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	b := make([]byte, 4*cols)
	for i, r := range rows {
		if len(r) != cols {
			return fmt.Errorf("npy: row %d has %d values, want %d", i, len(r), cols)
		}
		for j, x := range r {
			binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

var shapeRE = regexp.MustCompile(`'shape':\s*\((\d+),\s*(\d+)\)`)

// ReadFile reads a 2-D little-endian float32 .npy file.
func ReadFile(path string) ([][]float32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return nil, errors.New("npy: not a .npy file")
	}
	var hl, off int
	switch b[6] {
	case 1:
		hl, off = int(binary.LittleEndian.Uint16(b[8:])), 10
	default:
		hl, off = int(binary.LittleEndian.Uint32(b[8:])), 12
	}
	if off+hl > len(b) {
		return nil, errors.New("npy: truncated header")
	}
	h := string(b[off : off+hl])
	if !strings.Contains(h, "'<f4'") || strings.Contains(h, "'fortran_order': True") {
		return nil, fmt.Errorf("npy: want C-order <f4, header %q", h)
	}
	m := shapeRE.FindStringSubmatch(h)
	if m == nil {
		return nil, fmt.Errorf("npy: want a 2-D array, header %q", h)
	}
	r, _ := strconv.Atoi(m[1])
	c, _ := strconv.Atoi(m[2])
	data := b[off+hl:]
	if len(data) != 4*r*c {
		return nil, fmt.Errorf("npy: %d data bytes for shape (%d, %d)", len(data), r, c)
	}
	rows := make([][]float32, r)
	for i := range rows {
		rows[i] = make([]float32, c)
		for j := range rows[i] {
			rows[i][j] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*(i*c+j):]))
		}
	}
	return rows, nil
}
