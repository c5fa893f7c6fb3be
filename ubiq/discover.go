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
// listing that it scans again at most every discoverEvery, one scan at a
// time for all its connections; the record writes of this node update it
// at once (roomListing.record), so a node's own rooms are listed as they
// are, and other nodes' within discoverEvery.
const discoverEvery = time.Second

// roomListing is a node's listing of the published rooms.
type roomListing struct {
	mu    sync.Mutex
	at    time.Time           // when the listing was last scanned; zero: never
	rooms map[string]RoomInfo // published rooms with a join code, by uuid; nil: never scanned
	// busy is closed when the scan under way ends; nil: none is.
	busy chan struct{}
	// patched holds the records written here during the scan under way,
	// applied over its result (nil: deleted).
	patched map[string]*roomRecord
	scans   int // scans begun, for tests
}

// record updates the listing with a room record that this node wrote
// (nil: the room was removed).
func (l *roomListing) record(uuid string, r *roomRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy != nil {
		if l.patched == nil {
			l.patched = map[string]*roomRecord{}
		}
		l.patched[uuid] = r
	}
	if l.rooms != nil {
		l.apply(uuid, r)
	}
}

func (l *roomListing) apply(uuid string, r *roomRecord) {
	if r != nil && r.Publish && r.JoinCode != "" {
		l.rooms[uuid] = r.info()
	} else {
		delete(l.rooms, uuid)
	}
}

// published returns the published rooms with members, scanning the store
// if the listing is older than discoverEvery.
func (s *Server) published(ctx context.Context) ([]RoomInfo, error) {
	l := &s.listing
	l.mu.Lock()
	for {
		if l.rooms != nil && time.Since(l.at) < discoverEvery {
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
	// Timed from its end: a scan slower than discoverEvery is not begun
	// again at once.
	l.rooms, l.at = rooms, time.Now()
	for uuid, r := range patched {
		l.apply(uuid, r)
	}
	return l.list(), nil
}

// list returns the listing, sorted by uuid.
func (l *roomListing) list() []RoomInfo {
	out := make([]RoomInfo, 0, len(l.rooms))
	for _, r := range l.rooms {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b RoomInfo) int { return strings.Compare(a.UUID, b.UUID) })
	return out
}

// published reads the records of every room and returns the published
// ones with a join code (a room without one has no members: Ubiq's server
// would have deleted it, so it is not listed). One watch delivers the
// records, without a read per room.
func (s *store) published(ctx context.Context) (map[string]RoomInfo, error) {
	w, err := s.kv.Watch(ctx, "r.*.i", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	out := map[string]RoomInfo{}
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
			if json.Unmarshal(e.Value(), &r) == nil && r.Publish && r.JoinCode != "" {
				out[uuid] = r.info()
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
