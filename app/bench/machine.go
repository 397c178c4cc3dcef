package bench

import (
	"bufio"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
)

// Machine describes where a campaign ran.
type Machine struct {
	CPUModel    string `json:"cpu_model"`
	Cores       int    `json:"cores"` // logical CPUs this process may use
	MemoryBytes int64  `json:"memory_bytes"`
	Kernel      string `json:"kernel"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	// LoadAvgStart and LoadAvgEnd are the 1-minute load averages when the
	// campaign started and ended: a load above Cores means the runs shared
	// the CPUs with other work.
	LoadAvgStart float64 `json:"loadavg_start"`
	LoadAvgEnd   float64 `json:"loadavg_end"`
}

// ReadMachine reads /proc; fields it cannot read stay empty.
func ReadMachine() Machine {
	m := Machine{Cores: goruntime.NumCPU(), OS: goruntime.GOOS, Arch: goruntime.GOARCH}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	if kb := procField("/proc/meminfo", "MemTotal"); kb != "" {
		n, _ := strconv.ParseInt(strings.Fields(kb)[0], 10, 64)
		m.MemoryBytes = n << 10
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.LoadAvgStart = LoadAvg()
	return m
}

// LoadAvg is the 1-minute load average, 0 when unknown.
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// procField returns the value of the first "key : value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
