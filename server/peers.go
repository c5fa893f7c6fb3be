package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// A node that has run JetStream in a cluster is a peer of the cluster's
// JetStream meta group, and stays one after it stops for good (a node
// retired, or started once by mistake): the group then needs a quorum of
// more nodes than run, and the loss of one more node may leave it without
// a meta leader (JetStream API calls, and so GET /persist and scene
// settings, fail). RemoveJetStreamPeer removes such a node.

// RemoveJetStreamPeer removes the cluster node name, which has stopped for
// good, from the peers of the cluster's JetStream meta group, and returns
// once the group has agreed. It refuses this node and a node this node has
// a route to (a running node: it would be a peer again as soon as it is
// heard from). The cluster's JetStream must have a meta leader: a quorum
// of its peers running. A node removed cannot join again for 5 minutes.
func (s *Server) RemoveJetStreamPeer(ctx context.Context, name string) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("remove node %q from the JetStream peers: "+format, append([]any{name}, args...)...)
	}
	switch {
	case s.cfg.ClusterName == "":
		return fail("this node is not in a cluster")
	case name == "":
		return fail("no node name")
	case name == s.cfg.nodeName():
		return fail("it is this node")
	case slices.Contains(s.bus.RouteNames(), name):
		return fail("the node is running (this node has a route to it); stop it first")
	}
	nc, err := s.bus.ConnectSystem("xrealm-peer-remove")
	if err != nil {
		return fail("%w", err)
	}
	defer nc.Close()
	req, err := json.Marshal(natsserver.JSApiMetaServerRemoveRequest{Server: name})
	if err != nil {
		return fail("%w", err)
	}
	m, err := nc.RequestWithContext(ctx, natsserver.JSApiRemoveServer, req)
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
		return fail("no JetStream meta leader answered (%w): a peer can be removed only while a quorum of the meta group's peers runs", err)
	}
	if err != nil {
		return fail("%w", err)
	}
	var resp natsserver.JSApiMetaServerRemoveResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fail("answer %q: %w", m.Data, err)
	}
	if resp.Error != nil {
		return fail("%s (code %d, JetStream error %d)", resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
	}
	if !resp.Success {
		return fail("the meta leader answered %q", m.Data)
	}
	s.log.Info("removed a node from the cluster's JetStream peers", "node", name)
	return nil
}

// SubjectRemovePeer is the NATS subject on which a cluster's nodes take
// requests to remove a departed node from the JetStream peers (xrealm
// cluster remove-peer): the request's data is the node's name, the answer
// RemovePeerReply. One node of the cluster answers (a queue group). Only
// tokens with the cluster service right (xrealm token --role cluster) may
// publish on it.
const SubjectRemovePeer = "cluster.remove-peer"

// RemovePeerReply answers a request on SubjectRemovePeer.
type RemovePeerReply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// removePeerWait bounds a removal that a request asked for.
const removePeerWait = 30 * time.Second

// serveRemovePeer takes requests on SubjectRemovePeer over nc.
func (s *Server) serveRemovePeer(nc *nats.Conn) error {
	_, err := nc.QueueSubscribe(SubjectRemovePeer, "xrealm-cluster", func(m *nats.Msg) {
		ctx, cancel := context.WithTimeout(context.Background(), removePeerWait)
		defer cancel()
		var reply RemovePeerReply
		if err := s.RemoveJetStreamPeer(ctx, string(m.Data)); err != nil {
			reply.Error = err.Error()
		} else {
			reply.OK = true
		}
		b, _ := json.Marshal(reply)
		_ = m.Respond(b)
	})
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", SubjectRemovePeer, err)
	}
	return nil
}
