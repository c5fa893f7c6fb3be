package netem

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"time"
)

// Packet is one IP packet travelling through a Link.
type Packet struct {
	// Data is the IP packet. The emulator's segments of a GSO super-packet
	// leave it nil and set Size instead.
	Data []byte
	// Size is the packet's size on the wire in bytes; 0 means len(Data).
	Size int
	// Enq is when the packet reached the link, µs since the link's start.
	Enq uint64
	// Deq is when the packet left the queue, µs since start.
	Deq uint64
	rem int // bytes still to be served

	sp  *superPacket // the emulator's read buffer this packet lives in
	seg int          // segment index within sp
}

func (p *Packet) size() int {
	if p.Size > 0 {
		return p.Size
	}
	return len(p.Data)
}

// LinkConfig describes one direction of the emulated link.
type LinkConfig struct {
	Trace *Trace
	Delay time.Duration
	// QueuePackets and QueueBytes bound the drop-tail queue; 0 means
	// unbounded. At most one should be set.
	QueuePackets int
	QueueBytes   int
	// Loss is the probability that an arriving packet is dropped at random.
	Loss float64
	Seed uint64
	// Log, if set, receives one line per packet: "enq_us deq_us bytes" for a
	// packet that left the queue (at deq_us; it leaves the link the delay
	// later, and the emulator does not write it if it closes first),
	// "enq_us -1 bytes tail" or "enq_us -1 bytes loss" for a dropped one.
	Log io.Writer
}

// LinkStats counts what a link did.
type LinkStats struct {
	Arrived, Delivered, TailDrops, LossDrops uint64
	DeliveredBytes                           uint64
	// Opportunities is the number of trace opportunities that have passed
	// (used or not) up to the last Advance.
	Opportunities uint64
}

// Link is the queueing model of one direction: a drop-tail queue served by
// trace opportunities, followed by a fixed delay. It does no I/O of its own
// except logging and is driven by Arrive and Advance with explicit times, so
// it is deterministic. A Link is not safe for concurrent use.
type Link struct {
	cfg     LinkConfig
	delayUs uint64
	rng     *rand.Rand
	log     *bufio.Writer
	line    []byte // scratch for log lines

	q      []*Packet // FIFO; q[qh:] are queued
	qh     int
	qBytes int
	cursor uint64 // next opportunity index
	now    uint64
	stats  LinkStats
}

// NewLink returns a link in its initial state (time 0).
func NewLink(cfg LinkConfig) (*Link, error) {
	if cfg.Trace == nil {
		return nil, fmt.Errorf("netem: link needs a trace")
	}
	if len(cfg.Trace.ms) == 0 || cfg.Trace.period == 0 {
		// Only a Trace not made by ParseTrace or ConstantTrace can be empty.
		return nil, fmt.Errorf("netem: trace %q has no delivery opportunities (make traces with ParseTrace, LoadTrace or ConstantTrace)", cfg.Trace.Name)
	}
	if cfg.QueuePackets < 0 || cfg.QueueBytes < 0 {
		return nil, fmt.Errorf("netem: negative queue limit (%d packets, %d bytes)", cfg.QueuePackets, cfg.QueueBytes)
	}
	if cfg.QueuePackets > 0 && cfg.QueueBytes > 0 {
		return nil, fmt.Errorf("netem: set a queue limit in packets or in bytes, not both")
	}
	if !(cfg.Loss >= 0 && cfg.Loss < 1) { // NaN too: it would be no loss at all
		return nil, fmt.Errorf("netem: loss probability %v outside [0, 1)", cfg.Loss)
	}
	if cfg.Delay < 0 {
		return nil, fmt.Errorf("netem: negative delay %v", cfg.Delay)
	}
	l := &Link{
		cfg:     cfg,
		delayUs: uint64(cfg.Delay / time.Microsecond),
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x6e6574656d)),
	}
	if cfg.Log != nil {
		l.log = bufio.NewWriterSize(cfg.Log, 1<<20)
	}
	return l, nil
}

