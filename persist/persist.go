// Package persist keeps the persisted state of ARENA scenes on JetStream,
// with the semantics of ARENA's persistence service.
//
// Every non-private object message (NATS subjects {realm}.s.*.*.o.*.*, that
// is MQTT topics {realm}/s/{ns}/{scene}/o/{userClient}/{id}, for each
// configured realm) is captured by the stream XREALM_OBJECTS, the durable log. An applier reads that stream in
// order through one durable consumer and applies each message to the KV
// bucket XREALM_PERSIST, one key per object. In a cluster every node runs
// the applier, but the consumer uses a priority group with the pinned-client
// policy, so the server delivers to one of them at a time; with at most one
// message unacknowledged, messages are applied strictly in stream order, and
// after a crash the unacknowledged message is delivered again before any
// later one.
//
// Semantics (as ARENA's persistence service):
//   - create with persist:true stores the object, replacing any previous one;
//   - update with persist:true deep-merges data into a stored object (a null
//     removes a key, see scene.Merge), or replaces the object when
//     overwrite:true; an update for an object that is not stored is ignored;
//   - delete removes the object and, recursively, the stored objects whose
//     data.parent names it (found through the applier's scene index,
//     index.go, at the cost of the object's subtree, not the scene's size);
//   - a persisted object with ttl expires: see ttl.go; the delete goes
//     through the stream, ordered with the creates, and does not remove an
//     object created again since it expired;
//   - DeleteScene (DELETE /persist/{ns}/{scene}) goes through the stream
//     too: it removes what was created before it, not what comes after;
//   - invalid messages (see scene.Parse), and objects of a namespace or
//     scene whose name topic.ValidSceneName refuses (the HTTP routes could
//     never read them), are counted, logged (at most 20 lines per 10 s,
//     auth.DenyLog) and ignored.
package persist

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/topic"
)

// Names of the JetStream assets the store uses.
const (
	StreamName    = "XREALM_OBJECTS"
	ConsumerName  = "xrealm-persist"
	PriorityGroup = "applier"
	BucketName    = "XREALM_PERSIST"
)

const (
	// streamMaxAge bounds how long an unapplied message waits in the
	// stream, should no applier run at all.
	streamMaxAge = 7 * 24 * time.Hour
	// ackWait is how long the server waits for an ack before delivering
	// a message again; a long apply extends it with InProgress. After a
	// crash, the message in flight is applied again after at most this.
	ackWait = 5 * time.Second
	// pullExpiry is the lifetime of one pull request; an idle applier
	// renews its request this often, which keeps it pinned.
	pullExpiry = 4 * time.Second
	// pinnedTTL is how long a pinned applier may stay silent before the
	// server pins another node's applier; more than pullExpiry.
	pinnedTTL = 6 * time.Second
	// maxKeyLen keeps KV subjects well inside NATS's control-line limit.
	maxKeyLen = 1024
)

// Control subjects: messages of the store itself, which the stream captures
// so that the applier applies them in order with the object messages. MQTT
// clients cannot publish on '$' topics (the front end drops them), and
// NATS clients only with a right on every topic ('#').
const (
	// deleteSceneSubject carries {"namespace":..,"scene":..}: remove
	// every stored object of the scene. The header replyHeader, if set to
	// an _INBOX subject, asks for {"deleted":N} there once applied.
	deleteSceneSubject = "$XREALM.persist.deletescene"
	// expireSubject carries {"key":..,"revision":..} from a sweeper: the
	// object under key expired at that revision (ttl.go).
	expireSubject = "$XREALM.persist.expire"
	replyHeader   = "Xrealm-Reply"
)

// deleteWait is how long DeleteScene waits for the applier to apply the
// delete before it answers that the delete is in the log but pending.
const deleteWait = 10 * time.Second

