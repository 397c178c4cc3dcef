package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a process found through /proc.
type Proc struct {
	Pid     int
	Cmdline []string
}

// Children lists the processes whose parent is pid and whose command line
// holds every one of words (compile workers: "compile-worker").
func Children(pid int, words ...string) []Proc {
	ents, _ := os.ReadDir("/proc")
	var out []Proc
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st := procStat(p); len(st) < 2 || st[1] != strconv.Itoa(pid) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		all := true
		for _, w := range words {
			all = all && strings.Contains(strings.Join(args, " "), w)
		}
		if all {
			out = append(out, Proc{Pid: p, Cmdline: args})
		}
	}
	return out
}

// Alive reports whether pid is a process that has not exited (a zombie
// has exited).
func Alive(pid int) bool {
	st := procStat(pid)
	return len(st) > 0 && st[0] != "Z"
}

// ThreadAttrs is one thread's CPU set (Cpus_allowed_list) and nice value.
type ThreadAttrs struct {
	Tid  int
	CPUs string
	Nice int
}

// Threads lists the threads of pid with their CPU sets and nice values.
func Threads(pid int) []ThreadAttrs {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	ents, _ := os.ReadDir(dir)
	var out []ThreadAttrs
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		if err != nil {
			continue
		}
		stat := procStatPath(filepath.Join(dir, e.Name(), "stat"))
		if len(stat) < 17 {
			continue
		}
		a := ThreadAttrs{Tid: tid}
		a.Nice, _ = strconv.Atoi(stat[16]) // field 19 of stat; ours start at field 3
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				a.CPUs = strings.TrimSpace(v)
			}
		}
		out = append(out, a)
	}
	return out
}

// procStat is /proc/PID/stat's fields from the state on (field 3), nil
// when the process is gone.
func procStat(pid int) []string {
	return procStatPath(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
}

func procStatPath(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// Compiling reports whether process pid has loaded OpenVINO's CPU plugin,
// which a compile worker does when it starts compiling.
func Compiling(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "maps"))
	return err == nil && strings.Contains(string(b), "openvino_intel_cpu_plugin")
}

// KillCompileWorkers SIGKILLs, mid-compile, the first n compile workers of
// graph (e.g. "decode-c64") that parent starts; stop ends the watch and
// says how many it killed.
func KillCompileWorkers(parent int, graph string, n int) (stop func() int) {
	done := make(chan struct{})
	killed := map[int]bool{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for len(killed) < n {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
			for _, p := range Children(parent, "compile-worker", graph) {
				if !killed[p.Pid] && Compiling(p.Pid) && syscall.Kill(p.Pid, syscall.SIGKILL) == nil {
					killed[p.Pid] = true
				}
			}
		}
	}()
	return func() int {
		close(done)
		wg.Wait()
		return len(killed)
	}
}
