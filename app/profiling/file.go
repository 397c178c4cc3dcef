package profiling

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"

	"github.com/google/pprof/profile"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// Size limits of ReadFile: a gzipped profile can expand a thousandfold, so
// the expanded size is bounded as well as the file's. A profile of a large
// compile is tens of MiB expanded.
var (
	MaxProfileFileBytes     int64 = 256 << 20
	MaxProfileExpandedBytes int64 = 256 << 20
)

// ReadFile reads a pprof profile (gzipped or not) from a regular file,
// refusing a file or an expansion over the limits.
func ReadFile(path string) (*profile.Profile, error) {
	b, err := safefile.ReadFile(path, MaxProfileFileBytes)
	if err != nil {
		return nil, err
	}
	if len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		gz, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if b, err = io.ReadAll(safefile.LimitReader(gz, MaxProfileExpandedBytes, path+" decompressed")); err != nil {
			if errors.Is(err, safefile.ErrTooLarge) {
				return nil, err // names the file already
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("the gzip stream is truncated: %w", err)
			}
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	p, err := profile.ParseData(b)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return p, nil
}

// WriteFile writes p as a gzipped pprof profile through safefile ("-" is
// standard output).
func WriteFile(path string, p *profile.Profile) error {
	return safefile.Write(path, p.Write)
}
