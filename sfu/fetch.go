package sfu

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xrealm/xrealm/sfu/downtrack"
)

// Timing of NACK forwarding across a relay link.
const (
	fetchBatch = 5 * time.Millisecond   // NACKs gathered into one ctl message
	fetchAgain = 100 * time.Millisecond // a NACK repeated after this asks the origin again
	fetchTTL   = time.Second            // a request not answered by then is forgotten
)

// fetcher forwards NACKs that a relaying node cannot answer to the origin
// node. A packet lost on the relay link is missing from the relayed
// source's buffer; the down tracks that NACK it register here, one batched
// "nack" control message asks the origin (which answers from its own
// buffer over the media channel), and when the packet arrives it is resent
// to the down tracks that asked. However many subscribers NACK the same
// packet, the origin is asked once, and again only if the packet is
// NACKed fetchAgain or more after the request went without an answer.
type fetcher struct {
	send func(seqs []uint16)
	// now and afterFunc are the fetcher's clock and batch timer; nil is
	// time.Now and time.AfterFunc (tests run a clock of their own)
	now       func() time.Time
	afterFunc func(d time.Duration, f func())

	mu        sync.Mutex
	waiting   map[uint16]*fetchState
	queue     []uint16
	scheduled bool
	pending   atomic.Int32 // len(waiting), for the packet path

	requested, recovered atomic.Uint64
}

type fetchState struct {
	asked  time.Time // when it was queued, then when the origin was asked
	queued bool      // in f.queue, not sent yet
	downs  []*downtrack.DownTrack
}

func newFetcher(send func(seqs []uint16)) *fetcher {
	return &fetcher{send: send, waiting: map[uint16]*fetchState{}}
}

// miss is a down track's Source.OnMiss: d wants source packet seq.
func (f *fetcher) miss(seq uint16, d *downtrack.DownTrack) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ask(seq, d)
}

// want asks the origin for packets no down track has asked for yet (the
// cadence watcher's guess that they were lost); when they arrive they are
// forwarded like any other packet.
func (f *fetcher) want(seqs []uint16) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, seq := range seqs {
		f.ask(seq, nil)
	}
}

// clock returns the current time.
func (f *fetcher) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// ask registers d (nil: none) as waiting for seq and queues a request
// unless one is queued already or was sent less than fetchAgain ago;
// f.mu must be held.
func (f *fetcher) ask(seq uint16, d *downtrack.DownTrack) {
	now := f.clock()
	st := f.waiting[seq]
	if st == nil || now.Sub(st.asked) > fetchTTL {
		st = &fetchState{}
		f.waiting[seq] = st
	}
	if d != nil && !slices.Contains(st.downs, d) {
		st.downs = append(st.downs, d)
	}
	f.pending.Store(int32(len(f.waiting)))
	if st.queued || !st.asked.IsZero() && now.Sub(st.asked) < fetchAgain {
		return // already on its way
	}
	st.asked, st.queued = now, true
	f.queue = append(f.queue, seq)
	if !f.scheduled {
		f.scheduled = true
		if f.afterFunc != nil {
			f.afterFunc(fetchBatch, f.flush)
		} else {
			time.AfterFunc(fetchBatch, f.flush)
		}
	}
}

// cadence watches a relayed stream's frame rhythm. A frame lost whole on
// the relay link (at the bench's 2 fps a description is often a single
// packet), or the last packets of one, shows as a gap only when the next
// frame arrives, a frame period later; the down tracks' NACKs then
// recover it about 600 ms after capture (run F: p99 594 ms at a site
// whose SFU's relay uplink dropped 14 % of its packets). The watcher
// expects the next frame one smoothed frame interval after the last
// (plus a margin) and, when none has come, asks the origin for the
// sequence numbers that frame would carry (as many as the last frame
// had). A frame that was only late, or never sent (the origin stopped
// relaying), costs one request the origin answers with what it has.
type cadence struct {
	fetch func(seqs []uint16)
	// afterFunc runs f after d; nil is time.AfterFunc (tests set a clock
	// of their own)
	afterFunc func(d time.Duration, f func()) interface{ Stop() bool }

	mu       sync.Mutex
	started  bool
	lastSeq  uint16
	lastTS   uint32
	frameAt  time.Time     // arrival of the newest frame's first packet
	interval time.Duration // smoothed arrival spacing of frames
	pkts     int           // packets of the previous frame
	cur      int           // packets of the newest frame so far
	timer    interface{ Stop() bool }
}

