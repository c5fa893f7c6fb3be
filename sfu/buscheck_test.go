package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
)

// startNode starts a node with id at site on nc, as startCluster does.
func startNode(nc *nats.Conn, id, site string, log *slog.Logger) (*Node, error) {
	return Start(context.Background(), Config{NC: nc, ID: id, Site: site, Logger: log, ICEAddresses: loopback,
		Registerer: prometheus.NewRegistry(), Heartbeat: 200 * time.Millisecond, AllocateEvery: 100 * time.Millisecond, RelaySlots: testRelaySlots})
}

// TestDuplicateNodeID: a second node started with the ID of a live node
// (here node 2 at site b, as `xrealm sfu --id` with serve's ID) refuses to
// start, names the live node's site, and leaves node 2 in place: the
// manager still assigns site b's clients to it.
func TestDuplicateNodeID(t *testing.T) {
	c, logs := startLoggedCluster(t, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dup := &logLines{}
	start := time.Now()
	n, err := startNode(c.conn(t, "dup"), "2", "c", dup.logger())
	if err == nil {
		n.Close()
		t.Fatal("a second node with id 2 started")
	}
	if !errors.Is(err, ErrDuplicateID) {
		t.Errorf("err %v, want ErrDuplicateID", err)
	}
	if want := "an SFU node with id 2 is already running (site b); choose another --id"; !strings.Contains(err.Error(), want) {
		t.Errorf("err %q, want it to say %q", err, want)
	}
	if d := time.Since(start); d > duplicateTimeout {
		t.Errorf("the refusal took %s, want at once", d)
	}
	if dup.has("sfu node started") {
		t.Error("the refused node logged that it started")
	}
	if node := dialAt(t, ctx, c, "u1", "b"); node != "2" {
		t.Fatalf("client at site b placed on node %s, want 2", node)
	}
	if logs[0].has("sfu node left") {
		t.Error("the manager logged that a node left")
	}
	if got := c.nodes[0].mgr.Nodes(); !slices.Equal(got, []string{"1", "2"}) {
		t.Errorf("manager's nodes: %v, want [1 2]", got)
	}
}

// TestStartBesideLeavingNode: a node whose ID answers the ping that it is
// shutting down (Close between its flag and its unsubscribe) does not stop
// a new node with that ID.
func TestStartBesideLeavingNode(t *testing.T) {
	c, _ := startLoggedCluster(t, "a")
	old := c.conn(t, "old5")
	if _, err := old.Subscribe(subjectSignal("5"), func(m *nats.Msg) {
		b, _ := json.Marshal(Reply{Op: "error", Error: "sfu node 5 is shutting down", Site: "b"})
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if err := old.Flush(); err != nil {
		t.Fatal(err)
	}
	n, err := startNode(c.conn(t, "new5"), "5", "b", nil)
	if err != nil {
		t.Fatalf("node 5 beside a node 5 shutting down: %v", err)
	}
	n.Close()
}

// TestLeaveFromOtherInstance: the manager ignores a leave announcement
// for a node ID from another instance than the one whose heartbeats it has
// (what a duplicate node sent when it exited, and a restarted node's old
// process may send after the new one's first heartbeat), and honours the
// node's own.
func TestLeaveFromOtherInstance(t *testing.T) {
	c, logs := startLoggedCluster(t, "a", "b")
	mgr := c.nodes[0].mgr
	n2 := c.nodes[1]
	if n2.instance == "" {
		t.Fatal("node 2 has no instance")
	}
	other := c.conn(t, "other")
	for _, inst := range []string{"0123456789abcdef", n2.instance} {
		b, _ := json.Marshal(NodeInfo{ID: "2", Site: "c", Signal: subjectSignal("2"), Leaving: true, Instance: inst})
		if err := other.Publish(subjectNodes, b); err != nil {
			t.Fatal(err)
		}
		if inst != n2.instance {
			waitFor(t, "the manager to log the ignored leave", func() bool {
				return logs[0].has("ignored a leave announcement", "node=2", "instance=0123456789abcdef", "current_instance="+n2.instance)
			})
			if got := mgr.Nodes(); !slices.Contains(got, "2") {
				t.Fatalf("manager's nodes after another instance's leave: %v, want node 2 kept", got)
			}
			if logs[0].has("sfu node left") {
				t.Fatal("the manager logged that node 2 left")
			}
			continue
		}
		waitFor(t, "the manager to drop node 2 on its own instance's leave", func() bool {
			return logs[0].has(`msg="sfu node left; no longer assigned"`, "node=2", "instance="+n2.instance)
		})
	}
	// The heartbeat and leave of node 2's own Close carry its instance.
	waitFor(t, "node 2 back after its next heartbeat", func() bool { return slices.Contains(mgr.Nodes(), "2") })
	n2.Close()
	waitFor(t, "node 2 gone after its Close", func() bool { return !slices.Contains(mgr.Nodes(), "2") })
}

// TestRestartedNodeInstance: node 2 started again has a new instance, and
// a leave of its previous run that reaches the manager late leaves the new
// one assigned.
func TestRestartedNodeInstance(t *testing.T) {
	c, logs := startLoggedCluster(t, "a", "b")
	mgr := c.nodes[0].mgr
	n2 := c.nodes[1]
	oldInst := n2.instance
	n2.Close()
	waitFor(t, "node 2 gone", func() bool { return !slices.Contains(mgr.Nodes(), "2") })
	n, err := startNode(c.conn(t, "node2again"), "2", "b", nil)
	if err != nil {
		t.Fatalf("node 2 again: %v", err)
	}
	t.Cleanup(n.Close)
	if n.instance == oldInst {
		t.Fatal("a restarted node kept its instance")
	}
	waitFor(t, "node 2 known again", func() bool { return slices.Contains(mgr.Nodes(), "2") })
	b, _ := json.Marshal(NodeInfo{ID: "2", Site: "b", Signal: subjectSignal("2"), Leaving: true, Instance: oldInst})
	if err := c.conn(t, "late").Publish(subjectNodes, b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ignored leave", func() bool { return logs[0].has("ignored a leave announcement", "instance="+oldInst) })
	if !slices.Contains(mgr.Nodes(), "2") {
		t.Fatal("the old instance's leave dropped the restarted node 2")
	}
}

// startTokenBus starts a bus that checks xrealm tokens, as xrealm serve's.
func startTokenBus(t *testing.T) (*bus.Bus, *auth.Keys) {
	t.Helper()
	dir := t.TempDir()
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "sfu-token-test", Verifier: keys, MaxPayload: 1 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	return b, keys
}

// TestStartWithoutRights: a node whose token lacks the rights of an SFU
// node (a scene viewer's) fails to start at once, naming the refused
// subject and the token it needs; with a service token (xrealm token
// --role sfu) it starts.
func TestStartWithoutRights(t *testing.T) {
	b, keys := startTokenBus(t)
	viewer, err := keys.Issue("alice", auth.SceneRights("realm", "ns", "sc", auth.RoleViewer, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := b.Connect("viewer", nats.Token(viewer))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	n, err := startNode(nc, "9", "a", nil)
	if err == nil {
		n.Close()
		t.Fatal("a node with a viewer token started")
	}
	t.Log(err)
	var pe *PermissionError
	if !errors.As(err, &pe) || !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("err %v, want a *PermissionError wrapping nats.ErrPermissionViolation", err)
	}
	for _, want := range []string{pe.Subject, "xrealm token --role sfu", "sfu.>"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not say %q", err, want)
		}
	}
	// the bus refuses the inbox of the ID check first, then its ping: the
	// node's own subject is the one named
	if pe.Subject != "sfu.node.9.signal" || pe.Op != "publish to" {
		t.Errorf("refused: %s %q, want publish to sfu.node.9.signal (the first of the node's own subjects)", pe.Op, pe.Subject)
	}
	if d := time.Since(start); d > duplicateTimeout {
		t.Errorf("failing took %s, want at once", d)
	}

	svc, err := keys.Issue("sfu-9", auth.ServiceRights("sfu"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nc2, err := b.Connect("sfu-9", nats.Token(svc))
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	n, err = startNode(nc2, "9", "a", nil)
	if err != nil {
		t.Fatalf("node with a service token: %v", err)
	}
	n.Close()
}

func TestAsPermissionError(t *testing.T) {
	for _, tt := range []struct {
		err     error
		op, sub string
	}{
		{fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "sfu.node.9.signal"`), "subscribe to", "sfu.node.9.signal"},
		{fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "sfu.join"`), "publish to", "sfu.join"},
		{fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "_INBOX.x.*" using queue "q"`), "subscribe to", "_INBOX.x.*"},
		{nats.ErrPermissionViolation, "use", "?"},
	} {
		pe := AsPermissionError(tt.err)
		if pe == nil || pe.Op != tt.op || pe.Subject != tt.sub || !errors.Is(pe, nats.ErrPermissionViolation) {
			t.Errorf("AsPermissionError(%v) = %+v, want %s %s", tt.err, pe, tt.op, tt.sub)
			continue
		}
		if !strings.Contains(pe.Error(), TokenHint) {
			t.Errorf("%q lacks the hint", pe.Error())
		}
	}
	for _, err := range []error{nil, nats.ErrTimeout, errors.New(`Permissions Violation for Publish to "x"`)} {
		if pe := AsPermissionError(err); pe != nil {
			t.Errorf("AsPermissionError(%v) = %v, want nil", err, pe)
		}
	}
}

// TestBusCheckFlushFails: a start-time check whose Flush fails fails, with
// the Flush's error (Start went on before, without having seen the
// server's answers).
func TestBusCheckFlushFails(t *testing.T) {
	b, err := bus.Start(bus.Config{DataDir: t.TempDir(), Name: "sfu-buscheck", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	nc, err := b.Connect("check")
	if err != nil {
		t.Fatal(err)
	}
	w := watchBus(nc, "sfu.node.x.buscheck")
	if err := w.check(context.Background()); err != nil {
		t.Fatalf("open connection: %v", err)
	}
	nc.Close()
	if err := w.check(context.Background()); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("closed connection: %v, want nats.ErrConnectionClosed", err)
	}
}

// TestBusCheckSeesEveryViolation: a check reports a violation even when
// another error came after it (here a slow consumer on another
// subscription of the connection, which takes the connection's LastError,
// so a check that read LastError would miss the violation), and the
// connection's own error handler still sees both errors but not the
// check's marker.
func TestBusCheckSeesEveryViolation(t *testing.T) {
	b, keys := startTokenBus(t)
	svc, err := keys.Issue("sfu-t", auth.ServiceRights("sfu"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []error // by the connection's own handler
	)
	nc, err := b.Connect("sfu-t", nats.Token(svc), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		seen = append(seen, err)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w := watchBus(nc, "sfu.node.t.buscheck")
	defer w.stop()
	if err := nc.Publish("scene.elsewhere", nil); err != nil { // outside sfu.>: refused
		t.Fatal(err)
	}
	slow, err := nc.ChanSubscribe("sfu.other", make(chan *nats.Msg)) // never read
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Unsubscribe() }()
	if err := nc.Publish("sfu.other", nil); err != nil {
		t.Fatal(err)
	}
	err = w.check(context.Background())
	var pe *PermissionError
	if !errors.As(err, &pe) || pe.Subject != "scene.elsewhere" || pe.Op != "publish to" {
		t.Fatalf("check: %v, want the refused publish to scene.elsewhere", err)
	}
	if AsPermissionError(nc.LastError()) != nil {
		t.Errorf("LastError %v: the violation was not overwritten; the test shows nothing", nc.LastError())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || AsPermissionError(seen[0]) == nil || !errors.Is(seen[1], nats.ErrSlowConsumer) {
		t.Errorf("the connection's handler saw %v, want the violation and the other subscription's slow consumer (not the marker)", seen)
	}
}
