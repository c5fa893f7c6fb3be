package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
)

// The nodes of a cluster must agree on what xrealm cannot share through
// JetStream: the realm they serve and the key they sign tokens with. Each
// cluster node answers requests on identitySubject with its identity; a
// node that starts asks the others before it runs JetStream at all
// (checkClusterFirst): a node that has run JetStream in a cluster is a
// peer of the cluster's JetStream meta group, and stays one after it stops
// until an operator removes it, so that a refused node would leave the
// cluster needing one node more for its quorum.
//
// A node of another realm would replace the subjects of the cluster's
// persistence stream with its own realm's, and the other nodes' object
// messages would no longer be stored (their QoS 1 publishes never
// acknowledged): it refuses to start. A node with another signing key
// would refuse the tokens the others issue, and they its: it logs an error
// (so do the nodes it asks).
const identitySubject = "$XREALM.cluster.identity"

// identityWait bounds how long a starting node waits for the other nodes
// to say who they are; it stops waiting once every node it has a route to
// has answered.
const identityWait = 2 * time.Second

// identityAskEvery is how often a starting node asks again while a node it
// has a route to has not answered: a request sent before a new route has
// carried the other node's interest in identitySubject reaches nobody.
const identityAskEvery = 250 * time.Millisecond

// probeTTL is the lifetime of the token a node signs to show its key.
const probeTTL = 10 * time.Minute

// identity is what a cluster node says of itself.
type identity struct {
	Node     string `json:"node"`
	Instance string `json:"instance"` // tells a node's own answers from another's of the same name
	Realm    string `json:"realm"`
	// Probe is a token without rights that the node signed: a node that
	// cannot verify it signs with another key.
	Probe string `json:"probe"`
}

func (s *Server) identity() ([]byte, error) {
	probe, err := s.Keys.Issue("xrealm-node-"+s.cfg.nodeName(), auth.Rights{}, probeTTL)
	if err != nil {
		return nil, err
	}
	return json.Marshal(identity{Node: s.cfg.nodeName(), Instance: s.instance, Realm: s.cfg.Realm, Probe: probe})
}

// realmMismatchError is a node of the cluster that serves another realm.
type realmMismatchError struct {
	node, theirs, ours string
}

func (e *realmMismatchError) Error() string {
	return fmt.Sprintf("node %s of the cluster serves realm %q, this node --realm %q: every node of a cluster must serve the same realm "+
		"(a node of another realm would make the cluster's persistence stream capture only its realm's object messages, and the other nodes' would no longer be stored); "+
		"start this node with --realm %s", e.node, e.theirs, e.ours, e.theirs)
}

// keyMismatchError is a node of the cluster that signs tokens with another
// key.
type keyMismatchError struct {
	node, dataDir string
	err           error
}

func (e *keyMismatchError) Error() string {
	return fmt.Sprintf("node %s of the cluster signs tokens with another key than this node's (%s): "+
		"every node of a cluster must share the signing key, or a token one node issues is refused by the others (%v); "+
		"copy the keys/ directory of a running node's data directory into %s and restart this node",
		e.node, filepath.Join(e.dataDir, "keys", auth.KeyFile), e.err, e.dataDir)
}

func (e *keyMismatchError) Unwrap() error { return e.err }

// mismatch returns why the node of identity id cannot be in this node's
// cluster (*realmMismatchError, *keyMismatchError), or nil.
func (s *Server) mismatch(id identity) error {
	if id.Realm != s.cfg.Realm {
		return &realmMismatchError{node: id.Node, theirs: id.Realm, ours: s.cfg.Realm}
	}
	if _, err := s.Keys.Verify(id.Probe); err != nil {
		if errors.Is(err, jwt.ErrTokenSignatureInvalid) {
			return &keyMismatchError{node: id.Node, dataDir: s.cfg.DataDir, err: err}
		}
		return fmt.Errorf("node %s of the cluster sent a probe token this node refuses (are the machines' clocks apart?): %w", id.Node, err)
	}
	return nil
}

// serveIdentity answers the identity requests of the cluster's nodes on
// nc, and logs an error for an asker that cannot be in the cluster.
func (s *Server) serveIdentity(nc *nats.Conn) error {
	_, err := nc.Subscribe(identitySubject, func(m *nats.Msg) {
		var asker identity
		if err := json.Unmarshal(m.Data, &asker); err == nil && asker.Instance != s.instance && s.firstAsk(asker.Instance) {
			err := s.mismatch(asker)
			var rm *realmMismatchError
			var km *keyMismatchError
			switch {
			case errors.As(err, &rm):
				s.log.Error("a node of another realm asked to join the cluster; it refuses to start", "node", asker.Node, "its_realm", asker.Realm, "realm", s.cfg.Realm)
			case errors.As(err, &km):
				s.log.Error("a node with another signing key asked to join the cluster: tokens issued by one of the two are refused by the other; "+
					"copy the keys/ directory of this node's data directory into that node's, and restart it", "node", asker.Node, "key", filepath.Join(s.cfg.DataDir, "keys", auth.KeyFile))
			case err != nil:
				s.log.Error("a node asked to join the cluster with an identity this node cannot check", "node", asker.Node, "err", err)
			}
		}
		id, err := s.identity()
		if err != nil {
			s.log.Error("cannot answer a cluster node's identity request", "err", err)
			return
		}
		_ = m.Respond(id)
	})
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", identitySubject, err)
	}
	return nc.Flush()
}

