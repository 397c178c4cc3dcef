package ovexec

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/rungcache"
	_ "github.com/ovtoolkit/ovrun/rungcache/s3store" // --cache-dir s3://bucket/prefix
	"github.com/ovtoolkit/ovrun/runtime"
)

// The compiled-rung cache sits in front of OpenVINO's compile: a graph
// whose key is cached is imported, anything else is compiled and exported
// into the cache. The key (rungcache.Parts) is everything that changes the
// compiled result: the weights the graph reads (a SHA-256 of the shared
// blob's checkpoint part, once per Compiler), the IR XML and the small
// constants it references, the graph's kind and shape, the device, every
// compile property, OpenVINO's build number and the device's driver and
// compiler versions where it reports them (NPU). The cache is a folder, or
// a bucket (--cache-dir s3://bucket/prefix) with a local folder in front
// of it (rungcache).

// rungCache is a Compiler's view of its cache.
type rungCache struct {
	store   *rungcache.Cache
	version string // OpenVINO's build number
	weights string // digest of the checkpoint part of the weights blob (weightsDigest), set before any key

	driverOnce sync.Once
	driver     string // the device's driver and compiler versions (deviceDriver)

	mu   sync.Mutex
	keys map[model.GraphSpec]rungcache.Key // keys computed so far (a spec's key never changes)
}

// openRungCache opens opts' cache folder, its digest of the weights not
// known yet (weights.go); NewCompiler has set the compile properties on
// the core for imports.
func openRungCache(opts Options) (*rungCache, error) {
	store, err := rungcache.Open(opts.CacheDir, opts.CacheMax)
	if err != nil {
		return nil, err
	}
	v, err := ov.Version()
	if err != nil {
		return nil, err
	}
	return &rungCache{store: store, version: v, keys: map[model.GraphSpec]rungcache.Key{}}, nil
}

// digestChunk is the piece of the weights hashed by one goroutine.
const digestChunk = 64 << 20

