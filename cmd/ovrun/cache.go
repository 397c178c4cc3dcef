package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/rungcache"
	_ "github.com/ovtoolkit/ovrun/rungcache/s3store" // --cache-dir s3://bucket/prefix
)

var (
	cacheFolderFlag = &cli.StringFlag{Name: "cache-dir", Usage: "the compiled-rung cache `DIR`, or s3://BUCKET/PREFIX (as given to run, generate, bench, serve)", Required: true, EnvVars: []string{"OVRUN_CACHE_DIR"}}
	cacheJSONFlag   = &cli.BoolFlag{Name: "json", Usage: "print the entries as a JSON array instead of a table"}
	maxSizeFlag     = &cli.StringFlag{Name: "max-size", Usage: "evict least recently used entries until the rest take at most `SIZE` (e.g. 2GiB)",
		Action: func(_ *cli.Context, v string) error { _, err := cliutil.ParseSize("max-size", v); return err }}
	olderThanFlag = &cli.StringFlag{Name: "older-than", Usage: "remove entries not used for `AGE` (e.g. 36h, 7d)",
		Action: func(_ *cli.Context, v string) error { _, err := parseAge(v); return err }}

	cacheCommand = &cli.Command{
		Name:  "cache",
		Usage: "list, prune or clear the compiled-rung cache (--cache-dir of run, generate, bench, serve)",
		Description: `An entry is one compiled graph: a blob OpenVINO exported and a small JSON
file with its size, CRC-32C and what it was compiled from. Only files named
like entries (64 hex digits, .blob or .json) are read or removed:

   ovrun cache ls --cache-dir /tmp/rungs
   ovrun cache ls --cache-dir /tmp/rungs --json
   ovrun cache prune --cache-dir /tmp/rungs --max-size 2GiB --older-than 7d
   ovrun cache clear --cache-dir /tmp/rungs

A bucket (--cache-dir s3://BUCKET/PREFIX, reached as run and serve reach
it) holds an entry as KEY.json, the blob it names (KEY.ID.blob) and
KEY.used, whose time is its last use; prune and clear there also remove
blobs no metadata names (a writer that died, or lost a race) once they are
an hour old, or at once for clear. The local folder in front of a bucket is
a cache folder like any other (--cache-dir ~/.cache/ovrun/rungs):

   ovrun cache ls --cache-dir s3://rungs/smollm2
   ovrun cache prune --cache-dir s3://rungs/smollm2 --older-than 30d`,
		Subcommands: []*cli.Command{
			{Name: "ls", Usage: "list the entries, most recently used first", Flags: []cli.Flag{cacheFolderFlag, cacheJSONFlag}, Action: cacheLsAction},
			{Name: "prune", Usage: "remove least recently used entries past --max-size and entries unused for --older-than", Flags: []cli.Flag{cacheFolderFlag, maxSizeFlag, olderThanFlag}, Action: cachePruneAction},
			{Name: "clear", Usage: "remove every entry and the remembered digests of weights (other files in the folder stay)", Flags: []cli.Flag{cacheFolderFlag}, Action: cacheClearAction},
		},
	}
)

// parseAge reads a Go duration (36h, 90m) or a number of days (7d).
func parseAge(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n > 0 && n < 100000 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("--older-than %q: want a positive age such as 36h or 7d", s)
}

// entryStore is what cache ls, prune and clear work on: a cache folder
// or a bucket (rungcache.Remote).
type entryStore interface {
	List(ctx context.Context) ([]rungcache.Entry, error)
	Prune(ctx context.Context, maxBytes int64, olderThan time.Duration) ([]rungcache.Entry, error)
	Clear(ctx context.Context) ([]rungcache.Entry, error)
}

// folderStore is a cache folder as an entryStore.
type folderStore struct{ *rungcache.Folder }

func (f folderStore) List(context.Context) ([]rungcache.Entry, error) { return f.Folder.List() }
func (f folderStore) Prune(_ context.Context, maxBytes int64, olderThan time.Duration) ([]rungcache.Entry, error) {
	return f.Folder.Prune(maxBytes, olderThan)
}
func (f folderStore) Clear(context.Context) ([]rungcache.Entry, error) { return f.Folder.Clear() }

