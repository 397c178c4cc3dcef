package engine

import (
	"slices"
	"strings"
	"testing"
)

// checkAccounting fails when a block is in two places or none.
func checkAccounting(t *testing.T, p *blockPool) {
	t.Helper()
	used := 0
	for _, r := range p.refs {
		if r > 0 {
			used++
		}
	}
	if used != p.used || p.used+p.lru.Len()+p.free.Len() != p.total {
		t.Fatalf("pool accounting: used %d (counted %d) + cached %d + free %d != total %d", p.used, used, p.lru.Len(), p.free.Len(), p.total)
	}
}

func seqTokens(n, from int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(from + i)
	}
	return out
}

func TestBlockPoolAllocatesLowestFirst(t *testing.T) {
	p := newBlockPool(6, 4, 0)
	var got []int32
	for range 4 {
		b, err := p.alloc()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
	}
	if !slices.Equal(got, []int32{0, 1, 2, 3}) {
		t.Fatalf("first allocations %v, want 0 1 2 3", got)
	}
	p.release([]int32{3, 1})
	for _, want := range []int32{1, 3, 4, 5} {
		if b, _ := p.alloc(); b != want {
			t.Fatalf("allocated %d, want %d (lowest free first)", b, want)
		}
	}
	if _, err := p.alloc(); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("alloc from a full pool: %v, want an exhausted error", err)
	}
	checkAccounting(t, p)
}

// register writes a sequence's full blocks into the cache as the engine
// does, and returns its blocks.
func registerSeq(t *testing.T, p *blockPool, tokens []int64) []int32 {
	t.Helper()
	var blocks []int32
	var parent uint64
	for j := 0; (j+1)*p.size <= len(tokens); j++ {
		b, err := p.alloc()
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
		parent = p.register(b, parent, tokens[j*p.size:(j+1)*p.size])
	}
	return blocks
}

func TestBlockPoolPrefixMatch(t *testing.T) {
	tests := []struct {
		name      string
		collide   bool // every block hashes alike: only the ids tell them apart
		prompt    []int64
		maxBlocks int
		want      int // blocks matched
	}{
		{"whole chain", false, seqTokens(12, 0), 3, 3},
		{"capped", false, seqTokens(12, 0), 2, 2},
		{"diverges in block 2", false, append(seqTokens(8, 0), 99, 99, 99, 99), 3, 2},
		{"same block after another first block", false, append(seqTokens(4, 50), seqTokens(8, 4)...), 3, 0},
		{"colliding hashes, same tokens", true, seqTokens(12, 0), 3, 3},
		{"colliding hashes, other tokens", true, append(seqTokens(4, 0), seqTokens(8, 70)...), 3, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newBlockPool(16, 4, 8)
			if tc.collide {
				p.hash = func([]int64) uint64 { return 7 }
			}
			held := registerSeq(t, p, seqTokens(12, 0))
			if tc.collide { // a second chain under the same (colliding) keys
				p.release(registerSeq(t, p, seqTokens(12, 40)))
			}
			got, parent := p.match(tc.prompt, tc.maxBlocks)
			if len(got) != tc.want || !slices.Equal(got, held[:tc.want]) {
				t.Fatalf("matched %v, want the first %d of %v", got, tc.want, held)
			}
			if tc.want > 0 && parent != p.meta[got[len(got)-1]].id {
				t.Fatalf("parent %d, want the entry id of the last block matched", parent)
			}
			for _, b := range got {
				if p.refs[b] != 2 {
					t.Fatalf("block %d has %d references after a match, want 2", b, p.refs[b])
				}
				if err := p.checkWritable(b); err == nil {
					t.Fatalf("shared block %d is writable", b)
				}
			}
			if p.hitBlocks != int64(tc.want) || p.missBlocks != int64(tc.maxBlocks-tc.want) || p.hitTokens != int64(4*tc.want) {
				t.Fatalf("hits %d blocks %d tokens, misses %d: want %d, %d, %d", p.hitBlocks, p.hitTokens, p.missBlocks, tc.want, 4*tc.want, tc.maxBlocks-tc.want)
			}
			p.release(got)
			p.release(held)
			if p.used != 0 {
				t.Fatalf("%d blocks used after every release", p.used)
			}
			checkAccounting(t, p)
		})
	}
}

