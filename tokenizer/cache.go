package tokenizer

import "sync"

// wordCache remembers the ids of short pre-tokenized words; most text
// repeats them, and a hit skips the merge loop.
type wordCache struct {
	mu sync.Mutex
	m  map[string][]int64
}

const (
	cacheMaxWords     = 1 << 16
	cacheMaxWordBytes = 128
)

func (c *wordCache) get(w string) ([]int64, bool) {
	if len(w) > cacheMaxWordBytes {
		return nil, false
	}
	c.mu.Lock()
	ids, ok := c.m[w]
	c.mu.Unlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int64) {
	if len(w) > cacheMaxWordBytes {
		return
	}
	cp := append([]int64(nil), ids...)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= cacheMaxWords {
		c.m = make(map[string][]int64, 1024) // start over rather than grow without bound
	}
	c.m[w] = cp
	c.mu.Unlock()
}
