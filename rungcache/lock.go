package rungcache

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The folder's lock is an flock on its lock file: exclusive for what
// changes the folder (Get, which marks and discards entries, Put, Prune,
// Clear), shared for List. A lock another process holds is waited for, by
// polling, for at most LockWait.Limit: past it (or at Ctrl-C) the Folder
// goes on without the folder for the rest of its life, Get missing and Put
// failing with a note, so a cache never fails or hangs a run. A process
// stopped with the lock held (SIGSTOP, a debugger, a hung disk) costs one
// wait, not one per graph.

// DefaultLockWait is how long a lock held by another process is waited for
// when the process set no LockWait.Limit: far longer than any holder keeps
// it (a Put's rename, a Get's CRC check of a few GiB).
const DefaultLockWait = time.Minute

// lockNotice is how long a wait lasts before LockWait.Waiting hears of it:
// a moment's contention between a run's own compiles says nothing.
const lockNotice = time.Second

// ErrLockWait is wrapped by the errors of a Folder that gave up waiting
// for its folder's lock (or was interrupted waiting) and goes on without
// the folder.
var ErrLockWait = errors.New("rung cache lock not taken")

// LockWait is how a Folder waits for its folder's lock.
type LockWait struct {
	// Limit is the longest wait; 0 means DefaultLockWait.
	Limit time.Duration
	// Waiting, when set, hears once per wait that lasts over a second
	// whom it waits for ("waiting for the rung cache lock held by pid N
	// ...").
	Waiting func(msg string)
	// Done, when closed, ends every wait at once (Ctrl-C): the Folder goes
	// on without its folder.
	Done <-chan struct{}
}

var (
	processWaitMu sync.Mutex
	processWait   LockWait
)

// SetLockWait sets how the Caches this process opens from now on wait for
// their folder's lock (a command sets it once, before it opens any: the
// caches are opened deep inside the compilers).
func SetLockWait(w LockWait) {
	processWaitMu.Lock()
	defer processWaitMu.Unlock()
	processWait = w
}

func defaultLockWait() LockWait {
	processWaitMu.Lock()
	defer processWaitMu.Unlock()
	return processWait
}

// SetLockWait sets how c waits for its folder's lock.
func (c *Folder) SetLockWait(w LockWait) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wait = w
}

// offErr is non-nil once c goes on without its folder.
func (c *Folder) offErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.off
}

// lock takes the folder's lock, exclusive or shared; the returned function
// releases it. A folder where the lock file cannot be created nor opened
// (a read-only folder) is read without the lock when shared: entries
// appear only by rename and go only by unlink, so a reader sees whole
// files.
func (c *Folder) lock(shared bool) (func(), error) {
	if err := c.offErr(); err != nil {
		return nil, err
	}
	path := filepath.Join(c.dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
	if err != nil && readOnly(err) {
		// flock needs no write access: an existing lock file still locks.
		f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil && shared && (readOnly(err) || errors.Is(err, os.ErrNotExist)) {
			return func() {}, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("rung cache %s: lock: %w", c.dir, unwrap(err))
	}
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	if err := c.waitLock(f, how); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func readOnly(err error) bool {
	return errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EPERM)
}

// waitLock flocks f, polling while another holder has it, for at most the
// wait's limit.
func (c *Folder) waitLock(f *os.File, how int) error {
	err := flock(f, how|syscall.LOCK_NB)
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		if err != nil {
			return fmt.Errorf("rung cache %s: lock: %w", c.dir, err)
		}
		return nil
	}
	c.mu.Lock()
	w := c.wait
	c.mu.Unlock()
	limit := w.Limit
	if limit <= 0 {
		limit = DefaultLockWait
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	notice := time.NewTimer(lockNotice)
	defer notice.Stop()
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		select {
		case <-w.Done:
			return c.goOff(fmt.Errorf("%w: interrupted while waiting for the lock of %s held by %s; going on without the cache", ErrLockWait, c.dir, lockHolder(f)))
		case <-deadline.C:
			return c.goOff(fmt.Errorf("%w: the lock of %s was held by %s for %s; going on without the cache", ErrLockWait, c.dir, lockHolder(f), limit))
		case <-notice.C:
			if w.Waiting != nil {
				w.Waiting(fmt.Sprintf("waiting for the rung cache lock held by %s (%s), at most %s", lockHolder(f), f.Name(), limit))
			}
		case <-time.After(pause):
		}
		if err := flock(f, how|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
			if err != nil {
				return fmt.Errorf("rung cache %s: lock: %w", c.dir, err)
			}
			return nil
		}
	}
}

// goOff turns c off for good with err, and returns it.
func (c *Folder) goOff(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off == nil {
		c.off = err
	}
	return c.off
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// lockHolder names the process holding the flock on f, from /proc/locks:
// "pid N", or "another process" where it cannot tell (no /proc, another
// pid namespace).
func lockHolder(f *os.File) string {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return "another process"
	}
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return "another process"
	}
	defer locks.Close()
	pid := holderIn(io.LimitReader(locks, 4<<20), unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	if pid <= 0 {
		return "another process"
	}
	if pid == os.Getpid() {
		return fmt.Sprintf("pid %d (this process)", pid)
	}
	return fmt.Sprintf("pid %d", pid)
}

// holderIn finds in /proc/locks text the pid holding an flock on the file
// of device major:minor and inode ino, 0 when none. A line reads
// "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters' lines have
// "->" after the number.
func holderIn(r io.Reader, major, minor uint32, ino uint64) int {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" {
			continue
		}
		id := strings.Split(fs[5], ":")
		if len(id) != 3 {
			continue
		}
		ma, err1 := strconv.ParseUint(id[0], 16, 32)
		mi, err2 := strconv.ParseUint(id[1], 16, 32)
		in, err3 := strconv.ParseUint(id[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || uint32(ma) != major || uint32(mi) != minor || in != ino {
			continue
		}
		if pid, err := strconv.Atoi(fs[4]); err == nil {
			return pid
		}
	}
	return 0
}
