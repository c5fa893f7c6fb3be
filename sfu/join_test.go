package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/pion/webrtc/v4"
)

// joinAnswers sends join requests without waiting for them (no goroutine
// per request) and records the manager's answers as they arrive.
type joinAnswers struct {
	nc    *nats.Conn
	inbox string

	mu  sync.Mutex
	got map[string]answer // by client
}

type answer struct {
	Assignment
	at time.Time
}

func newJoinAnswers(t *testing.T, c *cluster) *joinAnswers {
	t.Helper()
	j := &joinAnswers{nc: c.conn(t, "joins"), inbox: nats.NewInbox(), got: map[string]answer{}}
	_, err := j.nc.Subscribe(j.inbox+".*", func(m *nats.Msg) {
		var a Assignment
		if err := json.Unmarshal(m.Data, &a); err != nil {
			a.Error = "bad answer: " + err.Error()
		}
		j.mu.Lock()
		j.got[strings.TrimPrefix(m.Subject, j.inbox+".")] = answer{a, time.Now()}
		j.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// send asks for a node for client of session s1 at site.
func (j *joinAnswers) send(t *testing.T, client, site string) {
	t.Helper()
	b, _ := json.Marshal(JoinRequest{Session: "s1", Client: client, Site: site})
	if err := j.nc.PublishRequest(subjectJoin, j.inbox+"."+client, b); err != nil {
		t.Fatal(err)
	}
}

// answers returns the answers so far.
func (j *joinAnswers) answers() map[string]answer {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.got)
}

// count returns how many answers so far satisfy ok.
func (j *joinAnswers) count(ok func(answer) bool) int {
	n := 0
	for _, a := range j.answers() {
		if ok(a) {
			n++
		}
	}
	return n
}

// TestManagerCloseAnswersQueuedJoins: when the manager closes, the join it
// is placing (its node does not answer the ping) and the joins queued on
// its subscription are all answered "shutting down" at once, instead of
// being left to their callers' timeout (10 s); a join after Close finds no
// manager at once.
func TestManagerCloseAnswersQueuedJoins(t *testing.T) {
	c, _ := startLoggedCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := c.nodes[0].mgr
	hungNode(t, ctx, c, "9", "h")
	j := newJoinAnswers(t, c)

	j.send(t, "placing", "h")
	waitFor(t, "the manager placing a join", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.placing == 1
	})
	// Holding the manager's lock stands in for a join handler held up (by
	// heartbeats, by Assign): the next joins queue on the subscription.
	unlock := sync.OnceFunc(m.mu.Unlock)
	m.mu.Lock()
	defer unlock()
	const queued = 50
	for i := range queued {
		j.send(t, fmt.Sprintf("q%d", i), "a")
	}
	if err := j.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "joins queued on the manager's subscription", func() bool {
		n, _, _ := m.join.Pending()
		return n == queued // the first is the handler's, waiting for the lock
	})
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		m.Close()
		close(closed)
	}()
	waitFor(t, "Close to begin", func() bool { return m.ctx.Err() != nil })
	unlock()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5 s")
	}
	took := time.Since(start)
	got := j.answers()
	if len(got) != queued+1 {
		t.Fatalf("%d of %d joins answered when Close returned (%v)", len(got), queued+1, took)
	}
	for client, a := range got {
		if a.Error != errShuttingDown.Error() || a.at.Sub(start) > time.Second {
			t.Errorf("join of %s: answer %+v %v after Close began, want %q within 1 s", client, a.Assignment, a.at.Sub(start), errShuttingDown)
		}
	}
	t.Logf("Close answered %d joins and returned in %v", len(got), took)

	before := time.Now()
	if _, err := RequestJoin(ctx, j.nc, JoinRequest{Session: "s1", Client: "late", Site: "a"}); !errors.Is(err, nats.ErrNoResponders) || time.Since(before) > time.Second {
		t.Errorf("join after Close: err %v after %v, want no responders at once", err, time.Since(before))
	}
}

