package fanout

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// Load follows how busy the CPUs are, so that writers batch more only while
// CPU time is scarce. Writers that share a Load (Options.Load) stretch their
// linger interval from Options.Linger, while the CPUs have headroom, towards
// MaxLinger as they saturate: a write costs a system call, and under
// saturation fewer, larger writes leave more CPU time for the work that has
// to be done, instead of letting queues grow. While the CPUs have headroom a
// connection keeps the shorter linger and its lower latency.
//
// The busy fraction is the larger of the machine's (from /proc/stat, all
// CPUs, time not idle) and this process's CPU time over GOMAXPROCS (which
// covers a CPU quota), sampled every SampleEvery and smoothed.
type Load struct {
	pressure atomic.Uint64 // math.Float64bits of the current pressure
	busy     atomic.Uint64 // math.Float64bits of the smoothed busy fraction
	done     chan struct{}
}

// Parameters of the load rule.
const (
	// MaxLinger is the linger under full pressure (unless Options.Linger
	// is longer).
	MaxLinger = 40 * time.Millisecond
	// LoadLow is the busy fraction up to which there is no pressure;
	// LoadHigh the one at which the pressure is full. In between it rises
	// linearly.
	LoadLow  = 0.6
	LoadHigh = 0.9
	// SampleEvery is how often a Load samples the CPU times.
	SampleEvery = 100 * time.Millisecond
	// smoothing is the weight of a new sample in the smoothed busy fraction
	// (a time constant of about 0.4 s at SampleEvery).
	smoothing = 0.25
)

// NewLoad starts following the CPU load until ctx ends.
func NewLoad(ctx context.Context) *Load {
	l := &Load{done: make(chan struct{})}
	l.storePressure(0)
	go l.run(ctx)
	return l
}

// Pressure is how far the linger is stretched from Options.Linger towards
// MaxLinger: 0 while the CPUs have headroom, 1 when they are saturated. A
// nil Load has none.
func (l *Load) Pressure() float64 {
	if l == nil {
		return 0
	}
	return math.Float64frombits(l.pressure.Load())
}

// Linger is the linger interval under the current pressure for a
// connection configured with base; a connection with no linger (base 0)
// gets none.
func (l *Load) Linger(base time.Duration) time.Duration {
	p := l.Pressure()
	if p == 0 || base <= 0 || base >= MaxLinger {
		return base
	}
	return base + time.Duration(p*float64(MaxLinger-base))
}

// Busy is the smoothed busy fraction of the CPUs, 0 to 1.
func (l *Load) Busy() float64 {
	if l == nil {
		return 0
	}
	return math.Float64frombits(l.busy.Load())
}

// Done is closed when the Load has stopped sampling.
func (l *Load) Done() <-chan struct{} { return l.done }

// pressureFor maps a busy fraction to a pressure.
func pressureFor(busy float64) float64 {
	f := (busy - LoadLow) / (LoadHigh - LoadLow)
	return min(max(f, 0), 1)
}

func (l *Load) run(ctx context.Context) {
	defer close(l.done)
	var s cpuSampler
	s.sample() // the first sample only sets the starting point
	t := time.NewTicker(SampleEvery)
	defer t.Stop()
	smoothed, first := 0.0, true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, ok := s.sample()
		if !ok {
			continue
		}
		if first {
			smoothed, first = b, false
		} else {
			smoothed += smoothing * (b - smoothed)
		}
		l.busy.Store(math.Float64bits(smoothed))
		l.storePressure(pressureFor(smoothed))
	}
}

func (l *Load) storePressure(f float64) { l.pressure.Store(math.Float64bits(f)) }

// cpuSampler turns cumulative CPU times into busy fractions between calls.
type cpuSampler struct {
	at                time.Time
	proc              time.Duration // this process's user+system time
	machBusy, machAll uint64        // /proc/stat jiffies
	machOK            bool
}

// sample returns the busy fraction since the previous call; ok is false on
// the first call or when no time has passed.
func (s *cpuSampler) sample() (busy float64, ok bool) {
	now := time.Now()
	proc := processCPU()
	mb, ma, mok := machineCPU()
	if !s.at.IsZero() {
		if wall := now.Sub(s.at); wall > 0 {
			busy = float64(proc-s.proc) / float64(wall) / float64(runtime.GOMAXPROCS(0))
			if mok && s.machOK && ma > s.machAll {
				busy = max(busy, float64(mb-s.machBusy)/float64(ma-s.machAll))
			}
			ok = true
		}
	}
	s.at, s.proc, s.machBusy, s.machAll, s.machOK = now, proc, mb, ma, mok
	return min(max(busy, 0), 1), ok
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU reads the busy and total jiffies of all CPUs from /proc/stat.
func machineCPU() (busy, total uint64, ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadSlice('\n')
	if err != nil {
		return 0, 0, false
	}
	busy, total, err = parseProcStat(line)
	return busy, total, err == nil
}

// parseProcStat parses the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal ...; idle and iowait are not busy.
// Guest times are already counted in user and nice.
func parseProcStat(line []byte) (busy, total uint64, err error) {
	fields := bytes.Fields(line)
	if len(fields) < 5 || string(fields[0]) != "cpu" {
		return 0, 0, fmt.Errorf("fanout: /proc/stat: want an aggregate cpu line, got %q", line)
	}
	for i, f := range fields[1:] {
		if i >= 8 { // guest and guest_nice are part of user and nice
			break
		}
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("fanout: /proc/stat: field %d of %q: %w", i+1, line, err)
		}
		total += v
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy, total, nil
}