// StreamSubject returns the subjects of the non-private object messages of
// one realm, the subjects the stream captures.
//
// realm must pass ValidRealm.
func StreamSubject(realm string) string { return realm + ".s.*.*.o.*.*" }

// ErrNotFound is returned by Get for an object that is not stored.
var ErrNotFound = errors.New("not found")

// ErrPending is wrapped by the error of DeleteScene when the delete is in
// the stream but the applier did not apply it within the wait: it will be
// applied, in order, when the applier gets to it.
var ErrPending = errors.New("in the log, not applied yet")

// ErrSceneEmpty is returned by Clone when the source scene has no objects.
var ErrSceneEmpty = errors.New("scene has no persisted objects")

// ErrBadName is wrapped by the errors of List, DeleteScene and Clone for a
// namespace or scene name that topic.ValidSceneName refuses: the applier
// stores no objects there, and the store does not ask the bus about it
// (a name longer than a NATS protocol line allows would make the server
// close the store's connection).
var ErrBadName = errors.New("not a namespace or scene name the store holds")

// nameError is a refused name: its text is the reason, and it wraps
// ErrBadName.
type nameError struct{ err error }

func (e nameError) Error() string   { return "persist: " + e.err.Error() }
func (e nameError) Unwrap() []error { return []error{e.err, ErrBadName} }

// checkScene returns a nameError when ns/scene cannot hold stored objects.
func checkScene(ns, scene string) error {
	if err := topic.ValidSceneName("namespace", ns); err != nil {
		return nameError{err}
	}
	if err := topic.ValidSceneName("scene", scene); err != nil {
		return nameError{err}
	}
	return nil
}

// Config configures a Store.
type Config struct {
	JS jetstream.JetStream // from an in-process connection
	// NC is the connection JS was made from. It is optional: the store
	// publishes through JS and its connection.
	NC       *nats.Conn
	Replicas int // server.DefaultReplicas unless set; 0 means 1
	// Realms lists the realms whose object messages are persisted; nil
	// means ARENA's default, {"realm"}. JetStream refuses to capture
	// "*.s.*.*.o.*.*" because it overlaps its own API ($JS.>), so the
	// stream names each realm.
	Realms []string
	Logger *slog.Logger
	// Registerer, if not nil, receives the gauge xrealm_persisted_objects
	// and the counters xrealm_persist_applied_total and
	// xrealm_persist_invalid_total.
	Registerer prometheus.Registerer
}

// Object is one stored ARENA object, as the REST routes return it.
type Object struct {
	ObjectID   string         `json:"object_id"`
	Type       string         `json:"type"`
	Attributes map[string]any `json:"attributes"` // the message's data
	Persist    bool           `json:"persist"`
	Realm      string         `json:"realm,omitempty"`
	UserClient string         `json:"userClient,omitempty"` // of the create
	CreatedAt  time.Time      `json:"createdAt"`
	UpdatedAt  time.Time      `json:"updatedAt"`
	ExpireAt   *time.Time     `json:"expireAt,omitempty"`

	// Namespace and Scene come from the object's key.
	Namespace string `json:"-"`
	Scene     string `json:"-"`
}

func (o *Object) expired(now time.Time) bool {
	return o.ExpireAt != nil && !o.ExpireAt.After(now)
}

// parent returns data.parent when it is a string.
func (o *Object) parent() string {
	p, _ := o.Attributes["parent"].(string)
	return p
}

