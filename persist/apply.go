package persist

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/xrealm/xrealm/scene"
	"github.com/xrealm/xrealm/topic"
)

func topicSubject(t string) string { return topic.ToSubject(t) }

// runApplier consumes the stream in order and applies each message. The
// consumer allows one unacknowledged message, so a message is acked only
// once its effect is in the bucket, and nothing after it is delivered
// before.
func (s *Store) runApplier(ctx context.Context) error {
	consumer := s.consumer
	if s.applierRuns > 0 {
		// The consumer may be what failed: deleted (an operator's
		// mistake, a stream restored from a backup), it would never
		// deliver again. Made again, it delivers what the stream still
		// holds (a work queue keeps only what was not acknowledged).
		c, err := s.openConsumer(ctx)
		if err != nil {
			return err
		}
		consumer = c
	}
	s.applierRuns++
	it, err := consumer.Messages(jetstream.PullPriorityGroup(PriorityGroup), jetstream.PullExpiry(pullExpiry))
	if err != nil {
		return fmt.Errorf("consuming %s/%s: %w", StreamName, ConsumerName, err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return err
			}
			// Status notices (pin changes, leadership changes) are not
			// fatal: the iterator keeps pulling.
			s.log.Debug("persist: consumer notice", "err", err)
			continue
		}
		if err := s.applyRetrying(ctx, msg); err != nil {
			return err // ctx done; the message will be delivered again
		}
		if err := msg.Ack(); err != nil {
			s.log.Warn("persist: ack failed; the message will be applied again", "subject", msg.Subject(), "err", err)
		}
	}
}

