package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// IsRevisionConflict reports whether err is a conditional key-value write
// or delete (Create, Update, or Delete with LastRevision) that lost to
// another writer: the key exists already, or is no longer at the expected
// revision. The caller reads again and retries, or gives way.
func IsRevisionConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// DeleteMarker is a key of a key-value bucket whose newest message is a
// delete or purge marker, at Revision.
type DeleteMarker struct {
	Key      string
	Revision uint64
}

// OldDeleteMarkers returns the keys of kv whose newest message is a delete
// or purge marker made olderThan ago or earlier.
//
// A bucket that keeps one message per key keeps a deleted key's marker
// for ever, and every listing reads it: a bucket whose keys come and go
// (rooms, objects with a time to live) grows without bound unless its old
// markers are purged (PurgeOldDeleteMarkers).
func OldDeleteMarkers(ctx context.Context, kv jetstream.KeyValue, olderThan time.Duration) ([]DeleteMarker, error) {
	w, err := kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("watching %s for delete markers: %w", kv.Bucket(), err)
	}
	defer w.Stop()
	limit := time.Now().Add(-olderThan)
	var out []DeleteMarker
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading the delete markers of %s (%d so far): %w", kv.Bucket(), len(out), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("the watcher of %s closed after %d delete markers", kv.Bucket(), len(out))
			}
			if e == nil {
				return out, nil // the initial values
			}
			if op := e.Operation(); (op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge) && !e.Created().After(limit) {
				out = append(out, DeleteMarker{Key: e.Key(), Revision: e.Revision()})
			}
		}
	}
}

// PurgeDeleteMarker removes the messages of m's key up to and including
// the marker from stream, kv's stream; a newer message of the key (the key
// written again since m was read) stays. (jetstream's KeyValue.PurgeDeletes
// removes every message of the key, such a value included.) Afterwards
// the key reads as never written. Purges are idempotent: nodes that purge
// the same marker at once only repeat each other.
func PurgeDeleteMarker(ctx context.Context, stream jetstream.Stream, kv jetstream.KeyValue, m DeleteMarker) error {
	err := stream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+kv.Bucket()+"."+m.Key), jetstream.WithPurgeSequence(m.Revision+1))
	if err != nil {
		return fmt.Errorf("purging the delete marker of %q in %s (revision %d): %w", m.Key, kv.Bucket(), m.Revision, err)
	}
	return nil
}

// PurgeOldDeleteMarkers purges kv's delete markers made olderThan ago or
// earlier, each only up to its own revision (PurgeDeleteMarker), and
// returns how many it purged.
func PurgeOldDeleteMarkers(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, olderThan time.Duration) (int, error) {
	stream, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return 0, fmt.Errorf("the stream of bucket %s: %w", kv.Bucket(), err)
	}
	old, err := OldDeleteMarkers(ctx, kv, olderThan)
	if err != nil {
		return 0, err
	}
	for i, m := range old {
		if err := PurgeDeleteMarker(ctx, stream, kv, m); err != nil {
			return i, err
		}
	}
	return len(old), nil
}