// Stats returns the counters so far.
func (l *Link) Stats() LinkStats { return l.stats }

// QueueLen is the number of packets waiting.
func (l *Link) QueueLen() int { return len(l.q) - l.qh }

// Arrive offers p to the queue at p.Enq (which must not be before the last
// Advance). It reports whether the packet was accepted. Call Advance(p.Enq)
// first so that the queue reflects the arrival time.
func (l *Link) Arrive(p *Packet) bool {
	l.stats.Arrived++
	if l.cfg.Loss > 0 && l.rng.Float64() < l.cfg.Loss {
		l.stats.LossDrops++
		l.logDrop(p, "loss")
		return false
	}
	if (l.cfg.QueuePackets > 0 && l.QueueLen() >= l.cfg.QueuePackets) ||
		(l.cfg.QueueBytes > 0 && l.qBytes+p.size() > l.cfg.QueueBytes) {
		l.stats.TailDrops++
		l.logDrop(p, "tail")
		return false
	}
	if l.QueueLen() == 0 {
		// Opportunities that passed while the queue was empty are lost.
		if k := l.cfg.Trace.firstAtOrAfter(p.Enq); k > l.cursor {
			l.stats.Opportunities += k - l.cursor
			l.cursor = k
		}
	}
	p.rem = p.size()
	l.q = append(l.q, p)
	l.qBytes += p.rem
	return true
}

// NextService is the time of the next opportunity that will serve a queued
// packet, or false when the queue is empty.
func (l *Link) NextService() (uint64, bool) {
	if l.QueueLen() == 0 {
		return 0, false
	}
	return max(l.cfg.Trace.at(l.cursor), l.q[l.qh].Enq), true
}

// Advance serves every opportunity up to and including now and calls out
// for each packet that leaves the queue, with the time it leaves the link
// (dequeue time plus delay). The out callback owns the packet afterwards.
func (l *Link) Advance(now uint64, out func(p *Packet, deliverAt uint64)) {
	l.now = max(l.now, now)
	tr := l.cfg.Trace
	for l.QueueLen() > 0 {
		t := tr.at(l.cursor)
		if t > now {
			break
		}
		head := l.q[l.qh]
		if head.Enq > t {
			k := tr.firstAtOrAfter(head.Enq)
			l.stats.Opportunities += k - l.cursor
			l.cursor = k
			continue
		}
		credit := MTU
		for l.QueueLen() > 0 && credit > 0 {
			head = l.q[l.qh]
			if head.Enq > t {
				break
			}
			take := min(credit, head.rem)
			head.rem -= take
			credit -= take
			if head.rem > 0 {
				break
			}
			l.q[l.qh] = nil
			l.qh++
			sz := head.size()
			l.qBytes -= sz
			head.Deq = t
			l.stats.Delivered++
			l.stats.DeliveredBytes += uint64(sz)
			if l.log != nil {
				l.logLine(head.Enq, int64(head.Deq), sz, "")
			}
			out(head, t+l.delayUs)
		}
		l.cursor++
		l.stats.Opportunities++
	}
	if l.qh > 1024 && l.qh*2 > len(l.q) {
		n := copy(l.q, l.q[l.qh:])
		clear(l.q[n:])
		l.q = l.q[:n]
		l.qh = 0
	}
}

func (l *Link) logDrop(p *Packet, why string) {
	if l.log != nil {
		l.logLine(p.Enq, -1, p.size(), why)
	}
}

// logLine writes "enq deq bytes[ why]" without allocating.
func (l *Link) logLine(enq uint64, deq int64, size int, why string) {
	b := strconv.AppendUint(l.line[:0], enq, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, deq, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(size), 10)
	if why != "" {
		b = append(b, ' ')
		b = append(b, why...)
	}
	b = append(b, '\n')
	l.log.Write(b)
	l.line = b
}

// Flush writes buffered log lines.
func (l *Link) Flush() error {
	if l.log == nil {
		return nil
	}
	return l.log.Flush()
}
