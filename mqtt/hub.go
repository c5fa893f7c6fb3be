package mqtt

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/xrealm/xrealm/fanout"
	"github.com/xrealm/xrealm/interest"
	"github.com/xrealm/xrealm/topic"
)

// Hub fans bus messages out to local connections. It holds one NATS
// subscription per distinct scene prefix (topic.ScenePrefix) that some local
// connection's filter needs, shared by all of them and released with the
// last one.
type Hub struct {
	nc  *nats.Conn
	log *slog.Logger

	mu     sync.Mutex
	scenes map[string]*sceneSub        // by NATS subject
	all    atomic.Pointer[[]*sceneSub] // snapshot for local publishes
	seq    atomic.Uint64               // message sequence for de-duplication
	onMsgs func(delivered int)         // metrics hook

	interestFor func(ns, scene string) (interest.Policy, time.Duration)
	epoch       time.Time // for now
}

// sceneSub is one NATS subscription and the local filters it serves.
type sceneSub struct {
	subject string
	filter  string // MQTT form of subject, for matching local publishes
	sub     *nats.Subscription
	groups  atomic.Pointer[[]*group] // copy-on-write snapshot
	byKey   map[string]*group        // guarded by Hub.mu

	// policy, when not nil, filters user (pose) messages per receiver. It
	// is set once, when the subscription is created for a single scene.
	policy interest.Policy
	stop   chan struct{}

	// ready is closed once the bus has the subscription (a flush after
	// it): a SUBACK waits for it, so that what others publish after it
	// reaches the subscriber.
	ready chan struct{}
}

// group is the local subscribers with one identical filter.
type group struct {
	filter  string
	members map[*conn]byte // guarded by Hub.mu; qos granted
	snap    []member       // immutable snapshot used by dispatch
}

type member struct {
	c   *conn
	qos byte
}

// NewHub creates a hub on nc, which must have echo off so that messages this
// node publishes are not delivered to it twice.
func NewHub(nc *nats.Conn, log *slog.Logger, onMsgs func(int)) *Hub {
	h := &Hub{nc: nc, log: log, scenes: map[string]*sceneSub{}, onMsgs: onMsgs, epoch: time.Now()}
	h.all.Store(&[]*sceneSub{})
	return h
}

// add subscribes c to filter at qos.
func (h *Hub) add(c *conn, filter string, qos byte) error {
	subj := topic.ScenePrefix(filter)
	h.mu.Lock()
	s := h.scenes[subj]
	var mq string
	var pol interest.Policy
	var period time.Duration
	if s == nil {
		// The scene's first subscriber here. Getting its interest policy
		// reads its settings, which may take a while (up to the store's
		// timeout): not under the lock, which every subscribe and
		// disconnect on the node takes.
		h.mu.Unlock()
		var err error
		if mq, err = topic.FromSubject(subj); err != nil {
			return err
		}
		pol, period = h.policyFor(mq)
		h.mu.Lock()
		s = h.scenes[subj] // another subscriber's meanwhile: pol is not used
	}
	created := s == nil
	if created {
		s = &sceneSub{subject: subj, filter: mq, byKey: map[string]*group{}, ready: make(chan struct{})}
		s.groups.Store(&[]*group{})
		// The policy is set before the subscription delivers: dispatch
		// reads it, on the subscription's goroutine, without the lock.
		h.startInterest(s, pol, period)
		sub, err := h.nc.Subscribe(subj, func(m *nats.Msg) { h.fromBus(s, m) })
		if err != nil {
			if s.stop != nil {
				close(s.stop)
			}
			h.mu.Unlock()
			return err
		}
		sub.SetPendingLimits(-1, 256<<20)
		s.sub = sub
		h.scenes[subj] = s
		h.snapshotScenesLocked()
	}
	g := s.byKey[filter]
	if g == nil {
		g = &group{filter: filter, members: map[*conn]byte{}}
		s.byKey[filter] = g
	}
	g.members[c] = qos
	g.rebuild()
	s.snapshotGroups()
	h.mu.Unlock()
	if created {
		// The subscription is sent to the bus asynchronously; a round
		// trip makes sure the bus has it. Not under the lock.
		if err := h.nc.FlushTimeout(5 * time.Second); err != nil {
			h.log.Warn("scene subscription not confirmed by the bus", "subject", subj, "err", err)
		}
		close(s.ready)
	}
	<-s.ready
	return nil
}

