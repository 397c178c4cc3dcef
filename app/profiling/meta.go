package profiling

import (
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
)

// Keys of the "key: value" comments ovtrace stores in its profiles.
const (
	// MetaGraphNodes is the number of nodes (IR layers) of the compiled graph.
	MetaGraphNodes = "graph_nodes"
	// MetaCommand is the profiled command line.
	MetaCommand = "command"
	// MetaSource names the converter ("perf script" or "callgrind").
	MetaSource = "source"
	// MetaBackend names the profiler ovtrace ran ("perf" or "callgrind").
	MetaBackend = "backend"
)

// SetMeta records key: value in the profile's comments, replacing an
// earlier value of key.
func SetMeta(p *profile.Profile, key, value string) {
	prefix := key + ": "
	for i, c := range p.Comments {
		if strings.HasPrefix(c, prefix) {
			p.Comments[i] = prefix + value
			return
		}
	}
	p.Comments = append(p.Comments, prefix+value)
}

// Meta returns the value of key in the profile's comments.
func Meta(p *profile.Profile, key string) (string, bool) {
	prefix := key + ": "
	for _, c := range p.Comments {
		if v, ok := strings.CutPrefix(c, prefix); ok {
			return v, true
		}
	}
	return "", false
}

// GraphNodes returns the graph's node count recorded in the profile, 0 if none.
func GraphNodes(p *profile.Profile) int {
	v, _ := Meta(p, MetaGraphNodes)
	n, _ := strconv.Atoi(v)
	return n
}
