package ubiq

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DiscoverRooms without a join code lists every published room with
// members. Reading them is a scan of every room's record in the store, and
// a peer may send a DiscoverRooms with every frame of its budget, from as
// many connections as it likes. So a node keeps the published rooms in a
// listing that it scans again at most every roomListing.every
// (discoverEvery), one scan at a time for all its connections; the record
// writes of this node update it at once (roomListing.record), so a node's
// own rooms are listed as they are, and other nodes' within discoverEvery.
const discoverEvery = time.Second

// roomListing is a node's listing of the published rooms.
type roomListing struct {
	mu    sync.Mutex
	every time.Duration // how old a listing may be; Server sets discoverEvery
	at    time.Time     // when the listing was last scanned; zero: never
	// rooms holds the room records seen, by uuid, with their revisions
	// (the removed ones this node saw go too, so that an older write
	// reported late does not bring them back); nil: never scanned, or
	// dropped once stale (record).
	rooms map[string]listed
	// busy is closed when the scan under way ends; nil: none is.
	busy chan struct{}
	// patched holds the records written here during the scan under way,
	// applied over its result if newer.
	patched map[string]listed
	scans   int // scans begun, for tests
}

// listed is a room record in the listing.
type listed struct {
	rev  uint64
	info RoomInfo
	show bool // published, with a join code
}

func listedOf(r *roomRecord, rev uint64) listed {
	if r == nil {
		// Removed: the deletion's revision is above the record's.
		return listed{rev: rev + 1}
	}
	if !r.Publish || r.JoinCode == "" {
		return listed{rev: rev} // not shown: its revision is enough
	}
	return listed{rev: rev, info: r.info(), show: true}
}

// record updates the listing with a room record that this node wrote at
// revision rev (nil: the room was removed, its record at rev), unless it
// holds a newer one: writes of concurrent requests may report out of
// order.
func (l *roomListing) record(uuid string, r *roomRecord, rev uint64) {
	e := listedOf(r, rev)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy != nil {
		if l.patched == nil {
			l.patched = map[string]listed{}
		}
		if old, ok := l.patched[uuid]; !ok || e.rev > old.rev {
			l.patched[uuid] = e
		}
	}
	switch {
	case l.rooms == nil:
	case time.Since(l.at) >= l.every:
		// Stale: the next DiscoverRooms scans afresh and replaces it
		// whole, so it is dropped instead of taking every room this node
		// writes (removed ones too) for as long as nobody asks.
		l.rooms = nil
	default:
		l.apply(uuid, e)
	}
}

func (l *roomListing) apply(uuid string, e listed) {
	if old, ok := l.rooms[uuid]; !ok || e.rev > old.rev {
		l.rooms[uuid] = e
	}
}

// published returns the published rooms with members, scanning the store
// if the listing is older than l.every.
func (s *Server) published(ctx context.Context) ([]RoomInfo, error) {
	l := &s.listing
	l.mu.Lock()
	for {
		if l.rooms != nil && time.Since(l.at) < l.every {
			out := l.list()
			l.mu.Unlock()
			return out, nil
		}
		if l.busy == nil {
			break
		}
		busy := l.busy
		l.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		l.mu.Lock()
	}
	busy := make(chan struct{})
	l.busy, l.patched = busy, nil
	l.scans++
	l.mu.Unlock()
	rooms, err := s.store.published(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	patched := l.patched
	l.busy, l.patched = nil, nil
	close(busy)
	if err != nil {
		return nil, err
	}
	// Timed from its end: a scan slower than l.every is not begun again
	// at once.
	l.rooms, l.at = rooms, time.Now()
	for uuid, e := range patched {
		l.apply(uuid, e)
	}
	return l.list(), nil
}

// list returns the listing, sorted by uuid.
func (l *roomListing) list() []RoomInfo {
	var out []RoomInfo
	for _, e := range l.rooms {
		if e.show {
			out = append(out, e.info)
		}
	}
	if out == nil {
		out = []RoomInfo{}
	}
	slices.SortFunc(out, func(a, b RoomInfo) int { return strings.Compare(a.UUID, b.UUID) })
	return out
}

// published reads the records of every room and returns them with their
// revisions, the published ones with a join code shown (a room without one
// has no members: Ubiq's server would have deleted it, so it is not
// listed). One watch delivers the records, without a read per room.
func (s *store) published(ctx context.Context) (map[string]listed, error) {
	w, err := s.kv.Watch(ctx, "r.*.i", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	out := map[string]listed{}
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, errors.New("list the published rooms: the watch of room records ended")
			}
			if e == nil {
				return out, nil // the records there were when it began
			}
			uuid := strings.TrimSuffix(strings.TrimPrefix(e.Key(), "r."), ".i")
			var r roomRecord
			if json.Unmarshal(e.Value(), &r) == nil {
				out[uuid] = listedOf(&r, e.Revision())
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
