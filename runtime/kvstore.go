package runtime

import (
	"errors"
	"fmt"

	"github.com/ovtoolkit/ovrun/ladder"
)

// KVStore holds one sequence's KV cache across the rungs it decodes on. The
// three implementations are the policies' KV designs (ladder.Store): one
// committed buffer of the largest capacity (MaxStore), a buffer of the
// current rung's capacity copied forward at each boundary (CopyStore), and
// one reservation whose pages are committed as tokens arrive (RemapStore).
// A store is used by one sequence at a time.
type KVStore interface {
	// Open allocates the store for a first rung of capacity slots and
	// returns that rung's view.
	Open(capacity int) (*KV, error)
	// Grow returns the view of a larger rung holding the first live
	// tokens, and the bytes copied to make it. observe, when not nil, is
	// told each reserved level Grow passes through (old and new buffers
	// coexist during a copy).
	Grow(capacity, live int, observe func(reserved int64)) (*KV, int64, error)
	// Reserved is the KV memory the store holds now: allocated bytes, or
	// for a committing store the pages actually resident.
	Reserved() int64
	// Accounting is how Reserved counts: "allocated" (buffer sizes) or
	// "committed" (private pages, read from /proc/self/pagemap); a committed
	// level changes as tokens are written, so callers re-read it per step.
	Accounting() string
	// Close frees the memory; views of it must no longer be used.
	Close() error
}

// Accounting values of KVStore.Accounting (the summary's kv_measured).
const (
	Allocated = "allocated"
	Committed = "committed"
)

// NewKVStore makes the store a policy names, for caches of shape on a
// ladder whose largest capacity is maxCapacity.
func NewKVStore(kind ladder.Store, shape KVShape, maxCapacity int) (KVStore, error) {
	switch kind {
	case ladder.StoreMax:
		return NewMaxStore(shape, maxCapacity), nil
	case ladder.StoreCopy:
		return NewCopyStore(shape, maxCapacity), nil
	case ladder.StoreRemap:
		return NewRemapStore(shape, maxCapacity), nil
	}
	return nil, fmt.Errorf("unknown kv store %q", kind)
}

// errNotOpen is returned by a store used before Open.
var errNotOpen = errors.New("kv store used before it was opened")

// MaxStore is one committed buffer of the largest capacity (direct,
// pyramid): every rung views its prefix and a boundary copies nothing, but
// the whole buffer is reserved from the start.
type MaxStore struct {
	shape    KVShape
	capacity int
	buf      *KVBuffer
}

// NewMaxStore is a MaxStore of capacity slots.
func NewMaxStore(shape KVShape, capacity int) *MaxStore {
	return &MaxStore{shape: shape, capacity: capacity}
}

func (s *MaxStore) Open(capacity int) (*KV, error) {
	buf, err := AllocKV(s.shape, s.capacity, true)
	if err != nil {
		return nil, err
	}
	s.buf = buf
	return buf.View(capacity)
}

func (s *MaxStore) Grow(capacity, live int, observe func(int64)) (*KV, int64, error) {
	if s.buf == nil {
		return nil, 0, errNotOpen
	}
	kv, err := s.buf.View(capacity)
	return kv, 0, err
}

func (s *MaxStore) Reserved() int64 {
	if s.buf == nil {
		return 0
	}
	return s.buf.Bytes()
}

func (s *MaxStore) Accounting() string { return Allocated }

func (s *MaxStore) Close() error {
	err := s.buf.Free()
	s.buf = nil
	return err
}

// CopyStore keeps a committed buffer of the current rung's capacity
// (grow-eager, grow-one-ahead, lazy): a boundary allocates the next rung's
// buffer, copies the live tokens and frees the old one, so both exist
// during the copy.
type CopyStore struct {
	shape    KVShape
	capacity int // the largest a buffer may grow to
	buf      *KVBuffer
	kv       *KV
}

// NewCopyStore is a CopyStore whose buffers grow up to capacity slots.
func NewCopyStore(shape KVShape, capacity int) *CopyStore {
	return &CopyStore{shape: shape, capacity: capacity}
}

func (s *CopyStore) Open(capacity int) (*KV, error) {
	if capacity > s.capacity {
		return nil, fmt.Errorf("%w: a buffer of %d slots in a store of at most %d", ErrCapacity, capacity, s.capacity)
	}
	buf, err := AllocKV(s.shape, capacity, true)
	if err != nil {
		return nil, err
	}
	s.buf = buf
	s.kv, err = buf.View(capacity)
	return s.kv, err
}

func (s *CopyStore) Grow(capacity, live int, observe func(int64)) (*KV, int64, error) {
	if s.buf == nil {
		return nil, 0, errNotOpen
	}
	if capacity > s.capacity {
		return nil, 0, fmt.Errorf("%w: a buffer of %d slots in a store of at most %d", ErrCapacity, capacity, s.capacity)
	}
	nb, err := AllocKV(s.shape, capacity, true)
	if err != nil {
		return nil, 0, err
	}
	if observe != nil {
		observe(s.buf.Bytes() + nb.Bytes()) // both buffers exist during the copy
	}
	kv, err := nb.View(capacity)
	if err != nil {
		return nil, 0, errors.Join(err, nb.Free())
	}
	n, err := CopyLive(kv, s.kv, live, s.shape)
	if err != nil {
		return nil, 0, errors.Join(err, nb.Free())
	}
	old := s.buf
	s.buf, s.kv = nb, kv
	if err := old.Free(); err != nil {
		return nil, 0, err
	}
	if observe != nil {
		observe(s.buf.Bytes())
	}
	return kv, n, nil
}

func (s *CopyStore) Reserved() int64 {
	if s.buf == nil {
		return 0
	}
	return s.buf.Bytes()
}

func (s *CopyStore) Accounting() string { return Allocated }

func (s *CopyStore) Close() error {
	err := s.buf.Free()
	s.buf, s.kv = nil, nil
	return err
}

// RemapStore reserves the largest capacity's address space without
// committing it (grow-remap): pages become resident as tokens are written,
// every rung views a prefix, and a boundary binds a longer view without
// copying. Reserved counts the resident pages.
type RemapStore struct {
	shape    KVShape
	capacity int
	buf      *KVBuffer
}

// NewRemapStore is a RemapStore reserving capacity slots.
func NewRemapStore(shape KVShape, capacity int) *RemapStore {
	return &RemapStore{shape: shape, capacity: capacity}
}

func (s *RemapStore) Open(capacity int) (*KV, error) {
	buf, err := AllocKV(s.shape, s.capacity, false)
	if err != nil {
		return nil, err
	}
	s.buf = buf
	return buf.View(capacity)
}

func (s *RemapStore) Grow(capacity, live int, observe func(int64)) (*KV, int64, error) {
	if s.buf == nil {
		return nil, 0, errNotOpen
	}
	kv, err := s.buf.View(capacity)
	return kv, 0, err
}

// Reserved is the resident bytes; when the kernel's page map cannot be read
// it falls back to the reservation's size.
func (s *RemapStore) Reserved() int64 {
	if s.buf == nil {
		return 0
	}
	if n, err := s.buf.Committed(); err == nil {
		return n
	}
	return s.buf.Bytes()
}

func (s *RemapStore) Accounting() string { return Committed }

func (s *RemapStore) Close() error {
	err := s.buf.Free()
	s.buf = nil
	return err
}

var (
	_ KVStore = (*MaxStore)(nil)
	_ KVStore = (*CopyStore)(nil)
	_ KVStore = (*RemapStore)(nil)
)