// remove unsubscribes c from filter.
func (h *Hub) remove(c *conn, filter string) {
	subj := topic.ScenePrefix(filter)
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.scenes[subj]
	if s == nil {
		return
	}
	g := s.byKey[filter]
	if g == nil {
		return
	}
	delete(g.members, c)
	if len(g.members) == 0 {
		delete(s.byKey, filter)
	} else {
		g.rebuild()
	}
	s.snapshotGroups()
	if len(s.byKey) == 0 {
		if s.stop != nil {
			close(s.stop)
		}
		s.sub.Unsubscribe()
		delete(h.scenes, subj)
		h.snapshotScenesLocked()
	}
}

func (g *group) rebuild() {
	snap := make([]member, 0, len(g.members))
	for c, q := range g.members {
		snap = append(snap, member{c, q})
	}
	g.snap = snap
}

func (s *sceneSub) snapshotGroups() {
	gs := make([]*group, 0, len(s.byKey))
	for _, g := range s.byKey {
		// Copy so that dispatch never sees a snapshot being replaced.
		cp := &group{filter: g.filter, snap: g.snap}
		gs = append(gs, cp)
	}
	s.groups.Store(&gs)
}

func (h *Hub) snapshotScenesLocked() {
	all := make([]*sceneSub, 0, len(h.scenes))
	for _, s := range h.scenes {
		all = append(all, s)
	}
	h.all.Store(&all)
}

// fromBus delivers a message that arrived over NATS.
func (h *Hub) fromBus(s *sceneSub, m *nats.Msg) {
	name, err := topic.FromSubject(m.Subject)
	if err != nil || strings.HasPrefix(name, "$") || topic.ValidName(name) != nil {
		return // a NATS client's subject that no MQTT publish could have (a wildcard)
	}
	h.dispatch(s, newOutMsg(name, m.Data))
}

// publishLocal delivers a message published by a local connection to the
// local subscribers.
func (h *Hub) publishLocal(m *outMsg) {
	for _, s := range *h.all.Load() {
		if topic.Match(s.filter, m.topic) {
			h.dispatch(s, m)
		}
	}
}

// interactionWindow is how long after its last click or edit a client
// counts as interacting: urgent messages reach such clients first.
const interactionWindow = 2 * time.Second

// watchWait bounds how long an urgent message may wait for a busy client
// that is not interacting (an idle one gets it at once).
const watchWait = 2 * time.Millisecond

func (h *Hub) dispatch(s *sceneSub, m *outMsg) {
	p := pass{s: s, m: m, seq: h.seq.Add(1), urgent: m.key == ""}
	if s.policy != nil {
		p.sender = s.observe(m)
	}
	groups := *s.groups.Load()
	if p.urgent {
		// An urgent message (a click, an object edit) written to every
		// receiver at once costs one system call each: in a crowded scene
		// the last receiver gets it a millisecond after the first, and the
		// answer to a click waits behind the click's own fan-out. So the
		// clients that are interacting themselves (the one whose click an
		// edit answers, the program that answers clicks) get it first and at
		// once; the others, who are only watching, within watchWait, in the
		// write that carries their lingering poses.
		p.run(groups, max(h.now()-int64(interactionWindow), 1))
	}
	p.run(groups, 0)
	if p.n > 0 && h.onMsgs != nil {
		h.onMsgs(p.n)
	}
}

// pass delivers one message to the members of a scene subscription.
type pass struct {
	s      *sceneSub
	m      *outMsg
	seq    uint64 // the message's sequence number, for de-duplication
	sender string // for the interest policy; "" if none applies
	n      int    // deliveries so far
	urgent bool   // not a pose
	// to, if set, replaces conn.deliver (tests see the order of delivery).
	to func(member) bool
}

// run delivers to each member of groups whose filter matches, once per
// connection and message: a connection whose filters overlap, or that an
// earlier run took, is skipped. With since > 0, only to connections that
// acted (clicked, edited) after since, at once; without, an urgent message
// goes to the rest as watchers (conn.deliver).
func (p *pass) run(groups []*group, since int64) {
	for _, g := range groups {
		if !topic.Match(g.filter, p.m.topic) {
			continue
		}
		for _, mb := range g.snap {
			if since > 0 && mb.c.actedAt.Load() < since {
				continue
			}
			if mb.c.lastSeq.Swap(p.seq) == p.seq {
				continue
			}
			if p.sender != "" && !p.s.policy.Interested(mb.c.observer(), p.sender) {
				continue
			}
			if p.to != nil && p.to(mb) || p.to == nil && mb.c.deliver(p.m, mb.qos, p.urgent && since == 0) {
				p.n++
			}
		}
	}
}

