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
)

// The nodes of a cluster must agree on what xrealm cannot share through
// JetStream: the realm they serve and the key they sign tokens with. Each
// cluster node answers requests on identitySubject with its identity; a
// node that starts asks the others before it opens any JetStream state.
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
		if err := json.Unmarshal(m.Data, &asker); err == nil && asker.Instance != s.instance {
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

// checkCluster asks the cluster's other nodes who they are. It returns a
// *realmMismatchError for a node that serves another realm, and logs an
// error for one that signs with another key; it waits for identityWait at
// most, less once every node this one has a route to has answered. Nodes
// that do not answer (still starting, or of an xrealm without this check)
// are not checked.
func (s *Server) checkCluster(ctx context.Context, nc *nats.Conn) error {
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
	if err := nc.PublishRequest(identitySubject, inbox, ours); err != nil {
		return fmt.Errorf("cluster identity check: %w", err)
	}
	routed := s.bus.RouteNames()
	var heard []string
	timer := time.NewTimer(identityWait)
	defer timer.Stop()
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
			if !slices.ContainsFunc(routed, func(n string) bool { return !slices.Contains(heard, n) }) {
				return nil
			}
		case <-timer.C:
			s.log.Debug("cluster identity check: not every node answered", "answered", heard, "routes_to", routed)
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

func newInstance() string { return rand.Text() }
