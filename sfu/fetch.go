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
// packet, the origin is asked once.
type fetcher struct {
	send func(seqs []uint16)

	mu        sync.Mutex
	waiting   map[uint16]*fetchState
	queue     []uint16
	scheduled bool
	pending   atomic.Int32 // len(waiting), for the packet path

	requested, recovered atomic.Uint64
}

type fetchState struct {
	asked time.Time
	downs []*downtrack.DownTrack
}

func newFetcher(send func(seqs []uint16)) *fetcher {
	return &fetcher{send: send, waiting: map[uint16]*fetchState{}}
}

// miss is a down track's Source.OnMiss: d wants source packet seq.
func (f *fetcher) miss(seq uint16, d *downtrack.DownTrack) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.waiting[seq]
	if st == nil || now.Sub(st.asked) > fetchTTL {
		st = &fetchState{}
		f.waiting[seq] = st
	}
	if !slices.Contains(st.downs, d) {
		st.downs = append(st.downs, d)
	}
	f.pending.Store(int32(len(f.waiting)))
	if !st.asked.IsZero() && now.Sub(st.asked) < fetchAgain {
		return // already on its way
	}
	st.asked = now
	f.queue = append(f.queue, seq)
	if !f.scheduled {
		f.scheduled = true
		time.AfterFunc(fetchBatch, f.flush)
	}
}

func (f *fetcher) flush() {
	now := time.Now()
	f.mu.Lock()
	seqs := f.queue
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