// firstAsk reports whether instance is not the node that asked last: a
// starting node may ask more than once (checkCluster), and its mismatch is
// logged once.
func (s *Server) firstAsk(instance string) bool {
	s.askMu.Lock()
	defer s.askMu.Unlock()
	if s.lastAsker == instance {
		return false
	}
	s.lastAsker = instance
	return true
}

// checkClusterFirst runs the identity check (checkCluster) on a NATS
// server of its own, started with this node's name, cluster address and
// routes but without JetStream and without the node's NATS listeners, and
// stops that server; the node then starts its bus, with JetStream, as a
// node outside a cluster does. (nats-server can turn JetStream on in a
// running server, but a cluster node that does is left out of its own
// list of JetStream servers: as meta leader it never places a stream
// replica on itself.) The check server answers the other nodes' identity
// requests too, for nodes that start at the same time.
func (s *Server) checkClusterFirst(ctx context.Context, bc bus.Config) error {
	bc.NoJetStream = true
	bc.NATSAddr, bc.NATSWSAddr = "", ""
	bc.OnDeny, bc.OnViolation = nil, nil
	bc.Logger = s.log.With("stage", "cluster identity check")
	b, err := bus.Start(bc)
	if err != nil {
		return err
	}
	defer b.Shutdown()
	nc, err := b.Connect("xrealm-identity-check")
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := s.serveIdentity(nc); err != nil {
		return err
	}
	if err := b.WaitRoute(ctx); err != nil {
		return err
	}
	if s.cfg.beforeClusterCheck != nil {
		s.cfg.beforeClusterCheck()
	}
	return s.checkCluster(ctx, nc, b)
}

// checkCluster asks the cluster's other nodes who they are. It returns a
// *realmMismatchError for a node that serves another realm, and logs an
// error for one that signs with another key; it waits for identityWait at
// most, less once every node this one has a route to has answered, and
// asks again every identityAskEvery meanwhile. Nodes that do not answer
// (still starting, or of an xrealm without this check) are not checked.
// The node runs no JetStream yet: the request and the answers travel on
// the cluster's routes.
func (s *Server) checkCluster(ctx context.Context, nc *nats.Conn, b *bus.Bus) error {
	ours, err := s.identity()
	if err != nil {
		return err
	}
	inbox := nc.NewInbox()
	answers := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return fmt.Errorf("cluster identity check: %w", err)
	}
	defer sub.Unsubscribe()
	ask := func() error {
		if err := nc.PublishRequest(identitySubject, inbox, ours); err != nil {
			return fmt.Errorf("cluster identity check: %w", err)
		}
		return nil
	}
	if err := ask(); err != nil {
		return err
	}
	routed := b.RouteNames()
	var heard []string
	allHeard := func() bool {
		return !slices.ContainsFunc(routed, func(n string) bool { return !slices.Contains(heard, n) })
	}
	timer := time.NewTimer(identityWait)
	defer timer.Stop()
	again := time.NewTicker(identityAskEvery)
	defer again.Stop()
	for {
		select {
		case m := <-answers:
			var id identity
			if err := json.Unmarshal(m.Data, &id); err != nil || id.Instance == s.instance {
				continue
			}
			err := s.mismatch(id)
			var km *keyMismatchError
			switch {
			case errors.As(err, &km):
				s.log.Error("signing keys differ across the cluster", "err", err)
			case err != nil:
				return err
			}
			if !slices.Contains(heard, id.Node) {
				heard = append(heard, id.Node)
			}
			if allHeard() {
				return nil
			}
		case <-again.C:
			// The routes the cluster's gossip has added since.
			if routed = b.RouteNames(); allHeard() {
				return nil
			}
			if err := ask(); err != nil {
				return err
			}
		case <-timer.C:
			s.log.Debug("cluster identity check: not every node answered", "answered", heard, "routes_to", routed)
			return nil
		case <-ctx.Done():
			// The node is stopping: it must not go on to start JetStream.
			return fmt.Errorf("cluster identity check: %w", ctx.Err())
		}
	}
}

func newInstance() string { return rand.Text() }