// Store is the persisted state of all scenes.
type Store struct {
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	kvStream jetstream.Stream   // the bucket's
	stream   jetstream.Stream   // the log, StreamName
	consumer jetstream.Consumer // the applier's, ConsumerName
	// applierRuns counts the applier's starts (its goroutine only): a
	// restart opens the consumer again.
	applierRuns int
	log         *slog.Logger
	now         func() time.Time
	realms      map[string]bool // the realms whose object messages the stream captures

	deleteWait  time.Duration // see deleteWait
	readWait    time.Duration // see readWait
	markerAge   time.Duration // see markerAge (markers.go)
	markerEvery time.Duration // see markerEvery

	applied prometheus.Counter
	invalid prometheus.Counter
	rejects auth.DenyLog // logs the invalid messages, a bounded number of lines

	// single is true while the bucket has one replica (checkReplicas):
	// reads of one key can then be direct gets (newest).
	single atomic.Bool

	// idxMu guards indexes, the applier's scene indexes (index.go), by
	// sceneKey.
	idxMu   sync.Mutex
	indexes map[string]*sceneIndex

	mu      sync.Mutex
	expires map[string]time.Time // key -> expireAt (zero: none), from the KV watcher
	asked   map[string]time.Time // key -> when this sweeper asked to expire it (ttl.go)
}

// Open creates or updates the stream, its consumer and the KV bucket, and
// returns a Store ready to serve reads. Call Run to apply messages.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.JS == nil {
		return nil, errors.New("persist: Config.JS is nil")
	}
	replicas := cfg.Replicas
	if replicas <= 0 {
		replicas = 1
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Store{js: cfg.JS, log: log.With("component", "persist"), now: time.Now, realms: map[string]bool{},
		deleteWait: deleteWait, readWait: readWait, markerAge: markerAge, markerEvery: markerEvery,
		expires: map[string]time.Time{}, asked: map[string]time.Time{}, indexes: map[string]*sceneIndex{}}

	realms := cfg.Realms
	if len(realms) == 0 {
		realms = []string{"realm"}
	}
	var subjects []string
	for _, r := range realms {
		if err := ValidRealm(r); err != nil {
			return nil, fmt.Errorf("persist: %w", err)
		}
		subjects = append(subjects, StreamSubject(r))
		s.realms[r] = true
	}
	subjects = append(subjects, deleteSceneSubject, expireSubject)
	stream, err := cfg.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "xrealm: ARENA object messages, the log of persisted scene state",
		Subjects:    subjects,
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		MaxAge:      streamMaxAge,
		Discard:     jetstream.DiscardOld,
	})
	if err != nil {
		return nil, fmt.Errorf("persist: stream %s: %w", StreamName, err)
	}
	s.stream = stream
	if s.consumer, err = s.openConsumer(ctx); err != nil {
		return nil, err
	}
	s.kv, err = cfg.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      BucketName,
		Description: "xrealm: persisted ARENA objects, key {ns}.{scene}.{object id}",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("persist: KV bucket %s: %w", BucketName, err)
	}
	// The bucket's stream, for direct gets that return delete markers.
	if s.kvStream, err = cfg.JS.Stream(ctx, kvStream); err != nil {
		return nil, fmt.Errorf("persist: the stream of KV bucket %s: %w", BucketName, err)
	}
	s.checkReplicas(ctx)

	s.applied = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "xrealm_persist_applied_total",
		Help: "Object messages that changed the persisted state.",
	})
	s.invalid = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "xrealm_persist_invalid_total",
		Help: "Object messages not persisted because they are invalid.",
	})
	if r := cfg.Registerer; r != nil {
		gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "xrealm_persisted_objects",
			Help: "Persisted objects, as seen by this node's KV watcher.",
		}, func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(len(s.expires))
		})
		for _, c := range []prometheus.Collector{gauge, s.applied, s.invalid} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("persist: registering metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Run applies the stream to the bucket, sweeps expired objects and purges
// old delete markers (markers.go) until ctx is done. Transient failures are
// logged and retried; Run returns nil when ctx is done.
func (s *Store) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.retry(ctx, "applier", s.runApplier) }()
	go func() { defer wg.Done(); s.retry(ctx, "ttl sweeper", s.runSweeper) }()
	go func() { defer wg.Done(); s.retry(ctx, "marker purger", s.runMarkerPurger) }()
	wg.Wait()
	// Let another node's applier take over at once rather than after
	// the pinned TTL.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if st, err := s.js.Stream(uctx, StreamName); err == nil {
		_ = st.UnpinConsumer(uctx, ConsumerName, PriorityGroup)
	}
	return nil
}