// openCache opens an existing cache folder, or a bucket: listing or
// pruning a folder that is not there is a mistake, not an empty cache. A
// folder only read (cache ls) may be read-only.
func openCache(c *cli.Context, write bool) (entryStore, error) {
	dir := cacheFolderFlag.Get(c)
	if rungcache.IsStoreURL(dir) {
		r, err := rungcache.OpenRemote(dir)
		if err != nil {
			return nil, fmt.Errorf("--cache-dir: %w", err)
		}
		return r, nil
	}
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("--cache-dir %s: %w", dir, errors.Unwrap(err))
	case !fi.IsDir():
		return nil, fmt.Errorf("--cache-dir %s is %s, not a folder", dir, safefile.Kind(fi.Mode()))
	}
	waitForCacheLock(c, rungcache.DefaultLockWait, "")
	var f *rungcache.Folder
	if !write {
		f, err = rungcache.OpenFolderRead(dir)
	} else {
		f, err = rungcache.OpenFolder(dir, 0)
	}
	if err != nil {
		return nil, err
	}
	return folderStore{f}, nil
}

// cacheEntry is one entry in `cache ls --json`.
type cacheEntry struct {
	Key       string    `json:"key"`
	Kind      string    `json:"kind"`
	Capacity  int       `json:"capacity"`
	Chunk     int       `json:"chunk"`
	Device    string    `json:"device"`
	Precision string    `json:"precision"`
	Model     string    `json:"model"`
	OpenVINO  string    `json:"openvino"`
	Bytes     int64     `json:"bytes"`
	CompileS  float64   `json:"compile_s"`
	Created   time.Time `json:"created"`
	LastUsed  time.Time `json:"last_used"`
}

func cacheLsAction(c *cli.Context) error {
	rc, err := openCache(c, false)
	if err != nil {
		return err
	}
	es, err := rc.List(c.Context)
	if err != nil {
		return err
	}
	if cacheJSONFlag.Get(c) {
		out := make([]cacheEntry, len(es))
		for i, e := range es {
			out[i] = cacheEntry{Key: e.Key, Kind: e.Kind, Capacity: e.Capacity, Chunk: e.Chunk, Device: e.Device, Precision: e.Precision,
				Model: e.Model, OpenVINO: e.OpenVINO, Bytes: e.Bytes, CompileS: e.CompileS, Created: e.Created.UTC(), LastUsed: e.LastUsed.UTC()}
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.App.Writer, "%s\n", b)
		return err
	}
	tw := tabwriter.NewWriter(c.App.Writer, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "key\tgraph\tdevice\tprecision\tsize\tcompile s\tlast used\t\tmodel")
	var total int64
	for _, e := range es {
		total += e.Bytes
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t\t%s\n", e.Short(), e.Graph(), e.Device, orDash(e.Precision),
			safefile.Size(e.Bytes), e.CompileS, e.LastUsed.UTC().Format("2006-01-02 15:04:05"), e.Model)
	}
	tw.Flush()
	fmt.Fprintf(c.App.Writer, "%d entries, %s\n", len(es), safefile.Size(total))
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func cachePruneAction(c *cli.Context) error {
	if !c.IsSet(maxSizeFlag.Name) && !c.IsSet(olderThanFlag.Name) {
		return errors.New("cache prune: give --max-size SIZE, --older-than AGE or both (cache clear removes everything)")
	}
	maxBytes, age := int64(-1), time.Duration(0)
	var err error
	if c.IsSet(maxSizeFlag.Name) {
		if maxBytes, err = cliutil.ParseSize(maxSizeFlag.Name, maxSizeFlag.Get(c)); err != nil {
			return err
		}
	}
	if c.IsSet(olderThanFlag.Name) {
		if age, err = parseAge(olderThanFlag.Get(c)); err != nil {
			return err
		}
	}
	rc, err := openCache(c, true)
	if err != nil {
		return err
	}
	gone, err := rc.Prune(c.Context, maxBytes, age)
	return reportRemoved(c, gone, err)
}

func cacheClearAction(c *cli.Context) error {
	rc, err := openCache(c, true)
	if err != nil {
		return err
	}
	gone, err := rc.Clear(c.Context)
	return reportRemoved(c, gone, err)
}

func reportRemoved(c *cli.Context, gone []rungcache.Entry, err error) error {
	if err != nil {
		return err
	}
	var total int64
	for _, e := range gone {
		total += e.Bytes
	}
	fmt.Fprintf(c.App.Writer, "removed %d entries, %s\n", len(gone), safefile.Size(total))
	return nil
}
