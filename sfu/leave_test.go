package sfu

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testlog"

	"github.com/nats-io/nats.go"
)

// logLines records a logger's output as text lines.
type logLines struct{ testlog.Buffer }

func (l *logLines) logger() *slog.Logger { return l.Logger() }

// has reports whether a line holds every part.
func (l *logLines) has(parts ...string) bool { return l.Count(parts...) > 0 }

// count returns how many lines hold every part.
func (l *logLines) count(parts ...string) int { return l.Count(parts...) }

func startLoggedCluster(t *testing.T, sites ...string) (*cluster, []*logLines) {
	t.Helper()
	logs := make([]*logLines, len(sites))
	for i := range logs {
		logs[i] = &logLines{}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range logs {
				t.Logf("node %d log:\n%s", i+1, l.String())
			}
		}
	})
	return startClusterLogging(t, func(i int) *slog.Logger { return logs[i].logger() }, sites...), logs
}

// dialAt joins session s1 as client at site (then near) and returns the
// client's node.
func dialAt(t *testing.T, ctx context.Context, c *cluster, client, site string, near ...string) string {
	t.Helper()
	cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, client), Session: "s1", Client: client, Site: site, Near: near,
		ICEAddresses: loopback, VideoSlots: 1})
	if err != nil {
		t.Fatalf("client %s at site %s: %v", client, site, err)
	}
	t.Cleanup(cl.Close)
	return cl.Node
}

// TestNodeLeaves: node 2 (site b) shuts down cleanly, as `xrealm sfu` does
// on Ctrl-C; a client of site b that joins right after is placed on node 1
// without error, and both the node and the manager log the departure.
func TestNodeLeaves(t *testing.T) {
	c, logs := startLoggedCluster(t, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.nodes[1].Close()
	if !logs[1].has(`msg="sfu node leaving: announced"`, "sfu=2") {
		t.Error("node 2 did not log that it announced its leaving")
	}
	if node := dialAt(t, ctx, c, "pcbot", "b"); node != "1" {
		t.Fatalf("client at site b placed on node %s, want 1", node)
	}
	// the leave announcement, not the heartbeat's expiry, removed node 2
	waitFor(t, "the manager to log that node 2 left", func() bool {
		return logs[0].has(`msg="sfu node left; no longer assigned"`, "node=2")
	})
	if got := c.nodes[0].mgr.Nodes(); !slices.Equal(got, []string{"1"}) {
		t.Errorf("manager's nodes after node 2 left: %v, want [1]", got)
	}
}

// TestNodeVanishes: nodes that stop answering without announcing it are
// skipped when placing a client, which goes to another node.
func TestNodeVanishes(t *testing.T) {
	c, logs := startLoggedCluster(t, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n2 := c.nodes[1]
	mgr := c.nodes[0].mgr

	// Node 2 stops answering signals but its heartbeats go on: the
	// manager's request finds no responders.
	if err := n2.subs[0].Unsubscribe(); err != nil { // subjectSignal, first in Start
		t.Fatal(err)
	}
	if err := n2.cfg.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	if node := dialAt(t, ctx, c, "u1", "b"); node != "1" {
		t.Fatalf("client at site b placed on node %s, want 1 (node 2 does not answer)", node)
	}
	if !logs[0].has(`msg="sfu node did not answer; dropped until its next heartbeat"`, "node=2", "no responders") {
		t.Error("the manager did not log that node 2 did not answer")
	}
	waitFor(t, "node 2 back in the manager's nodes after its next heartbeat", func() bool { return slices.Contains(mgr.Nodes(), "2") })

	// Node 3 (site c) heartbeats but never answers: the manager's request
	// times out.
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	hungNode(t, hctx, c, "3", "c")
	if node := dialAt(t, ctx, c, "u2", "c", "a"); node != "1" {
		t.Fatalf("client at site c near a placed on node %s, want 1 (node 3 does not answer)", node)
	}
	if !logs[0].has(`msg="sfu node did not answer; dropped until its next heartbeat"`, "node=3") {
		t.Error("the manager did not log that node 3 did not answer")
	}
	stop()

	// Node 2's bus connection closes without the leave announcement, as
	// when its process is killed.
	n2.cfg.NC.Close()
	if node := dialAt(t, ctx, c, "u3", "b"); node != "1" {
		t.Fatalf("client at site b placed on node %s, want 1 (node 2's connection is closed)", node)
	}
}

// hungNode makes a node id at site that heartbeats, until ctx ends, but
// never answers its signals (a node that hangs): the manager's pings to it
// time out. It returns once the manager knows the node.
func hungNode(t *testing.T, ctx context.Context, c *cluster, id, site string) {
	t.Helper()
	fakeNode(t, ctx, c, id, site, func(*nats.Msg) {})
}

// fakeNode makes a node id at site that heartbeats until ctx ends and
// hands the messages on its signal subject to handle, one at a time. It
// returns once the manager knows the node.
func fakeNode(t *testing.T, ctx context.Context, c *cluster, id, site string, handle nats.MsgHandler) {
	t.Helper()
	nc := c.conn(t, "fake"+id)
	if _, err := nc.Subscribe(subjectSignal(id), handle); err != nil {
		t.Fatal(err)
	}
	go func() {
		b, _ := json.Marshal(NodeInfo{ID: id, Site: site, Signal: subjectSignal(id)})
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = nc.Publish(subjectNodes, b)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	waitFor(t, "node "+id+" in the manager's nodes", func() bool { return slices.Contains(c.nodes[0].mgr.Nodes(), id) })
}

// respondSignal answers a signal message with r.
func respondSignal(m *nats.Msg, r Reply) {
	b, _ := json.Marshal(r)
	_ = m.Respond(b)
}

// TestPlaceNoNodeAnswers: when no node answers, the join fails and says
// which nodes were tried.
func TestPlaceNoNodeAnswers(t *testing.T) {
	c, _ := startLoggedCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.nodes[0].subs[0].Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	_, err := RequestJoin(ctx, c.conn(t, "client"), JoinRequest{Session: "s1", Client: "u1", Site: "a"})
	if err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("join with no node answering: err %v, want one naming node 1", err)
	}
}
