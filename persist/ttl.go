package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xrealm/xrealm/scene"
	"github.com/xrealm/xrealm/topic"
)

// Expiry goes through the stream, so that it is ordered with the creates
// (a create of the same id may wait in the stream while the old version's
// time comes):
//
//  1. Every node's sweeper follows the bucket and, when an object's time
//     has come, publishes {"key":..,"revision":R} on expireSubject, R being
//     the revision it read. The message id names key and revision, so the
//     stream keeps one of the nodes' requests. The applier grants it if the
//     object expires within expirySkew by its own clock: the first request
//     may come from a node whose clock is a little ahead, and a refused
//     one would not be asked again within the stream's duplicate window (2
//     minutes).
//  2. The applier, at that message, checks that the key is still at R and
//     expired, and publishes {"object_id":..,"action":"delete"} on the
//     object's topic through the stream, with the header
//     expiredRevisionHeader: R. Clients receive it there, in the order of
//     the other object messages.
//  3. The applier, at that delete, removes the object and its descendants
//     if the key is still at R. If a create replaced the object in between
//     (published before the delete, so clients got the create and then the
//     delete), the create stays, and the applier publishes the stored
//     object as a create again, outside the stream, so that clients show
//     it again as the store has it.

// sweepEvery is how often the sweeper looks for expired objects.
const sweepEvery = 250 * time.Millisecond

// replicaCheckEvery is how often the sweeper reads the bucket's number of
// replicas (Store.single): another node's Open may raise it.
const replicaCheckEvery = 10 * time.Second

// askAgainAfter is how long a sweeper waits for an expiry it asked for to
// happen before it asks again (the applier may be down or far behind). It
// is less than the stream's duplicate window (2 minutes), so the stream
// drops the node's repeated request while its first one waits.
const askAgainAfter = 30 * time.Second

// expirySkew is how far the clocks of a cluster's nodes may differ for an
// expiry: the applier grants a request for an object that expires within
// it by its own clock.
const expirySkew = 5 * time.Second

// expiredRevisionHeader, on a delete, makes it conditional: the applier
// removes the object only if its key is still at this revision.
const expiredRevisionHeader = "Xrealm-Expired-Revision"

// expireRequest is the payload of an expireSubject message.
type expireRequest struct {
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
}

// runSweeper follows the bucket with a watcher, keeping the expiry time of
// every key, and asks for the expiry of objects whose time has come. Every
// node runs it.
func (s *Store) runSweeper(ctx context.Context) error {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watching %s: %w", BucketName, err)
	}
	defer w.Stop()
	s.mu.Lock()
	clear(s.expires)
	clear(s.asked)
	s.mu.Unlock()

	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	replicas := time.NewTicker(replicaCheckEvery)
	defer replicas.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-replicas.C:
			s.checkReplicas(ctx)
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
	delete(s.asked, e.Key())
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
		asked, ok := s.asked[k]
		if !at.IsZero() && !at.After(now) && (!ok || now.Sub(asked) >= askAgainAfter) {
			due = append(due, k)
		}
	}
	s.mu.Unlock()
	for _, key := range due {
		if err := s.expire(ctx, key); err != nil && ctx.Err() == nil {
			s.log.Warn("persist: ttl expiry failed, will retry", "key", key, "err", err)
			continue
		}
		s.mu.Lock()
		if _, ok := s.expires[key]; ok {
			s.asked[key] = now
		}
		s.mu.Unlock()
	}
}

// expire asks, through the stream, for the expiry of the object under key
// if it is expired.
func (s *Store) expire(ctx context.Context, key string) error {
	o, rev, err := s.load(ctx, key)
	if err != nil {
		return err
	}
	if o == nil {
		return nil // gone already; the watcher will tell us
	}
	if !o.expired(s.now()) {
		return nil // renewed meanwhile
	}
	data, err := json.Marshal(expireRequest{Key: key, Revision: rev})
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: expireSubject, Data: data, Header: nats.Header{}}
	msg.Header.Set(nats.MsgIdHdr, "xrealm-expire:"+key+":"+strconv.FormatUint(rev, 10))
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("asking for the expiry of %q: %w", key, err)
	}
	return nil
}

