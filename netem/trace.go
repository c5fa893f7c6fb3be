// Package netem is a trace-driven link emulator in the style of Mahimahi's
// link shell. It connects two network namespaces it creates through a pair
// of TUN devices and forwards every packet in user space through a per-
// direction link: a drop-tail queue served at the delivery opportunities of a
// Mahimahi trace, optional random loss, and a fixed one-way delay. Each
// packet's enqueue time, dequeue time or drop is logged.
//
// The queueing model (Link) is pure and deterministic; Emulator adds the
// namespaces, the TUN devices and the real-time pump.
package netem

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MTU is the size of one delivery opportunity, in bytes.
const MTU = 1500

// Trace is a Mahimahi link trace: each entry is a millisecond at which the
// link may deliver one MTU-sized packet. The trace repeats with period
// Period.
type Trace struct {
	Name   string
	ms     []uint64 // sorted opportunity times
	period uint64   // ms
}

// MaxTraceMs bounds the times in a trace: about 49.7 days, far beyond any
// recorded link and far below where the emulator's microsecond arithmetic
// would overflow.
const MaxTraceMs = 1 << 32

// ParseTrace reads a Mahimahi trace: one non-negative integer (milliseconds,
// at most MaxTraceMs) per line, non-decreasing. Blank lines are skipped.
func ParseTrace(name string, r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	var ms []uint64
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			continue
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("netem: trace %s line %d: %s is not a millisecond count", name, line, quoteShort(s))
		}
		if v > MaxTraceMs {
			return nil, fmt.Errorf("netem: trace %s line %d: %d ms is beyond the longest trace supported, %d ms", name, line, v, uint64(MaxTraceMs))
		}
		if n := len(ms); n > 0 && v < ms[n-1] {
			return nil, fmt.Errorf("netem: trace %s line %d: %d is before the previous %d", name, line, v, ms[n-1])
		}
		ms = append(ms, v)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("netem: trace %s line %d: longer than %d bytes; a Mahimahi trace has one millisecond count a line", name, line+1, bufio.MaxScanTokenSize)
		}
		return nil, fmt.Errorf("netem: read trace %s: %w", name, err)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("netem: trace %s has no delivery opportunities", name)
	}
	period := ms[len(ms)-1]
	if period == 0 {
		return nil, fmt.Errorf("netem: trace %s ends at 0 ms; its period would be empty", name)
	}
	return &Trace{Name: name, ms: ms, period: period}, nil
}

// quoteShort quotes s for an error message, cut to its first 40 bytes:
// a trace that is not text (a compressed file, say) has lines of any
// length.
func quoteShort(s string) string {
	const n = 40
	if len(s) <= n {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:n]) + fmt.Sprintf(" (%d bytes more)", len(s)-n)
}

// LoadTrace reads a trace file.
func LoadTrace(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("netem: open trace: %w", err)
	}
	defer f.Close()
	return ParseTrace(path, f)
}

// MaxConstantPerMs bounds ConstantTrace's rate: 65536 opportunities a
// millisecond are about 786 Gbit/s.
const MaxConstantPerMs = 1 << 16

// ConstantTrace returns a trace with perMs opportunities every millisecond,
// i.e. a constant rate of perMs·12 Mbit/s. perMs must be in
// [1, MaxConstantPerMs]: a link with no opportunities would never deliver.
func ConstantTrace(perMs int) (*Trace, error) {
	if perMs < 1 || perMs > MaxConstantPerMs {
		return nil, fmt.Errorf("netem: constant trace of %d delivery opportunities a millisecond: want 1 to %d", perMs, MaxConstantPerMs)
	}
	ms := make([]uint64, perMs)
	for i := range ms {
		ms[i] = 1
	}
	return &Trace{Name: fmt.Sprintf("constant-%dpkt-per-ms", perMs), ms: ms, period: 1}, nil
}

// Period is the trace's loop length.
func (t *Trace) Period() time.Duration { return time.Duration(t.period) * time.Millisecond }

// Opportunities is the number of opportunities in one period.
func (t *Trace) Opportunities() int { return len(t.ms) }

// MeanRate is the trace's mean capacity in bits per second.
func (t *Trace) MeanRate() float64 {
	return float64(len(t.ms)) * MTU * 8 / (float64(t.period) / 1000)
}

// at returns the time of opportunity k (counting across periods), in µs.
func (t *Trace) at(k uint64) uint64 {
	n := uint64(len(t.ms))
	return (t.ms[k%n] + k/n*t.period) * 1000
}

// firstAtOrAfter returns the index of the first opportunity at or after
// usec microseconds.
func (t *Trace) firstAtOrAfter(usec uint64) uint64 {
	msCeil := (usec + 999) / 1000
	cycle := msCeil / t.period
	off := msCeil % t.period
	n := uint64(len(t.ms))
	// The first period's entries may start at 0; entries equal to period
	// belong to the end of a cycle and coincide with the next cycle's 0.
	i := uint64(sort.Search(len(t.ms), func(i int) bool { return t.ms[i] >= off }))
	k := cycle*n + i
	for t.at(k) < usec { // guard rounding at period boundaries
		k++
	}
	// Step back over equal-time entries that might precede k.
	for k > 0 && t.at(k-1) >= usec {
		k--
	}
	return k
}

// Capacity returns how many bytes the link can deliver between from and to
// (measured from the link's start; the link has no opportunities before
// it).
func (t *Trace) Capacity(from, to time.Duration) int64 {
	from = max(from, 0)
	if to <= from {
		return 0
	}
	a := t.firstAtOrAfter(uint64(from / time.Microsecond))
	b := t.firstAtOrAfter(uint64(to / time.Microsecond))
	return int64(b-a) * MTU
}