// Cadence limits.
const (
	cadenceMargin    = 20 * time.Millisecond // at least; an eighth of the interval if larger
	cadenceMaxGap    = 2 * time.Second       // spacing beyond this is a pause, not a rhythm
	cadenceMaxPerAsk = 8
)

// observe notes one packet of the stream (arrived at now).
func (c *cadence) observe(seq uint16, ts uint32, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		c.started, c.lastSeq, c.lastTS, c.frameAt, c.cur = true, seq, ts, now, 1
		return
	}
	if int16(seq-c.lastSeq) > 0 {
		c.lastSeq = seq
	}
	switch d := int32(ts - c.lastTS); {
	case d == 0:
		c.cur++
	case d > 0: // a new frame
		if gap := now.Sub(c.frameAt); gap > 0 && gap < cadenceMaxGap {
			if c.interval == 0 {
				c.interval = gap
			} else {
				c.interval += (gap - c.interval) / 8
			}
		}
		c.pkts, c.cur, c.lastTS, c.frameAt = c.cur, 1, ts, now
		if c.interval > 0 {
			wait := c.interval + max(cadenceMargin, c.interval/8)
			at := c.frameAt
			if c.timer != nil {
				c.timer.Stop()
			}
			after := c.afterFunc
			if after == nil {
				after = func(d time.Duration, f func()) interface{ Stop() bool } { return time.AfterFunc(d, f) }
			}
			c.timer = after(wait, func() { c.expired(at) })
		}
	}
}

// expired runs when no frame followed the one that arrived at at.
func (c *cadence) expired(at time.Time) {
	c.mu.Lock()
	if !c.frameAt.Equal(at) {
		c.mu.Unlock()
		return // a frame came meanwhile
	}
	n := min(max(c.pkts, 1), cadenceMaxPerAsk)
	seqs := make([]uint16, n)
	for i := range seqs {
		seqs[i] = c.lastSeq + 1 + uint16(i)
	}
	c.mu.Unlock()
	c.fetch(seqs)
}

// stop ends the watcher's timer.
func (c *cadence) stop() {
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
}

// flush sends the queued requests: each packet still waiting and not
// sent yet, once, however many times and however long ago it was
// queued (the batch timer may run late on a loaded machine). A packet
// counts as asked from the time it is sent.
func (f *fetcher) flush() {
	now := f.clock()
	f.mu.Lock()
	var seqs []uint16
	for _, seq := range f.queue {
		if st := f.waiting[seq]; st != nil && st.queued {
			st.asked, st.queued = now, false
			seqs = append(seqs, seq)
		}
	}
	f.queue, f.scheduled = nil, false
	for seq, st := range f.waiting {
		if now.Sub(st.asked) > fetchTTL {
			delete(f.waiting, seq)
		}
	}
	f.pending.Store(int32(len(f.waiting)))
	f.mu.Unlock()
	if len(seqs) > 0 {
		f.requested.Add(uint64(len(seqs)))
		f.send(seqs)
	}
}

// arrived returns, and forgets, the down tracks waiting for seq.
func (f *fetcher) arrived(seq uint16) []*downtrack.DownTrack {
	if f.pending.Load() == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.waiting[seq]
	if st == nil {
		return nil
	}
	delete(f.waiting, seq)
	f.pending.Store(int32(len(f.waiting)))
	f.recovered.Add(1)
	return st.downs
}