// applyExpire applies a sweeper's request: if the object is still the
// version that expired, its delete is published on its topic, through the
// stream.
func (s *Store) applyExpire(ctx context.Context, payload []byte) error {
	var req expireRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		s.reject(expireSubject, fmt.Errorf("expiry request %s: %w", topic.Clip(string(payload)), err))
		return nil
	}
	if _, _, _, err := splitKey(req.Key); err != nil {
		s.reject(expireSubject, fmt.Errorf("expiry request: %w", err))
		return nil
	}
	o, rev, err := s.load(ctx, req.Key)
	if err != nil {
		return err
	}
	if o == nil || rev != req.Revision || !o.expired(s.now().Add(expirySkew)) {
		return nil // deleted, replaced or renewed since the sweeper looked
	}
	realm := realmOf(o)
	subj := objectSubject(realm, o.Namespace, o.Scene, userClient(o), o.ObjectID)
	payload, err = json.Marshal(map[string]string{"object_id": o.ObjectID, "action": "delete"})
	if err != nil {
		return err
	}
	if !s.realms[realm] {
		// Not a realm the stream captures (the configuration changed
		// since the object was stored): delete here, and tell clients.
		if _, err := s.cascadeDelete(ctx, o.Namespace, o.Scene, o.ObjectID); err != nil {
			return err
		}
		if err := s.js.Conn().Publish(subj, payload); err != nil {
			s.log.Warn("persist: publishing the delete of an expired object failed", "subject", subj, "err", err)
		}
		s.log.Info("persist: object expired", "subject", subj)
		return nil
	}
	msg := &nats.Msg{Subject: subj, Data: payload, Header: nats.Header{}}
	r := strconv.FormatUint(rev, 10)
	msg.Header.Set(expiredRevisionHeader, r)
	msg.Header.Set(nats.MsgIdHdr, "xrealm-expired:"+req.Key+":"+r)
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publishing the delete of expired %s: %w", subj, err)
	}
	s.log.Info("persist: object expired", "subject", subj)
	return nil
}

// expiredDelete applies the delete of an expired object, whose header
// names the revision that expired: the object and its descendants are
// removed if its key is still at that revision. If a create replaced it
// since, the create stays, and the stored object is published again as a
// create for the clients, which received this delete after that create.
func (s *Store) expiredDelete(ctx context.Context, subject, key string, t topic.SceneTopic, m scene.Message, revision string) (bool, error) {
	want, err := strconv.ParseUint(revision, 10, 64)
	if err != nil {
		s.reject(subject, fmt.Errorf("header %s: %q is not a revision", expiredRevisionHeader, topic.Clip(revision)))
		return false, nil
	}
	o, rev, err := s.load(ctx, key)
	if err != nil {
		return false, err
	}
	switch {
	case o == nil:
		return false, nil // deleted since, with its descendants
	case rev == want:
		return s.cascadeDelete(ctx, t.Namespace, t.Scene, m.ObjectID)
	case o.expired(s.now()):
		return false, nil // its own expiry follows
	}
	s.log.Info("persist: object created again after it expired; kept", "subject", subject)
	return false, s.announce(o)
}

// announce publishes the stored object o as a persisted create on its
// topic, for clients only: the stream does not store it (SkipStream).
func (s *Store) announce(o *Object) error {
	payload, ok, err := createMessage(o, s.now())
	if err != nil {
		return fmt.Errorf("encoding %q: %w", o.ObjectID, err)
	}
	if !ok {
		return nil // expired meanwhile: its own expiry tells the clients
	}
	msg := &nats.Msg{Subject: objectSubject(realmOf(o), o.Namespace, o.Scene, userClient(o), o.ObjectID), Data: payload, Header: nats.Header{}}
	SkipStream(msg.Header)
	if err := s.js.Conn().PublishMsg(msg); err != nil {
		return fmt.Errorf("publishing %s again: %w", msg.Subject, err)
	}
	return nil
}

// userClient is the userClient level of the topic the store publishes an
// object's messages on: that of its create.
// createMessage encodes o as the persisted create that makes it again,
// with the time it has left at now as its ttl. ok is false when it has no
// time left: a ttl of 0 would make it permanent.
func createMessage(o *Object, now time.Time) (payload []byte, ok bool, err error) {
	m := map[string]any{
		"object_id": o.ObjectID,
		"action":    "create",
		"type":      o.Type,
		"persist":   true,
		"data":      o.Attributes,
	}
	if o.ExpireAt != nil {
		left := o.ExpireAt.Sub(now).Seconds()
		if left <= 0 {
			return nil, false, nil
		}
		m["ttl"] = left
	}
	payload, err = encode(m)
	return payload, err == nil, err
}

// realmOf returns the realm o was stored in ("realm" for objects stored
// before objects kept theirs).
func realmOf(o *Object) string {
	if o.Realm == "" {
		return "realm"
	}
	return o.Realm
}

func userClient(o *Object) string {
	if o.UserClient == "" {
		return "persist"
	}
	return o.UserClient
}