// applyRetrying applies msg until it succeeds or ctx is done, telling the
// server the message is still in progress while it retries.
func (s *Store) applyRetrying(ctx context.Context, msg jetstream.Msg) error {
	// Keep the message ours while a long apply runs.
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(ackWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	delay := 50 * time.Millisecond
	for {
		err := s.apply(ctx, msg.Subject(), msg.Headers(), msg.Data())
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("persist: applying message failed, retrying", "subject", msg.Subject(), "err", err, "delay", delay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// apply applies one message from the stream. It returns an error only for
// failures worth retrying (the store did not answer); invalid and ignored
// messages return nil.
func (s *Store) apply(ctx context.Context, subject string, h nats.Header, payload []byte) error {
	switch subject {
	case deleteSceneSubject:
		return s.applyDeleteScene(ctx, h, payload)
	case expireSubject:
		return s.applyExpire(ctx, payload)
	}
	mt, err := topic.FromSubject(subject)
	if err == nil {
		err = topic.ValidName(mt) // a wildcard subject from a NATS client
	}
	if err != nil {
		s.reject(subject, err)
		return nil
	}
	t, err := topic.ParseScene(mt)
	if err != nil {
		s.reject(subject, err)
		return nil
	}
	if t.MsgType != topic.MsgObjects || t.ToUID != "" {
		return nil // not captured by the stream's subject; nothing to do
	}
	// The HTTP routes and tokens name scenes with topic.ValidSceneName:
	// an object stored under another name could never be read or deleted
	// there.
	if err := topic.ValidSceneName("namespace", t.Namespace); err != nil {
		s.reject(subject, err)
		return nil
	}
	if err := topic.ValidSceneName("scene", t.Scene); err != nil {
		s.reject(subject, err)
		return nil
	}
	m, err := scene.Parse(t, payload)
	if err != nil {
		s.reject(subject, err)
		return nil
	}
	key := objectKey(t.Namespace, t.Scene, m.ObjectID)
	if err := checkKeyLen(key, m.ObjectID); err != nil {
		s.reject(subject, err)
		return nil
	}
	if !changesState(m.Action, m.Persist) {
		return nil // clientEvent, join, leave, transient create/update
	}
	// Messages are UTF-8 JSON. encoding/json would store each bad byte as
	// U+FFFD, three bytes: the object would be stored altered, or, near the
	// payload limit, refused as over the store's limit although the message
	// was within it. Refused at any size, with this reason.
	if err := CheckUTF8(payload); err != nil {
		s.reject(subject, err)
		return nil
	}
	var changed bool
	switch m.Action {
	case scene.ActionCreate:
		changed, err = s.upsert(ctx, key, t, m)
	case scene.ActionUpdate:
		changed, err = s.update(ctx, key, t, m)
	case scene.ActionDelete:
		if v := h.Get(expiredRevisionHeader); v != "" {
			changed, err = s.expiredDelete(ctx, subject, key, t, m, v)
		} else {
			changed, err = s.cascadeDelete(ctx, t.Namespace, t.Scene, m.ObjectID)
		}
	}
	var tooLarge *tooLargeError
	if errors.As(err, &tooLarge) || errors.Is(err, nats.ErrMaxPayload) {
		s.reject(subject, err) // the same write would fail again
		return nil
	}
	if err != nil {
		return err
	}
	if changed {
		s.applied.Inc()
	}
	return nil
}

// checkKeyLen refuses an object whose key, key, the store cannot hold.
func checkKeyLen(key, objectID string) error {
	if len(key) > maxKeyLen {
		return fmt.Errorf("object id of %d bytes is too long to persist (its key would be %d bytes, at most %d)", len(objectID), len(key), maxKeyLen)
	}
	return nil
}

// CheckObjectKey returns the error the applier would refuse an object
// message on the scene topic name with because the store cannot hold its
// object's key (an object id too long; the id is the topic's, which a
// message's object_id must equal), so that a front end refuses it before
// acknowledging it. It returns nil for every other topic.
func CheckObjectKey(name string) error {
	t, err := topic.ParseScene(name)
	if err != nil {
		return nil
	}
	return checkKeyLen(objectKey(t.Namespace, t.Scene, t.ID), t.ID)
}

// CheckUTF8 returns an error naming the first bad byte unless payload is
// valid UTF-8, which a persisted change must be (the applier refuses it
// otherwise, and a front end can refuse it before acknowledging it).
func CheckUTF8(payload []byte) error {
	if utf8.Valid(payload) {
		return nil
	}
	return fmt.Errorf("payload is not valid UTF-8 (first bad byte at offset %d)", badUTF8(payload))
}

// badUTF8 returns the offset of the first byte of b that is not part of
// valid UTF-8, or -1.
func badUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

func (s *Store) reject(subject string, err error) {
	s.invalid.Inc()
	s.rejects.Deny(s.log, "persist: invalid message not persisted", "subject", subject, "reason", err.Error())
}

func (s *Store) expireAt(m scene.Message, now time.Time) *time.Time {
	if m.TTL <= 0 {
		return nil
	}
	t := now.Add(time.Duration(m.TTL * float64(time.Second))).UTC()
	return &t
}

// upsert stores the object of a persisted create, replacing what was there
// but keeping its creation time.
func (s *Store) upsert(ctx context.Context, key string, t topic.SceneTopic, m scene.Message) (bool, error) {
	for conflicts := 0; ; conflicts++ {
		if err := s.afterConflict(ctx, key, conflicts); err != nil {
			return false, err
		}
		old, rev, err := s.load(ctx, key)
		if err != nil {
			return false, err
		}
		now := s.now().UTC()
		o := &Object{
			ObjectID:   m.ObjectID,
			Type:       m.Type,
			Attributes: copyData(m.Data),
			Persist:    true,
			Realm:      t.Realm,
			UserClient: t.UserClient,
			CreatedAt:  now,
			UpdatedAt:  now,
			ExpireAt:   s.expireAt(m, now),
		}
		if old != nil {
			o.CreatedAt = old.CreatedAt
		}
		err = s.save(ctx, key, o, rev)
		if err == errConflict {
			continue
		}
		return err == nil, err
	}
}

// update merges (or, with overwrite, replaces) a stored object. An update
// for an object that is not stored is ignored, as ARENA's persistence
// service does.
func (s *Store) update(ctx context.Context, key string, t topic.SceneTopic, m scene.Message) (bool, error) {
	for conflicts := 0; ; conflicts++ {
		if err := s.afterConflict(ctx, key, conflicts); err != nil {
			return false, err
		}
		o, rev, err := s.load(ctx, key)
		if err != nil {
			return false, err
		}
		now := s.now().UTC()
		if o == nil || o.expired(now) {
			s.log.Debug("persist: update of an object that is not persisted ignored", "topic", t.String())
			return false, nil
		}
		if m.Overwrite {
			o.Attributes = copyData(m.Data)
			if m.Type != "" {
				o.Type = m.Type
			}
		} else {
			scene.Merge(o.Attributes, m.Data)
		}
		if e := s.expireAt(m, now); e != nil {
			o.ExpireAt = e
		}
		o.UpdatedAt = now
		err = s.save(ctx, key, o, rev)
		if err == errConflict {
			continue
		}
		return err == nil, err
	}
}

// Pauses before the next try of a compare-and-set that lost.
const (
	conflictPause    = 5 * time.Millisecond
	maxConflictPause = 500 * time.Millisecond
)

// conflictDelay is the pause after the given number (at least 1) of lost
// compare-and-sets of one write.
func conflictDelay(conflicts int) time.Duration {
	return min(conflictPause<<min(conflicts-1, 16), maxConflictPause)
}

// afterConflict waits before the try of a write to key that follows the
// given number of lost compare-and-sets: not at all before the first try,
// then conflictPause, doubling up to maxConflictPause. Reading the stream
// leader, the applier loses only to another writer between its read and
// its write (the previously pinned applier finishing a message while the
// server hands the consumer over; a new stream leader not yet current):
// it tries again after a pause that lets the other write land, not in a
// tight loop against it. It returns ctx's error when ctx is done first.
func (s *Store) afterConflict(ctx context.Context, key string, conflicts int) error {
	if conflicts == 0 {
		return nil
	}
	d := conflictDelay(conflicts)
	s.log.Debug("persist: write lost a revision conflict; reading again", "key", key, "conflicts", conflicts, "pause", d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// copyData returns a deep copy of data without null members, never nil.
func copyData(data map[string]any) map[string]any {
	out := map[string]any{}
	scene.Merge(out, data)
	return out
}
