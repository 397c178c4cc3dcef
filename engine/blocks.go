package engine

import (
	"container/heap"
	"container/list"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"
)

// blockPool hands out the blocks of the shared KV pool and keeps the prefix
// cache. Only the engine goroutine uses it.
//
// Every block is in exactly one of three places: in use (one or more
// sequences hold it: refs > 0), cached (refs 0 but registered in the
// prefix cache, in the LRU list, reusable by a later prompt) or free. Free
// blocks are handed out lowest index first: the pool's pages are committed
// as they are first written, so the committed KV is the high-water mark of
// the block indices used, and lowest-first keeps it at the live working set.
//
// Prefix cache. Once a block of a sequence is full (Block tokens whose K/V
// the pool holds) it is registered under a chain key: the entry id of the
// block before it in the sequence (0 for the first) and a hash of its Block
// token ids. The ids themselves are kept and compared on lookup, so a hash
// collision costs a comparison, never a wrong reuse; and because the parent
// is an entry id that is never reused, a block matches only under the exact
// chain of tokens it was computed after (K/V at a position depends on every
// token before it).
//
// Copy-on-write never has to copy: only full blocks are registered and
// shared, a full block is never written again (a sequence writes positions
// past its last full block only), and a prompt reuses at most
// floor((len-1)/Block) blocks, so its first computed position starts a
// block of its own. checkWritable asserts this in the tests.
type blockPool struct {
	size  int // tokens per block
	total int
	refs  []int32
	used  int // blocks with refs > 0
	free  minHeap

	// prefix cache; cacheCap 0 disables it
	cacheCap int
	meta     []blockMeta
	entries  map[chainKey][]int32 // registered blocks by key; more than one only on a hash collision
	lru      list.List            // cached blocks (refs 0), least recently used first
	nextID   uint64
	seed     maphash.Seed
	hash     func(tokens []int64) uint64 // tokens' hash; tests force collisions with it
	scratch  []byte

	// counters, read by the stats snapshot
	hitBlocks, missBlocks, hitTokens, missTokens int64
	evictions                                    int64
}

// chainKey identifies a full block by its place in a token chain.
type chainKey struct {
	parent uint64 // entry id of the block before it; 0: first block
	hash   uint64 // hash of its token ids
}

// blockMeta is a block's prefix cache registration.
type blockMeta struct {
	id     uint64 // entry id; 0: not registered
	key    chainKey
	tokens []int64
	elem   *list.Element // in lru while cached (refs 0)
}

func newBlockPool(blocks, size, cacheCap int) *blockPool {
	p := &blockPool{size: size, total: blocks, refs: make([]int32, blocks), cacheCap: cacheCap,
		meta: make([]blockMeta, blocks), entries: map[chainKey][]int32{}, seed: maphash.MakeSeed()}
	p.hash = p.hashTokens
	p.free = make(minHeap, blocks)
	for i := range p.free {
		p.free[i] = int32(i) // ascending: already a heap
	}
	return p
}

func (p *blockPool) hashTokens(tokens []int64) uint64 {
	p.scratch = p.scratch[:0]
	for _, t := range tokens {
		p.scratch = binary.LittleEndian.AppendUint64(p.scratch, uint64(t))
	}
	return maphash.Bytes(p.seed, p.scratch)
}

// alloc hands out one block for a sequence to write: the lowest free one,
// else the least recently used cached one (its registration is dropped).
func (p *blockPool) alloc() (int32, error) {
	var b int32
	switch {
	case p.free.Len() > 0:
		b = heap.Pop(&p.free).(int32)
	case p.lru.Len() > 0:
		b = p.evictOldest()
	default:
		// The pool is sized so that every admitted sequence reaches the
		// largest context; getting here is a bookkeeping bug.
		return 0, fmt.Errorf("kv block pool exhausted: %d blocks, all in use", p.total)
	}
	p.refs[b] = 1
	p.used++
	return b, nil
}