// retry runs f until ctx is done, restarting it with a growing delay when
// it fails.
func (s *Store) retry(ctx context.Context, name string, f func(context.Context) error) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := f(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			delay = 100 * time.Millisecond
		}
		s.log.Warn("persist: restarting after failure", "task", name, "err", err, "delay", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// openConsumer creates the applier's durable consumer, or updates it to
// this configuration; it is the same consumer for every node.
func (s *Store) openConsumer(ctx context.Context) (jetstream.Consumer, error) {
	c, err := s.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:        ConsumerName,
		Description:    "xrealm: applies object messages to " + BucketName,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait,
		MaxDeliver:     -1,
		MaxAckPending:  1, // strict order, also across redeliveries
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{PriorityGroup},
		PinnedTTL:      pinnedTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("persist: consumer %s on %s: %w", ConsumerName, StreamName, err)
	}
	return c, nil
}

// Get returns one live stored object, or an error wrapping ErrNotFound.
// It is current, as the listings are: it asks the bucket's stream leader,
// and fails with an error wrapping ErrUnavailable when there is none.
// An object whose key the applier would refuse (a bad scene name, an id
// too long) is not found without asking the bus.
func (s *Store) Get(ctx context.Context, ns, scene, objectID string) (Object, error) {
	if err := checkScene(ns, scene); err != nil {
		return Object{}, fmt.Errorf("object %s: %w (%w)", topic.Clip(objectID), ErrNotFound, err)
	}
	key := objectKey(ns, scene, objectID)
	if len(key) > maxKeyLen {
		return Object{}, fmt.Errorf("object id %s of %d bytes in scene %s/%s: %w (no stored object has an id this long)", topic.Clip(objectID), len(objectID), ns, scene, ErrNotFound)
	}
	o, _, err := s.load(ctx, key)
	if err != nil {
		return Object{}, err
	}
	if o == nil || o.expired(s.now()) {
		return Object{}, fmt.Errorf("object %s in scene %s/%s: %w", topic.Clip(objectID), ns, scene, ErrNotFound)
	}
	return *o, nil
}

// List returns the live objects of one scene, of type typ or of any type
// when typ is "". Objects without a parent come first, then by parent, then
// by object id, so that parents tend to precede their children.
func (s *Store) List(ctx context.Context, ns, scene, typ string) ([]Object, error) {
	all, _, err := s.scan(ctx, ns, scene)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]Object, 0, len(all))
	for _, e := range all {
		if e.obj.expired(now) || typ != "" && e.obj.Type != typ {
			continue
		}
		out = append(out, *e.obj)
	}
	sort.Slice(out, func(i, j int) bool {
		pi, pj := out[i].parent(), out[j].parent()
		if (pi == "") != (pj == "") {
			return pi == ""
		}
		if pi != pj {
			return pi < pj
		}
		return out[i].ObjectID < out[j].ObjectID
	})
	return out, nil
}