// TestManagerBusy: a flood of joins while the chosen nodes do not answer.
// The manager places maxPlacing at once and answers the rest busy at once,
// with no goroutine for them; a client that finds it busy asks again and
// then fails with ErrBusy. When the pings time out the joins being placed
// go to node 1, and the manager says it is no longer busy.
func TestManagerBusy(t *testing.T) {
	c, logs := startLoggedCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Joins at site h go to node 9, then to node 8 (site g, near), each
	// probeTimeout, then to node 1: the manager is busy for 2 × probeTimeout.
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	hungNode(t, hctx, c, "9", "h")
	hungNode(t, hctx, c, "8", "g")
	j := newJoinAnswers(t, c)
	isBusy := func(a answer) bool { return a.Busy && strings.HasPrefix(a.Error, ErrBusy.Error()) }

	base := runtime.NumGoroutine()
	const flood = 2 * maxPlacing
	start := time.Now()
	for i := range flood {
		b, _ := json.Marshal(JoinRequest{Session: "s1", Client: fmt.Sprintf("u%d", i), Site: "h", Near: []string{"g"}})
		if err := j.nc.PublishRequest(subjectJoin, fmt.Sprintf("%s.u%d", j.inbox, i), b); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "busy answers to the joins beyond maxPlacing", func() bool { return j.count(isBusy) == flood-maxPlacing })
	took := time.Since(start)
	extra := runtime.NumGoroutine() - base
	stop() // nodes 8 and 9 stay known until the manager drops them
	if took >= probeTimeout {
		t.Errorf("busy answers took %v, want them before any ping times out (%v)", took, probeTimeout)
	}
	if extra > maxPlacing+64 {
		t.Errorf("%d more goroutines during a flood of %d joins, want about maxPlacing (%d)", extra, flood, maxPlacing)
	}
	if n := len(j.answers()); n != flood-maxPlacing {
		t.Errorf("%d answers while placing, want only the %d busy ones", n, flood-maxPlacing)
	}
	if !logs[0].has(`msg="sfu manager busy: joins answered busy until a placement ends"`, fmt.Sprintf("placing=%d", maxPlacing)) {
		t.Error("the manager did not log that it is busy")
	}
	t.Logf("%d busy answers in %v, %d more goroutines", flood-maxPlacing, took, extra)

	clientLog := &logLines{}
	_, err := Dial(ctx, ClientConfig{NC: c.conn(t, "bot"), Session: "s1", Client: "bot", Site: "a", ICEAddresses: loopback, VideoSlots: 1,
		Logger: clientLog.logger()})
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), fmt.Sprintf("(%d attempts)", joinAttempts)) {
		t.Errorf("client joining a busy manager: err %v, want ErrBusy after %d attempts", err, joinAttempts)
	}
	for attempt := 1; attempt < joinAttempts; attempt++ {
		if !clientLog.has(`msg="sfu client: join failed; asking the manager again"`, fmt.Sprintf("attempt=%d", attempt), "busy") {
			t.Errorf("the client did not log its retry after attempt %d", attempt)
		}
	}
	if time.Since(start) >= 2*probeTimeout {
		t.Errorf("the client's attempts ended %v after the flood: the manager may not have been busy for all of them", time.Since(start))
	}

	waitFor(t, "every join answered", func() bool { return len(j.answers()) == flood })
	placed := j.count(func(a answer) bool { return a.Node == "1" && a.Error == "" })
	if placed != maxPlacing {
		t.Errorf("%d joins placed on node 1, want %d", placed, maxPlacing)
	}
	waitFor(t, "the manager to log that it is no longer busy", func() bool {
		return logs[0].has(`msg="sfu manager no longer busy"`, fmt.Sprintf("refused=%d", flood-maxPlacing+joinAttempts))
	})
}

// TestClientRetriesJoin: the node a client is placed on dies between the
// manager's ping and the client's offer, which finds no responders; the
// client asks the manager again and connects to the other node. Node 2
// either stops answering (as if killed: its last heartbeat is fresh, so
// the manager pings it again and drops it) or shuts down cleanly.
func TestClientRetriesJoin(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill func(t *testing.T, n *Node)
	}{
		{"stops answering", func(t *testing.T, n *Node) {
			if err := n.subs[0].Unsubscribe(); err != nil { // subjectSignal, first in Start
				t.Error(err)
			}
			if err := n.cfg.NC.Flush(); err != nil {
				t.Error(err)
			}
		}},
		{"shuts down", func(_ *testing.T, n *Node) { n.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, logs := startLoggedCluster(t, "a", "b")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			clientLog := &logLines{}
			var placed []string
			cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "pcbot"), Session: "s1", Client: "pcbot", Site: "b", ICEAddresses: loopback, VideoSlots: 1,
				Logger: clientLog.logger(),
				placed: func(a Assignment) {
					if placed = append(placed, a.Node); len(placed) == 1 {
						tc.kill(t, c.nodes[1])
					}
				}})
			if err != nil {
				t.Fatalf("client at site b: %v (placed on %v)", err, placed)
			}
			t.Cleanup(cl.Close)
			if cl.Node != "1" || !slices.Equal(placed, []string{"2", "1"}) {
				t.Errorf("client on node %s, placed on %v; want node 1 after node 2", cl.Node, placed)
			}
			if s := cl.PC.ConnectionState(); s != webrtc.PeerConnectionStateConnected {
				t.Errorf("client's connection %s, want connected", s)
			}
			if !clientLog.has(`msg="sfu client: join failed; asking the manager again"`, "node=2", "attempt=1", "no responders") {
				t.Error("the client did not log its retry")
			}
			n1 := c.nodes[0]
			n1.mu.Lock()
			_, ok := n1.peers["s1/pcbot"]
			n1.mu.Unlock()
			if !ok {
				t.Error("node 1 has no peer for the client")
			}
			if tc.name == "stops answering" && !logs[0].has(`msg="sfu node did not answer; dropped until its next heartbeat"`, "node=2", "client=pcbot") {
				t.Error("the manager did not log that node 2 did not answer")
			}
		})
	}
}