// match finds the longest chain of cached full blocks that starts prompt,
// at most maxBlocks of them, takes a reference on each and returns them
// with the entry id of the last (0: none), the parent of the sequence's
// next full block. It counts hits and misses.
func (p *blockPool) match(prompt []int64, maxBlocks int) (blocks []int32, parent uint64) {
	if p.cacheCap > 0 {
		for j := 0; j < maxBlocks; j++ {
			b, ok := p.lookup(parent, prompt[j*p.size:(j+1)*p.size])
			if !ok {
				break
			}
			p.acquire(b)
			blocks = append(blocks, b)
			parent = p.meta[b].id
		}
	}
	hit := len(blocks)
	p.hitBlocks += int64(hit)
	p.missBlocks += int64(maxBlocks - hit)
	p.hitTokens += int64(hit * p.size)
	p.missTokens += int64(len(prompt) - hit*p.size)
	return blocks, parent
}

// lookup is the registered block holding tokens after parent.
func (p *blockPool) lookup(parent uint64, tokens []int64) (int32, bool) {
	for _, b := range p.entries[chainKey{parent, p.hash(tokens)}] {
		if m := &p.meta[b]; m.key.parent == parent && slices.Equal(m.tokens, tokens) {
			return b, true
		}
	}
	return 0, false
}

// acquire takes one more reference on a registered block.
func (p *blockPool) acquire(b int32) {
	if p.refs[b] == 0 {
		p.lru.Remove(p.meta[b].elem)
		p.meta[b].elem = nil
		p.used++
	}
	p.refs[b]++
}

// register enters full block b, holding tokens after the block whose entry
// id is parent, into the prefix cache, and returns the entry id under which
// the next block of the chain registers. When the same chain is registered
// already (two sequences computed the same prefix at once) b stays out and
// the existing entry's id is returned, so the chain stays findable. With the
// cache off it returns 0 and registers nothing.
func (p *blockPool) register(b int32, parent uint64, tokens []int64) uint64 {
	if p.cacheCap == 0 {
		return 0
	}
	if c, ok := p.lookup(parent, tokens); ok {
		return p.meta[c].id
	}
	p.nextID++
	key := chainKey{parent, p.hash(tokens)}
	p.meta[b] = blockMeta{id: p.nextID, key: key, tokens: slices.Clone(tokens)}
	p.entries[key] = append(p.entries[key], b)
	return p.nextID
}

// evictOldest drops the least recently used cached block from the cache
// and returns it.
func (p *blockPool) evictOldest() int32 {
	e := p.lru.Front()
	p.lru.Remove(e) // here, not through meta: the loops above must progress
	b := e.Value.(int32)
	if p.meta[b].elem == e {
		p.meta[b].elem = nil
	}
	p.unregister(b)
	p.evictions++
	return b
}

// unregister drops b from the prefix cache.
func (p *blockPool) unregister(b int32) {
	m := &p.meta[b]
	if m.elem != nil {
		p.lru.Remove(m.elem)
	}
	rest := slices.DeleteFunc(p.entries[m.key], func(x int32) bool { return x == b })
	if len(rest) == 0 {
		delete(p.entries, m.key)
	} else {
		p.entries[m.key] = rest
	}
	*m = blockMeta{}
}

// release drops a sequence's references, last block first: of a finished
// sequence's cached blocks the tail is then the least recently used and
// evicted first, so the cache keeps whole chains from their start (a chain
// is only found from its first block). Registered blocks no sequence holds
// are cached, at most cacheCap of them; the others are free.
func (p *blockPool) release(blocks []int32) {
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		if p.refs[b]--; p.refs[b] > 0 {
			continue
		}
		p.used--
		if p.meta[b].id == 0 {
			heap.Push(&p.free, b)
			continue
		}
		p.meta[b].elem = p.lru.PushBack(b)
		for p.lru.Len() > p.cacheCap {
			heap.Push(&p.free, p.evictOldest())
		}
	}
}

// checkWritable reports an error when block b must not be written: another
// sequence shares it, or it is a registered (immutable) prefix block. The
// tests' fake graph calls it for every block it writes.
func (p *blockPool) checkWritable(b int32) error {
	switch {
	case b < 0 || int(b) >= p.total:
		return fmt.Errorf("block %d is outside the pool of %d", b, p.total)
	case p.refs[b] != 1:
		return fmt.Errorf("block %d is written with %d references: a shared block must never be written", b, p.refs[b])
	case p.meta[b].id != 0:
		return fmt.Errorf("block %d is written but is a registered prefix block: full blocks are immutable", b)
	}
	return nil
}

// minHeap is the free list: the lowest block index on top.
type minHeap []int32

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(int32)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