func TestBlockPoolCheckWritable(t *testing.T) {
	p := newBlockPool(4, 4, 4)
	b, _ := p.alloc()
	if err := p.checkWritable(b); err != nil {
		t.Fatalf("a sequence's own partial block: %v", err)
	}
	p.register(b, 0, seqTokens(4, 0))
	if err := p.checkWritable(b); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Fatalf("a registered block: %v, want an immutable error", err)
	}
	if err := p.checkWritable(9); err == nil {
		t.Fatal("a block outside the pool is writable")
	}
}

func TestBlockPoolLRU(t *testing.T) {
	p := newBlockPool(8, 4, 3)
	a := registerSeq(t, p, seqTokens(16, 0)) // 4 full blocks
	p.release(a)
	// Cap 3: the tail of the chain goes first, the head stays findable.
	if p.lru.Len() != 3 || p.evictions != 1 || p.meta[a[3]].id != 0 || p.meta[a[0]].id == 0 {
		t.Fatalf("after release: %d cached, %d evictions, tail registered %v, head %v", p.lru.Len(), p.evictions, p.meta[a[3]].id != 0, p.meta[a[0]].id != 0)
	}
	checkAccounting(t, p)
	// A second chain of 3 evicts the first one's 3, oldest first.
	b := registerSeq(t, p, seqTokens(12, 100))
	p.release(b)
	if got, _ := p.match(seqTokens(16, 0), 3); len(got) != 0 {
		t.Fatalf("matched %d blocks of an evicted chain", len(got))
	}
	got, _ := p.match(seqTokens(12, 100), 3)
	if len(got) != 3 {
		t.Fatalf("matched %d blocks of the cached chain, want 3", len(got))
	}
	p.release(got)
	// With the free list empty, alloc takes the least recently used.
	var all []int32
	for range 8 {
		blk, err := p.alloc()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, blk)
	}
	if p.lru.Len() != 0 || p.used != 8 {
		t.Fatalf("after allocating the whole pool: %d cached, %d used", p.lru.Len(), p.used)
	}
	p.release(all)
	if p.free.Len() != 8 {
		t.Fatalf("%d free after releasing unregistered blocks, want 8", p.free.Len())
	}
	checkAccounting(t, p)
}

func TestBlockPoolNoCache(t *testing.T) {
	p := newBlockPool(4, 4, 0)
	blocks := registerSeq(t, p, seqTokens(8, 0))
	p.release(blocks)
	if got, _ := p.match(seqTokens(8, 0), 1); len(got) != 0 || p.lru.Len() != 0 || p.free.Len() != 4 {
		t.Fatalf("with no cache: matched %d, cached %d, free %d", len(got), p.lru.Len(), p.free.Len())
	}
}

func TestBlockPoolDuplicateChain(t *testing.T) {
	// Two sequences computed the same prefix at once: the second's block
	// stays out of the cache, and its chain goes on under the first's id.
	p := newBlockPool(8, 4, 8)
	a := registerSeq(t, p, seqTokens(8, 0))
	b, _ := p.alloc()
	id := p.register(b, 0, seqTokens(4, 0))
	if id != p.meta[a[0]].id || p.meta[b].id != 0 {
		t.Fatalf("duplicate registered: id %d (first %d), own id %d", id, p.meta[a[0]].id, p.meta[b].id)
	}
	p.release([]int32{b})
	p.release(a)
	if p.free.Len() != 6 || p.lru.Len() != 2 {
		t.Fatalf("free %d cached %d, want 6 and 2", p.free.Len(), p.lru.Len())
	}
}
