// Package cpuload tells how busy the machine's CPUs are, from the kernel's
// counters in /proc/stat: the CPU time so far (Read), and the share of it
// since the previous reading that was not idle (Gauge), or, for a process
// under a cgroup CPU limit, the share of that limit it used if more. It is for
// controllers that trade CPU for latency (fanout.Clock's write budget) and
// want to know whether the machine has room for more work, whichever
// processes use it, and for benchmarks that report what else ran.
package cpuload

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// statPath is the kernel's CPU counters.
const statPath = "/proc/stat"

// ticksPerSecond is the unit of the counters: USER_HZ, 100 on every Linux
// architecture that Go supports.
const ticksPerSecond = 100

// Times is the machine's CPU time so far, in seconds summed over its CPUs
// (seconds, not a time.Duration: a machine with many CPUs and a long
// uptime has more CPU time than a Duration holds).
type Times struct {
	// Busy is user, nice, system, irq and softirq time (guest time is
	// already counted in user and nice).
	Busy float64
	// Idle is idle and iowait time.
	Idle float64
	// Steal is the time the hypervisor gave this machine's CPUs to others.
	Steal float64
}

// Total is all of the machine's CPU time.
func (t Times) Total() float64 { return t.Busy + t.Idle + t.Steal }

// Read returns the machine's CPU times from /proc/stat, or an error if the
// system has no such file (not Linux) or its format is not understood.
func Read() (Times, error) { return readFile(statPath) }

func readFile(path string) (Times, error) {
	f, err := os.Open(path)
	if err != nil {
		return Times{}, fmt.Errorf("cpu load: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 512).ReadSlice('\n')
	if err != nil {
		return Times{}, fmt.Errorf("cpu load: read the first line of %s: %w", path, err)
	}
	return ParseTimes(line)
}

// ParseTimes parses the aggregate line of /proc/stat: "cpu" and the
// counters user nice system idle iowait irq softirq steal [guest
// guest_nice], of which at least the first four.
func ParseTimes(line []byte) (Times, error) {
	fields := bytes.Fields(line)
	if len(fields) < 5 || string(fields[0]) != "cpu" {
		return Times{}, fmt.Errorf("cpu load: not the aggregate cpu line of /proc/stat: %q", line)
	}
	var busy, idle, steal float64 // ticks
	for i, f := range fields[1:min(len(fields), 9)] {
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return Times{}, fmt.Errorf("cpu load: counter %d of %q: %w", i+1, line, err)
		}
		switch i {
		case 3, 4: // idle, iowait
			idle += float64(v)
		case 7:
			steal += float64(v)
		default:
			busy += float64(v)
		}
	}
	return Times{Busy: busy / ticksPerSecond, Idle: idle / ticksPerSecond, Steal: steal / ticksPerSecond}, nil
}

// Gauge reads the machine's CPU use from a /proc/stat file, and, when the
// process runs under a CPU limit, its cgroup's use against that limit.
// Each call to Busy covers the time since the previous call. A Gauge is
// safe for concurrent use.
type Gauge struct {
	path  string
	quota *quota           // nil: no CPU limit
	now   func() time.Time // the clock for the cgroup's share

	mu        sync.Mutex
	prev      Times // the counters at the previous reading
	prevUsage float64
	prevAt    time.Time
	primed    bool
}

// Machine returns a Gauge for this machine (/proc/stat), or an error if the
// system has no such file (not Linux) or its format is not understood.
// When the process's cgroup or one above it has a CPU limit (cgroup v2
// cpu.max, v1 cpu.cfs_quota_us), the Gauge also reads the cgroup's CPU
// time (cpu.stat, cpuacct.usage), and Busy is the busier of the two: a
// container limited to two CPUs of a 32-CPU host is busy when it uses two.
func Machine() (*Gauge, error) {
	g := &Gauge{path: statPath, now: time.Now}
	if _, err := readFile(g.path); err != nil {
		return nil, err
	}
	if self, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		q, err := findQuota(cgroupRoot, self)
		if err != nil {
			return nil, err
		}
		g.quota = q
	}
	return g, nil
}

// Limit is the CPU limit the Gauge measures against besides the machine,
// in CPUs; 0 when there is none.
func (g *Gauge) Limit() float64 {
	if g.quota == nil {
		return 0
	}
	return g.quota.cpus
}

// Busy returns the share of the machine's CPU time since the previous
// call that was not idle (user, system, interrupts, and time the
// hypervisor took: steal is time the machine could not run), in [0, 1].
// ok is false on the first call, when no time has passed, and when the
// counters cannot be read.
//
// Under a CPU limit, Busy is the larger of that share and the cgroup's CPU
// time since the previous call against what the limit allowed in it.
func (g *Gauge) Busy() (busy float64, ok bool) {
	t, err := readFile(g.path)
	if err != nil {
		return 0, false
	}
	var usage float64
	var at time.Time
	if g.quota != nil {
		if usage, err = g.quota.Usage(); err != nil {
			return 0, false
		}
		at = g.now()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	prev, prevUsage, prevAt, primed := g.prev, g.prevUsage, g.prevAt, g.primed
	g.prev, g.prevUsage, g.prevAt, g.primed = t, usage, at, true
	if !primed || t.Busy+t.Steal < prev.Busy+prev.Steal || t.Idle < prev.Idle || t.Total() == prev.Total() {
		return 0, false
	}
	db := t.Busy + t.Steal - prev.Busy - prev.Steal
	busy = db / (t.Total() - prev.Total())
	if g.quota != nil {
		if wall := at.Sub(prevAt).Seconds(); wall > 0 && usage >= prevUsage {
			busy = max(busy, (usage-prevUsage)/(wall*g.quota.cpus))
		}
	}
	return min(max(busy, 0), 1), true
}
