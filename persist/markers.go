package persist

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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

// marker is one delete or purge marker of the bucket.
type marker struct {
	key string
	rev uint64
}

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
	old, err := s.oldMarkers(ctx, olderThan)
	if err != nil {
		return 0, err
	}
	for i, m := range old {
		if err := s.purgeMarker(ctx, m); err != nil {
			return i, err
		}
	}
	return len(old), nil
}

// oldMarkers returns the keys whose newest message is a delete marker
// older than olderThan, with the marker's revision.
func (s *Store) oldMarkers(ctx context.Context, olderThan time.Duration) ([]marker, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("watching %s for delete markers: %w", BucketName, err)
	}
	defer w.Stop()
	limit := time.Now().Add(-olderThan)
	var out []marker
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading the delete markers of %s (%d so far): %w", BucketName, len(out), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("the watcher of %s closed after %d delete markers", BucketName, len(out))
			}
			if e == nil {
				return out, nil // the initial values
			}
			if op := e.Operation(); (op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge) && !e.Created().After(limit) {
				out = append(out, marker{key: e.Key(), rev: e.Revision()})
			}
		}
	}
}

// purgeMarker removes the messages of m's key up to and including the
// marker; a newer message of the key stays.
func (s *Store) purgeMarker(ctx context.Context, m marker) error {
	err := s.kvStream.Purge(ctx, jetstream.WithPurgeSubject(kvSubjectPrefix+m.key), jetstream.WithPurgeSequence(m.rev+1))
	if err != nil {
		return fmt.Errorf("purging the delete marker of %q (revision %d): %w", m.key, m.rev, err)
	}
	return nil
}