// weightsDigest is the SHA-256 of the SHA-256s of b's 64 MiB pieces and
// b's length: every byte counts, and the pieces are hashed on every CPU
// (about a second for a billion bytes on one core of this machine).
func weightsDigest(b []byte) string {
	n := (len(b) + digestChunk - 1) / digestChunk
	sums := make([][sha256.Size]byte, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(goruntime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for i := range next {
				sums[i] = sha256.Sum256(b[i*digestChunk : min(len(b), (i+1)*digestChunk)])
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	h := sha256.New()
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(b))))
	for _, s := range sums {
		h.Write(s[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// constRef matches a Const's place in the weights blob (model/ir.go
// writes offset then size).
var constRef = regexp.MustCompile(`offset="(\d+)" size="(\d+)"`)

// key is the cache key of spec's graph emitted as xml.
func (c *Compiler) key(spec model.GraphSpec, xml []byte) rungcache.Key {
	rc := c.cache
	tensors := c.weights.TensorBytes()
	// The IR names constants by place. Those in the pool after the
	// checkpoint part were placed by the graph builder in the order this
	// process built its graphs: they are hashed by content instead of
	// place, so the key of a graph does not depend on which graphs were
	// built before it.
	h := sha256.New()
	last := 0
	for _, m := range constRef.FindAllSubmatchIndex(xml, -1) {
		off, err1 := strconv.ParseInt(string(xml[m[2]:m[3]]), 10, 64)
		size, err2 := strconv.ParseInt(string(xml[m[4]:m[5]]), 10, 64)
		if err1 != nil || err2 != nil || off < tensors {
			continue
		}
		data, ok := c.weights.PoolConst(off, size)
		if !ok {
			continue
		}
		h.Write(xml[last:m[0]])
		h.Write([]byte("pool:"))
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(size)))
		h.Write(data)
		last = m[1]
	}
	h.Write(xml[last:])
	p := rungcache.Parts{
		OpenVINO:    rc.version,
		Device:      c.opts.Device,
		Precision:   c.opts.Precision,
		WeightsSHA:  rc.weights,
		IRSHA:       hex.EncodeToString(h.Sum(nil)),
		Kind:        kindOf(spec),
		Capacity:    spec.Capacity,
		Chunk:       spec.Chunk,
		Attention:   string(spec.Attention),
		KVPrecision: spec.KVPrecision,
		Driver:      rc.deviceDriver(c.core, c.opts.Device),
	}
	for _, pr := range c.props {
		p.Properties = append(p.Properties, pr.Key+"="+pr.Value)
	}
	k := rungcache.KeyOf(p)
	rc.mu.Lock()
	rc.keys[spec] = k
	rc.mu.Unlock()
	return k
}

// driverProperties are the read-only properties, by device, that name the
// driver and compiler a blob was compiled with: an NPU blob is compiled by
// the driver's compiler and may not import under another. The CPU plugin
// compiles inside OpenVINO (its build number is in the key already) and
// reports none; GPU reports no driver version (only GPU_UARCH_VERSION, the
// hardware's).
var driverProperties = map[string][]string{
	"NPU": {"NPU_DRIVER_VERSION", "NPU_COMPILER_VERSION"},
}

// deviceDriver is rungcache.Parts.Driver for device, read once from core.
func (rc *rungCache) deviceDriver(core *ov.Core, device string) string {
	rc.driverOnce.Do(func() { rc.driver = driverOf(device, core.Property) })
	return rc.driver
}

// driverOf is "KEY=VALUE,..." of device's driver properties that get
// reads ("" for a device with none, or none it reports).
func driverOf(device string, get func(device, key string) (string, error)) string {
	family, _, _ := strings.Cut(strings.ToUpper(device), ".")
	var parts []string
	for _, key := range driverProperties[family] {
		if v, err := get(device, key); err == nil && v != "" {
			parts = append(parts, key+"="+v)
		}
	}
	return strings.Join(parts, ",")
}

func kindOf(spec model.GraphSpec) string {
	if spec.Batch > 0 {
		return "batch"
	}
	if spec.Shared {
		return "shared"
	}
	if spec.Chunk > 1 {
		return "prefill"
	}
	return "decode"
}

// Cached reports whether spec's graph is in the compiled-rung cache (a
// compile of it would be an import). Without a cache it is false.
func (c *Compiler) Cached(spec model.GraphSpec) bool {
	if c.cache == nil {
		return false
	}
	spec = c.withAttention(spec)
	if bound := c.reuseBound(spec); bound > 0 {
		spec.Capacity = bound // the graph every capacity reuses (reuse.go)
	}
	c.cache.mu.Lock()
	k, ok := c.cache.keys[spec]
	c.cache.mu.Unlock()
	if !ok {
		xml, err := model.BuildIR(c.weights, spec)
		if err != nil {
			return false
		}
		k = c.key(spec, xml)
	}
	return c.cache.store.Has(k)
}

// imported is spec's graph imported from the cache, nil on a miss; notes
// say why an entry was discarded; drop drops the pages of the blob it
// reads in place (importEntry).
func (c *Compiler) imported(spec model.GraphSpec, key rungcache.Key) (cm *ov.CompiledModel, o runtime.Origin, notes []string, drop func()) {
	cm, importS, compiledS, note, drop := c.importEntry(c.cache.store, key)
	if note != "" {
		notes = append(notes, fmt.Sprintf("graph %s: %s", spec.Name(), note))
	}
	if cm == nil {
		return nil, runtime.Origin{}, notes, drop
	}
	c.recordPrecision(cm)
	return cm, runtime.Origin{Source: runtime.OriginImported, ImportS: importS, CompiledS: compiledS}, notes, drop
}

// importEntry imports the entry under key from store, checked as
// store.Get checks it, and times the import (compiledS: what its compile
// cost, as the entry records it). On a plain miss it returns
// nil and no note; an entry that is damaged or that OpenVINO refuses is
// discarded, and the note says so (the caller compiles the graph again).
// drop drops the pages of a blob the graph reads in place from the
// resident set again (the graph's first calls read its constants to lay
// them out); it is a no-op for a copying import.
func (c *Compiler) importEntry(store *rungcache.Cache, key rungcache.Key) (cm *ov.CompiledModel, importS, compiledS float64, note string, drop func()) {
	drop = func() {}
	blob, meta, ok, note := store.Get(key)
	if !ok {
		return nil, 0, 0, note, drop
	}
	start := time.Now()
	// In place: the plugin shares the blob's constants instead of copying
	// them (ov/ext/import_mapped.cc), so the mapping lives as long as the
	// graph, and its pages are the page cache's, dropped during and after
	// the import (the check and the import read them all), and after the
	// graph's first calls unless its weights are read in place on every
	// call (keepsWeights: the first calls fault back what they read).
	// Without the library, a copying import and the mapping goes at once.
	release := func() { blob.Release() }
	stop := releasing(release) // the plugin reads each constant once
	cm, err := c.core.ImportMapped(blob.Bytes(), c.opts.Device, func() { blob.Close() })
	stop()
	switch {
	case errors.Is(err, ov.ErrNoImportMapped):
		cm, err = c.core.ImportModel(blob.Bytes(), c.opts.Device)
		blob.Close()
	case err == nil:
		release()
		if !c.keepsWeights() {
			drop = release
		}
	default:
		blob.Close()
	}
	if err != nil {
		store.Discard(key)
		return nil, 0, 0, fmt.Sprintf("rung cache: OpenVINO refused entry %s (%v); discarded it, compiling it again", key.Short(), err), drop
	}
	return cm, time.Since(start).Seconds(), meta.CompileS, note, drop
}

// export stores a compiled graph in the cache; a failure is a note, not an
// error: the graph is compiled and runs all the same.
func (c *Compiler) export(spec model.GraphSpec, key rungcache.Key, cm *ov.CompiledModel, compileS float64) (runtime.Origin, []string) {
	start := time.Now()
	path, err := filepath.Abs(c.ck.Dir)
	if err != nil {
		path = c.ck.Dir
	}
	m := rungcache.Meta{Kind: kindOf(spec), Capacity: spec.Capacity, Chunk: spec.Chunk, Device: c.opts.Device,
		Precision: c.opts.Precision, Model: path, OpenVINO: c.cache.version, CompileS: compileS}
	notes, err := c.cache.store.Put(key, m, cm.Export)
	o := runtime.Origin{Source: runtime.OriginCompiled, ExportS: time.Since(start).Seconds()}
	if err != nil {
		notes = append(notes, fmt.Sprintf("graph %s: not cached: %v", spec.Name(), err))
		o.ExportS = 0
	}
	return o, notes
}
