// Package npy writes and reads float32 matrices in NumPy's .npy format
// (version 1.0, little-endian, C order).
package npy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// WriteFile writes rows as a float32 [len(rows), cols] array, through
// safefile (atomically; "-" is standard output). All rows must have the
// same length.
func WriteFile(path string, rows [][]float32) error {
	return safefile.Write(path, func(w io.Writer) error { return Write(w, rows) })
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

// MaxFileBytes is the largest .npy file ReadFile reads.
const MaxFileBytes = 4 << 30

// maxEmptyRows bounds the rows of an array without columns, which hold no
// data but would each cost a slice header.
const maxEmptyRows = 1 << 16

// ReadFile reads a 2-D little-endian float32 .npy file (a regular file of at
// most MaxFileBytes).
func ReadFile(path string) ([][]float32, error) {
	b, err := safefile.ReadFile(path, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse decodes a 2-D little-endian float32 .npy file held in b.
func Parse(b []byte) ([][]float32, error) {
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return nil, errors.New("npy: not a .npy file")
	}
	var hl, off int
	switch {
	case b[6] == 1:
		hl, off = int(binary.LittleEndian.Uint16(b[8:])), 10
	case len(b) >= 12:
		hl, off = int(binary.LittleEndian.Uint32(b[8:])), 12
	default:
		return nil, errors.New("npy: truncated header")
	}
	if hl < 0 || hl > len(b)-off {
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
	data := b[off+hl:]
	r, rerr := strconv.Atoi(m[1])
	c, cerr := strconv.Atoi(m[2])
	n := len(data) / 4
	// Checked by division: r*c could overflow.
	bad := rerr != nil || cerr != nil || len(data)%4 != 0 || (r == 0 || c == 0) != (n == 0) || r > 0 && c > 0 && (n%r != 0 || n/r != c)
	if bad || c == 0 && r > maxEmptyRows {
		return nil, fmt.Errorf("npy: %d data bytes for shape (%s, %s)", len(data), m[1], m[2])
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