// now is the time in ns since the hub's epoch (never 0 once running).
func (h *Hub) now() int64 { return int64(time.Since(h.epoch)) + 1 }

// Scenes returns the number of scene subscriptions held.
func (h *Hub) Scenes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.scenes)
}

// outMsg is a message on its way to local connections. Its QoS 0 frames
// are made once and shared by every connection that receives it: one for
// the clients it is meant for, and, for an urgent message, one that lets
// clients only watching wait up to watchWait.
type outMsg struct {
	topic   string
	payload []byte
	key     string // coalesceKey(topic): "" for urgent messages
	frame   []byte // the QoS 0 PUBLISH of topic and payload, if made already
	once    sync.Once
	qos0    fanout.Frame
	watch   fanout.Frame
}

func newOutMsg(name string, payload []byte) *outMsg {
	return &outMsg{topic: name, payload: payload, key: coalesceKey(name)}
}

// frameQoS0 returns the message's QoS 0 frame for a client, or for a
// client only watching.
func (m *outMsg) frameQoS0(watcher bool) *fanout.Frame {
	m.once.Do(func() {
		b := m.frame
		if b == nil {
			b = encodePublish(m.topic, m.payload, 0, 0)
		}
		// Poses (keyed) are the bulk traffic and may wait for the linger
		// interval; everything else (object edits, clicks, chat) is urgent,
		// and for a client only watching it waits at most watchWait.
		m.qos0 = fanout.Frame{Bytes: b, Key: m.key, Urgent: m.key == ""}
		m.watch = fanout.Frame{Bytes: b, Key: m.key}
		if m.key == "" {
			m.watch.Within = watchWait
		}
	})
	if watcher {
		return &m.watch
	}
	return &m.qos0
}

// coalesceKey returns the key under which a newer message replaces an older
// one in a full queue: user (pose) messages of the same object. Other
// messages are never replaced.
func coalesceKey(name string) string {
	// {realm}/s/{ns}/{scene}/u/...
	levels := 0
	for i := 0; i < len(name); i++ {
		if name[i] == '/' {
			levels++
			if levels == 4 {
				if strings.HasPrefix(name[i+1:], "u/") {
					return name
				}
				return ""
			}
		}
	}
	return ""
}

// policyFor returns the interest policy (nil: none) and its recompute
// period of the scene whose subscription filter is filter; only a
// single-scene filter ({realm}/s/{ns}/{scene}/#) has one. It reads the
// scene's settings.
func (h *Hub) policyFor(filter string) (interest.Policy, time.Duration) {
	if h.interestFor == nil {
		return nil, 0
	}
	lv := strings.Split(filter, "/") // {realm}/s/{ns}/{scene}/#
	if len(lv) != 5 || lv[1] != "s" || lv[4] != "#" || lv[2] == "+" || lv[3] == "+" || lv[2] == "#" {
		return nil, 0
	}
	pol, period := h.interestFor(lv[2], lv[3])
	if period <= 0 {
		period = 200 * time.Millisecond
	}
	return pol, period
}

// startInterest puts pol (nil: none) in charge of s, its positions updated
// every period until s.stop is closed.
func (h *Hub) startInterest(s *sceneSub, pol interest.Policy, period time.Duration) {
	if pol == nil {
		return
	}
	s.policy, s.stop = pol, make(chan struct{})
	h.log.Info("interest management on", "scene", s.filter, "period", period)
	go func(stop <-chan struct{}) {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				pol.Tick(now)
			}
		}
	}(s.stop)
}

// observe returns the sender of a user (pose) message and records its
// position; "" for other messages, which are not filtered.
func (s *sceneSub) observe(m *outMsg) string {
	t, err := topic.ParseScene(m.topic)
	if err != nil || t.MsgType != topic.MsgUser || t.ToUID != "" {
		return ""
	}
	var msg struct {
		Data struct {
			Position *interest.Vec3 `json:"position"`
		} `json:"data"`
	}
	if json.Unmarshal(m.payload, &msg) == nil && msg.Data.Position != nil {
		s.policy.Set(t.UserClient, *msg.Data.Position, time.Now())
	}
	return t.UserClient
}

// leave removes a departed client from every interest policy of this node.
func (h *Hub) leave(userClient string) {
	if userClient == "" {
		return
	}
	for _, s := range *h.all.Load() {
		if s.policy != nil {
			s.policy.Remove(userClient)
		}
	}
}
