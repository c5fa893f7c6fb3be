package sfu

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Manager is the session manager: it tracks the live nodes from their
// heartbeats and assigns each joining client a node, preferring the
// client's site and then the least loaded node. A client that joins again
// keeps its node while that node is alive.
type Manager struct {
	nc   *nats.Conn
	log  *slog.Logger
	subs []*nats.Subscription

	mu       sync.Mutex
	nodes    map[string]*nodeState
	assigned map[string]string // "session/client" → node
}

type nodeState struct {
	info    NodeInfo
	seen    time.Time
	pending int // assignments since its last heartbeat
}

// nodeTTL is how long a node counts as alive after a heartbeat.
const nodeTTL = 5 * time.Second

// StartManager starts a session manager on nc.
func StartManager(nc *nats.Conn, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{nc: nc, log: log, nodes: map[string]*nodeState{}, assigned: map[string]string{}}
	hb, err := nc.Subscribe(subjectNodes, m.handleHeartbeat)
	if err != nil {
		return nil, fmt.Errorf("sfu manager: subscribe %s: %w", subjectNodes, err)
	}
	join, err := nc.QueueSubscribe(subjectJoin, "sfu-manager", m.handleJoin)
	if err != nil {
		_ = hb.Unsubscribe()
		return nil, fmt.Errorf("sfu manager: subscribe %s: %w", subjectJoin, err)
	}
	m.subs = []*nats.Subscription{hb, join}
	return m, nil
}

// Close stops the manager.
func (m *Manager) Close() {
	for _, s := range m.subs {
		_ = s.Unsubscribe()
	}
}

func (m *Manager) handleHeartbeat(msg *nats.Msg) {
	var info NodeInfo
	if json.Unmarshal(msg.Data, &info) != nil || validName("node", info.ID) != nil {
		return
	}
	m.mu.Lock()
	m.nodes[info.ID] = &nodeState{info: info, seen: time.Now()}
	m.mu.Unlock()
}

func (m *Manager) handleJoin(msg *nats.Msg) {
	var req JoinRequest
	var a Assignment
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		a.Error = "bad join request: " + err.Error()
	} else if err := validName("session", req.Session); err != nil {
		a.Error = err.Error()
	} else if err := validName("client", req.Client); err != nil {
		a.Error = err.Error()
	} else {
		a = m.Assign(req, time.Now())
	}
	b, _ := json.Marshal(a)
	_ = msg.Respond(b)
}

// Assign picks the node for a client at now.
func (m *Manager) Assign(req JoinRequest, now time.Time) Assignment {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := req.Session + "/" + req.Client
	if id, ok := m.assigned[key]; ok {
		if ns := m.nodes[id]; ns != nil && now.Sub(ns.seen) < nodeTTL {
			return assignment(ns.info)
		}
	}
	var live []*nodeState
	for id, ns := range m.nodes {
		if now.Sub(ns.seen) >= nodeTTL {
			delete(m.nodes, id)
			continue
		}
		live = append(live, ns)
	}
	if len(live) == 0 {
		return Assignment{Error: errNoNode.Error()}
	}
	sort.Slice(live, func(i, j int) bool {
		a, b := live[i], live[j]
		if ra, rb := siteRank(req, a.info.Site), siteRank(req, b.info.Site); ra != rb {
			return ra < rb
		}
		if la, lb := a.info.Clients+a.pending, b.info.Clients+b.pending; la != lb {
			return la < lb
		}
		return a.info.ID < b.info.ID
	})
	best := live[0]
	best.pending++
	m.assigned[key] = best.info.ID
	return assignment(best.info)
}

// siteRank is 0 for the client's site, i+1 for its i-th near site, and
// after those for any other site.
func siteRank(req JoinRequest, site string) int {
	if site == req.Site {
		return 0
	}
	for i, s := range req.Near {
		if s == site {
			return i + 1
		}
	}
	return len(req.Near) + 1
}

func assignment(info NodeInfo) Assignment {
	return Assignment{Node: info.ID, Site: info.Site, Signal: info.Signal, WebSocket: info.WebSocket}
}

// RequestJoin asks the manager on the bus for a node.
func RequestJoin(ctx context.Context, nc *nats.Conn, req JoinRequest) (Assignment, error) {
	b, _ := json.Marshal(req)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, subjectJoin, b)
	if err != nil {
		return Assignment{}, fmt.Errorf("sfu: join %s/%s: %w", req.Session, req.Client, err)
	}
	var a Assignment
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		return Assignment{}, fmt.Errorf("sfu: join %s/%s: %w", req.Session, req.Client, err)
	}
	if a.Error != "" {
		return a, fmt.Errorf("sfu: join %s/%s: %s", req.Session, req.Client, a.Error)
	}
	return a, nil
}

// Nodes returns the IDs of the live nodes.
func (m *Manager) Nodes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, ns := range m.nodes {
		if time.Since(ns.seen) < nodeTTL {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}
