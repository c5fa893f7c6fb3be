package persist

import (
	"context"
	"time"

	"github.com/xrealm/xrealm/bus"
)

// Delete markers.
//
// A delete (of an object, its descendants, a scene) leaves a delete marker
// as the key's newest message, and the bucket keeps one message per key
// (History 1): without a purge, every object ever deleted keeps its marker
// for ever, across restarts. Every scan reads the markers of the keys it
// covers (readKeys compares the newest of them with the stream leader's):
// each cascade delete scans its scene, so in a scene whose objects come and
// go (objects with a ttl, fresh ids for each) every delete cost more than
// the one before (on one node, a create and its delete took 1.2 ms in a new
// scene, 14 ms once 3000 objects had expired there), and the applier, which
// serves every scene in turn, fell further behind; the scene listings read
// the whole bucket's.
//
// Each node's marker purger therefore removes, every markerEvery, the
// markers older than markerAge. It purges each key only up to the marker's
// own revision, so a value written to the key after the marker (the object
// created again meanwhile) stays; jetstream's KeyValue.PurgeDeletes
// removes every message of the key, such a value included. Purges are
// idempotent: nodes doing the same at once only repeat each other.
// Afterwards the key reads as never written: the applier's next write to it
// is a compare-and-set against revision 0 (one that loaded the marker just
// before loses once, reads again and writes).

const (
	// markerAge is how old a delete marker is before it is purged.
	markerAge = 10 * time.Minute
	// markerEvery is how often a node looks for markers to purge.
	markerEvery = 10 * time.Minute
	// markerPassWait bounds one pass (reading the markers, purging them).
	markerPassWait = 5 * time.Minute
)

// runMarkerPurger purges old delete markers every s.markerEvery until ctx
// is done.
func (s *Store) runMarkerPurger(ctx context.Context) error {
	t := time.NewTicker(s.markerEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, markerPassWait)
		n, err := s.purgeMarkers(pctx, s.markerAge)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("persist: purging delete markers failed; will try again", "purged", n, "err", err)
			continue
		}
		if n > 0 {
			s.log.Debug("persist: delete markers purged", "purged", n)
		}
	}
}

// purgeMarkers purges the bucket's delete markers older than olderThan and
// returns how many it purged.
func (s *Store) purgeMarkers(ctx context.Context, olderThan time.Duration) (int, error) {
	return bus.PurgeOldDeleteMarkers(ctx, s.js, s.kv, olderThan)
}