// Scenes returns "ns/scene" for every scene with live stored objects,
// sorted. A scene whose objects have all expired, but are not swept yet,
// is left out, as List answers nothing for it. It reads objects until it
// finds a live one in each scene: usually one read per scene.
func (s *Store) Scenes(ctx context.Context) ([]string, error) {
	entries, err := s.readKeys(ctx, ">", true)
	if err != nil {
		return nil, fmt.Errorf("persist: listing keys of %s: %w", BucketName, err)
	}
	keys := map[string][]string{} // scene -> its keys
	for key, e := range entries {
		if !e.live {
			continue
		}
		ns, scene, _, err := splitKey(key)
		if err != nil {
			s.log.Warn("persist: skipping foreign key", "key", key, "err", err)
			continue
		}
		keys[ns+"/"+scene] = append(keys[ns+"/"+scene], key)
	}
	out := make([]string, 0, len(keys))
	now := s.now()
	for sc, ks := range keys {
		for _, key := range ks {
			m, err := s.newest(ctx, key)
			if err != nil {
				return nil, fmt.Errorf("persist: reading %q: %w", key, err)
			}
			if m == nil || m.deleted {
				continue // deleted since the listing
			}
			o, err := s.decode(key, m.data)
			if err != nil {
				s.log.Warn("persist: skipping undecodable object", "key", key, "err", err)
				continue
			}
			if !o.expired(now) {
				out = append(out, sc)
				break
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// DeleteScene removes every stored object of one scene, and returns how
// many. The delete goes through the stream: it removes the objects of every
// create the stream acknowledged before it, including those the applier
// has not applied yet, and none of those after it. DeleteScene returns once
// the applier applied it; if that takes longer than deleteWait, it returns
// an error wrapping ErrPending, and the delete stays in the log, to be
// applied in its turn. No delete messages are published to clients.
func (s *Store) DeleteScene(ctx context.Context, ns, scene string) (int, error) {
	if err := checkScene(ns, scene); err != nil {
		return 0, err
	}
	nc := s.js.Conn()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 0, fmt.Errorf("persist: deleting scene %s/%s: %w", ns, scene, err)
	}
	defer sub.Unsubscribe()
	data, err := json.Marshal(sceneRef{Namespace: ns, Scene: scene})
	if err != nil {
		return 0, err
	}
	msg := &nats.Msg{Subject: deleteSceneSubject, Data: data, Header: nats.Header{}}
	msg.Header.Set(replyHeader, inbox)
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return 0, fmt.Errorf("persist: deleting scene %s/%s: %w", ns, scene, err)
	}
	wctx, cancel := context.WithTimeout(ctx, s.deleteWait)
	defer cancel()
	reply, err := sub.NextMsgWithContext(wctx)
	if err != nil {
		return 0, fmt.Errorf("persist: delete of scene %s/%s: %w (%v)", ns, scene, ErrPending, err)
	}
	var r struct {
		Deleted int `json:"deleted"`
	}
	if err := json.Unmarshal(reply.Data, &r); err != nil {
		return 0, fmt.Errorf("persist: delete of scene %s/%s: applied, but its reply %s: %w", ns, scene, topic.Clip(string(reply.Data)), err)
	}
	return r.Deleted, nil
}

// sceneRef is the payload of a scene delete.
type sceneRef struct {
	Namespace string `json:"namespace"`
	Scene     string `json:"scene"`
}

// applyDeleteScene applies a scene delete from the stream and answers the
// requester, if it asked.
func (s *Store) applyDeleteScene(ctx context.Context, h nats.Header, payload []byte) error {
	var ref sceneRef
	if err := json.Unmarshal(payload, &ref); err != nil {
		s.reject(deleteSceneSubject, fmt.Errorf("scene delete %s: %w", topic.Clip(string(payload)), err))
		return nil
	}
	if err := checkScene(ref.Namespace, ref.Scene); err != nil {
		s.reject(deleteSceneSubject, err)
		return nil
	}
	n, err := s.deleteSceneKeys(ctx, ref.Namespace, ref.Scene)
	if err != nil {
		return err
	}
	if n > 0 {
		s.applied.Inc()
	}
	s.log.Info("persist: scene deleted", "namespace", ref.Namespace, "scene", ref.Scene, "objects", n)
	if r := h.Get(replyHeader); strings.HasPrefix(r, nats.InboxPrefix) {
		b, _ := json.Marshal(map[string]int{"deleted": n})
		if err := s.js.Conn().Publish(r, b); err != nil {
			s.log.Warn("persist: answering a scene delete failed", "namespace", ref.Namespace, "scene", ref.Scene, "err", err)
		}
	}
	return nil
}

// deleteSceneKeys removes every key of one scene from the bucket; only the
// applier calls it.
func (s *Store) deleteSceneKeys(ctx context.Context, ns, scene string) (int, error) {
	s.dropIndex(ns, scene) // the scene's next delete scans what is there then
	entries, err := s.readKeys(ctx, sceneKey(ns, scene)+".>", true)
	if err != nil {
		return 0, fmt.Errorf("persist: listing scene %s/%s: %w", ns, scene, err)
	}
	var keys []string
	for _, e := range entries {
		if e.live {
			keys = append(keys, e.key)
		}
	}
	n := 0
	for _, key := range keys {
		if err := s.kv.Delete(ctx, key); err != nil {
			return n, fmt.Errorf("persist: deleting %q of scene %s/%s: %w", key, ns, scene, err)
		}
		n++
	}
	return n, nil
}

// Clone copies the live objects of scene srcNS/srcScene into dstNS/dstScene
// by publishing a persisted create for each on the destination scene's
// topics, so that clients in that scene see them appear and the copies go
// through the same log as every other write. A copy of an object with a
// ttl gets the time the original has left, so both expire together (give
// or take the moment between the clone and the copy's store). It returns
// how many creates the stream acknowledged; the applier stores them
// shortly after. It fails with ErrSceneEmpty when the source has no
// objects.
func (s *Store) Clone(ctx context.Context, srcNS, srcScene, dstNS, dstScene string) (int, error) {
	if err := checkScene(dstNS, dstScene); err != nil {
		return 0, err
	}
	objs, err := s.List(ctx, srcNS, srcScene, "")
	if err != nil {
		return 0, err
	}
	if len(objs) == 0 {
		return 0, fmt.Errorf("persist: clone from %s/%s: %w", srcNS, srcScene, ErrSceneEmpty)
	}
	n := 0
	now := s.now()
	for _, o := range objs {
		payload, ok, err := createMessage(&o, now)
		if err != nil {
			return n, fmt.Errorf("persist: clone of %q: %w", o.ObjectID, err)
		}
		if !ok {
			continue // expired since List
		}
		subj := objectSubject(realmOf(&o), dstNS, dstScene, userClient(&o), o.ObjectID)
		if _, err := s.js.Publish(ctx, subj, payload); err != nil {
			return n, fmt.Errorf("persist: clone of %q to %s: %w", o.ObjectID, subj, err)
		}
		n++
	}
	return n, nil
}

// scanned is one stored object with its KV revision.
type scanned struct {
	key string
	rev uint64
	obj *Object
}

// scan returns every stored object of one scene, expired or not, current
// as of the call (see readKeys), and the revision of the newest message of
// the scene's keys it read, delete markers included: the scan reflects
// every message of the scene up to it.
func (s *Store) scan(ctx context.Context, ns, scene string) ([]scanned, uint64, error) {
	if err := checkScene(ns, scene); err != nil {
		return nil, 0, err
	}
	entries, err := s.readKeys(ctx, sceneKey(ns, scene)+".>", false)
	if err != nil {
		return nil, 0, fmt.Errorf("persist: reading scene %s/%s: %w", ns, scene, err)
	}
	out := make([]scanned, 0, len(entries))
	var newest uint64
	for _, e := range entries {
		newest = max(newest, e.rev)
		if !e.live {
			continue
		}
		o, err := s.decode(e.key, e.value)
		if err != nil {
			s.log.Warn("persist: skipping undecodable object", "key", e.key, "err", err)
			continue
		}
		out = append(out, scanned{key: e.key, rev: e.rev, obj: o})
	}
	return out, newest, nil
}

func (s *Store) decode(key string, val []byte) (*Object, error) {
	ns, scene, _, err := splitKey(key)
	if err != nil {
		return nil, err
	}
	var o Object
	if err := json.Unmarshal(val, &o); err != nil {
		return nil, fmt.Errorf("key %q: %w", key, err)
	}
	if o.Attributes == nil {
		o.Attributes = map[string]any{}
	}
	o.Namespace, o.Scene = ns, scene
	return &o, nil
}

// load returns the object stored under key, nil when there is none, and
// the key's revision: that of its newest write, a delete or purge
// included, 0 when the key was never written (or its delete marker was
// purged, markers.go). It reads what the bucket's
// stream leader holds (newest), which holds every write acknowledged
// before: the applier decides what to write from it, and a replica that
// has not yet applied the applier's last write would have it update an
// object "not stored", or make its compare-and-set fail until it caught
// up.
func (s *Store) load(ctx context.Context, key string) (*Object, uint64, error) {
	m, err := s.newest(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("persist: reading %q: %w", key, err)
	}
	if m == nil {
		return nil, 0, nil
	}
	if m.deleted {
		return nil, m.seq, nil
	}
	o, err := s.decode(key, m.data)
	if err != nil {
		return nil, 0, err
	}
	return o, m.seq, nil
}

// errConflict reports a compare-and-set that lost against another writer.
var errConflict = errors.New("revision conflict")

// tooLargeError reports an object too large to store: a create near the
// payload limit with the metadata added, or updates that grew an object
// past it. Retrying cannot help, so the message is rejected, not retried.
type tooLargeError struct {
	key        string
	size, most int
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("object %q would be %d bytes stored, over the store's limit of %d", e.key, e.size, e.most)
}

// kvOverhead is what a key-value write adds to the value in the message
// that carries it (headers, the subject), well rounded up.
const kvOverhead = 4 << 10

// maxObject is the largest encoded object the store writes: the bus
// connection's payload limit less the write's own overhead.
func (s *Store) maxObject() int {
	if nc := s.js.Conn(); nc != nil && nc.MaxPayload() > 2*kvOverhead {
		return int(nc.MaxPayload()) - kvOverhead
	}
	return 1<<20 - kvOverhead
}

// save writes o under key if the key is still at revision rev, as load
// returned it: a delete marker's revision when the key was deleted, 0 when
// it was never written.
func (s *Store) save(ctx context.Context, key string, o *Object, rev uint64) error {
	val, err := encode(o)
	if err != nil {
		return fmt.Errorf("persist: encoding %q: %w", key, err)
	}
	if most := s.maxObject(); len(val) > most {
		return &tooLargeError{key: key, size: len(val), most: most}
	}
	_, err = s.kv.Update(ctx, key, val, rev)
	if bus.IsRevisionConflict(err) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("persist: writing %q: %w", key, err)
	}
	return nil
}

// encode is json.Marshal without HTML escaping, which would write each
// '<', '>' and '&' of an attribute (an inline SVG, HTML text) as six
// bytes: a message well inside the payload limit would come out over the
// store's limit and be rejected after the stream had acknowledged it.
func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// objectSubject returns the NATS subject of an object topic.
func objectSubject(realm, ns, scene, userClient, id string) string {
	return topicSubject(realm + "/s/" + ns + "/" + scene + "/o/" + userClient + "/" + id)
}

// ValidRealm reports whether realm can be persisted: one literal topic
// level (topic.ValidLevel) that is also one literal NATS token as it is, so
// that StreamSubject(realm) captures its object messages. That leaves out
// '.', '*', '>', '%' and white space as well as '/', '+' and '#'.
func ValidRealm(realm string) error {
	if realm == "" {
		return errors.New(`realm is empty ("")`)
	}
	if err := topic.ValidLevel("realm", realm); err != nil {
		return err
	}
	if i := strings.IndexAny(realm, ".*> \t\r\n%"); i >= 0 {
		return fmt.Errorf("realm %q contains %q; it must be one topic level without '.', '*', '>', '%%' or white space", realm, realm[i])
	}
	return nil
}
