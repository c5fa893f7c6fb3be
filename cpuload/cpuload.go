// Package cpuload tells how busy the machine's CPUs are: the share of CPU
// time since the previous reading that was not idle, from the kernel's
// counters in /proc/stat. It is for controllers that trade CPU for latency
// (fanout.Clock's write budget) and want to know whether the machine has
// room for more work, whichever processes use it.
package cpuload

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// Gauge reads the machine's CPU use from a /proc/stat file. Each call to
// Busy covers the time since the previous call. A Gauge is safe for
// concurrent use.
type Gauge struct {
	path string

	mu         sync.Mutex
	busy, idle uint64 // the counters at the previous reading
	primed     bool
}

// Machine returns a Gauge for this machine (/proc/stat), or an error if the
// system has no such file (not Linux) or its format is not understood.
func Machine() (*Gauge, error) {
	g := &Gauge{path: "/proc/stat"}
	if _, _, err := g.read(); err != nil {
		return nil, err
	}
	return g, nil
}

// Busy returns the share of the machine's CPU time since the previous
// call that was not idle (user, system, interrupts, and time the
// hypervisor took: steal is time the machine could not run), in [0, 1].
// ok is false on the first call, when no time has passed, and when the
// counters cannot be read.
func (g *Gauge) Busy() (busy float64, ok bool) {
	b, i, err := g.read()
	if err != nil {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	prevB, prevI, primed := g.busy, g.idle, g.primed
	g.busy, g.idle, g.primed = b, i, true
	if !primed || b < prevB || i < prevI || b+i == prevB+prevI {
		return 0, false
	}
	db, di := b-prevB, i-prevI
	return float64(db) / float64(db+di), true
}

// read returns the busy and idle counters (clock ticks) of the aggregate
// "cpu" line.
func (g *Gauge) read() (busy, idle uint64, err error) {
	f, err := os.Open(g.path)
	if err != nil {
		return 0, 0, fmt.Errorf("cpu load: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 512).ReadSlice('\n')
	if err != nil {
		return 0, 0, fmt.Errorf("cpu load: read the first line of %s: %w", g.path, err)
	}
	return parseCPULine(line)
}

// parseCPULine parses the aggregate line of /proc/stat: "cpu" and the
// counters user nice system idle iowait irq softirq steal [guest
// guest_nice]. Idle time is idle + iowait; guest time is already counted
// in user and nice, so it is left out.
func parseCPULine(line []byte) (busy, idle uint64, err error) {
	fields := bytes.Fields(line)
	if len(fields) < 5 || string(fields[0]) != "cpu" {
		return 0, 0, fmt.Errorf("cpu load: not the aggregate cpu line of /proc/stat: %q", line)
	}
	for i, f := range fields[1:min(len(fields), 9)] {
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("cpu load: counter %d of %q: %w", i+1, line, err)
		}
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		} else {
			busy += v
		}
	}
	return busy, idle, nil
}
