package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xrealm/xrealm/bus"
)

// sweepEvery is how often the sweeper looks for expired objects.
const sweepEvery = 250 * time.Millisecond

// runSweeper follows the bucket with a watcher, keeping the expiry time of
// every key, and deletes objects whose time has come. Every node runs it;
// the delete is a compare-and-delete on the revision read, so exactly one
// node wins, and only the winner publishes the delete message.
func (s *Store) runSweeper(ctx context.Context) error {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watching %s: %w", BucketName, err)
	}
	defer w.Stop()
	s.mu.Lock()
	clear(s.expires)
	s.mu.Unlock()

	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watcher of %s closed", BucketName)
			}
			s.track(e)
		case <-tick.C:
			s.sweep(ctx)
		}
	}
}

func (s *Store) track(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e == nil {
		return // end of the initial values
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.expires, e.Key())
		return
	}
	var o struct {
		ExpireAt *time.Time `json:"expireAt"`
	}
	_ = json.Unmarshal(e.Value(), &o)
	var at time.Time
	if o.ExpireAt != nil {
		at = *o.ExpireAt
	}
	s.expires[e.Key()] = at
}

func (s *Store) sweep(ctx context.Context) {
	now := s.now()
	var due []string
	s.mu.Lock()
	for k, at := range s.expires {
		if !at.IsZero() && !at.After(now) {
			due = append(due, k)
		}
	}
	s.mu.Unlock()
	for _, key := range due {
		if err := s.expire(ctx, key); err != nil && ctx.Err() == nil {
			s.log.Warn("persist: ttl expiry failed, will retry", "key", key, "err", err)
		}
	}
}

// expire deletes the object under key if it is still expired, and if this
// node's delete won, publishes the delete message on the object's topic.
func (s *Store) expire(ctx context.Context, key string) error {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil // gone already; the watcher will tell us
	}
	if err != nil {
		return err
	}
	o, err := s.decode(key, e.Value())
	if err != nil {
		return err
	}
	if !o.expired(s.now()) {
		return nil // renewed meanwhile
	}
	err = s.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
	if bus.IsRevisionConflict(err) {
		return nil // another node (or the applier) got there first
	}
	if err != nil {
		return err
	}
	uc := o.UserClient
	if uc == "" {
		uc = "persist"
	}
	subj := objectSubject(o.Realm, o.Namespace, o.Scene, uc, o.ObjectID)
	payload, _ := json.Marshal(map[string]string{"object_id": o.ObjectID, "action": "delete"})
	// The delete lands in the stream too, and the applier then removes the
	// object's descendants. Retry a little: the object is already gone.
	for attempt := 0; ; attempt++ {
		_, err = s.js.Publish(ctx, subj, payload)
		if err == nil || attempt == 4 || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("publishing ttl delete on %s: %w", subj, err)
	}
	s.log.Info("persist: object expired", "subject", subj)
	return nil
}
