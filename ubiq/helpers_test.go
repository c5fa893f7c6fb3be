package ubiq

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/xrealm/xrealm/bus"
)

// testBus is one embedded bus shared by the tests of this package; each
// test server gets its own bucket and rooms have fresh uuids.
var (
	busOnce   sync.Once
	sharedBus *bus.Bus
	busDir    string
	busErr    error
	bucketSeq atomic.Int64
)

// TestMain stops the shared bus and removes its directory after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if sharedBus != nil {
		sharedBus.Shutdown()
	}
	if busDir != "" {
		os.RemoveAll(busDir)
	}
	os.Exit(code)
}

func getBus(t *testing.T) *bus.Bus {
	t.Helper()
	busOnce.Do(func() {
		dir, err := newTempDir()
		if err != nil {
			busErr = err
			return
		}
		busDir = dir
		sharedBus, busErr = bus.Start(bus.Config{DataDir: dir, Name: "ubiq-test", Insecure: true, MaxPayload: 8 << 20, Logger: slog.New(slog.DiscardHandler)})
	})
	if busErr != nil {
		t.Fatal(busErr)
	}
	return sharedBus
}

type testServer struct {
	s      *Server
	tcp    string
	ws     string
	wss    string
	nc     *nats.Conn
	closed bool
}

// startServer starts a Ubiq server on b (nil = the shared bus) with TCP
// and plain WebSocket listeners on loopback.
func startServer(t *testing.T, b *bus.Bus, mod func(*Config)) *testServer {
	t.Helper()
	if b == nil {
		b = getBus(t)
	}
	nc, err := b.Connect("ubiq-test", nats.NoEcho())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := b.JetStream(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NC: nc, JS: js, Bucket: fmt.Sprintf("ubiq-test-%d", bucketSeq.Add(1)), Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewServer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{s: s, nc: nc}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.tcp = l.Addr().String()
	go s.Serve(l)
	wl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.ws = "ws://" + wl.Addr().String() + "/"
	go s.ServeWebSocket(wl, false)
	if cfg.TLS != nil {
		sl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ts.wss = "wss://" + sl.Addr().String() + "/"
		go s.ServeWebSocket(sl, true)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		nc.Close()
	})
	return ts
}

// msg is something a test peer received.
type msg struct {
	to    NetworkId
	typ   string // server message type; "" for a relayed frame
	args  string
	frame []byte
}

func (m msg) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(m.args), v); err != nil {
		t.Fatalf("%s args %q: %v", m.typ, m.args, err)
	}
}

// peer is a Ubiq peer written for the tests: it speaks the RoomClient
// protocol by hand.
type peer struct {
	t        *testing.T
	c        *Client
	uuid     string
	sceneID  NetworkId
	clientID NetworkId
	in       chan msg
	seen     []msg // messages skipped by expect
}

var idSeq atomic.Uint32

func dialPeer(t *testing.T, addr string, o ...ClientOptions) *peer {
	t.Helper()
	n := idSeq.Add(1)
	p := &peer{t: t, uuid: newUUID(), sceneID: NetworkId{A: 1000 + n, B: 7}, clientID: NetworkId{A: 2000 + n, B: 9}, in: make(chan msg, 100000)}
	var opt ClientOptions
	if len(o) > 0 {
		opt = o[0]
	}
	if opt.ServerTimeout == 0 {
		opt.ServerTimeout = -1 // the watchdog's Ping answers would end barrier early
	}
	opt.OnFrame = func(f []byte) {
		m := msg{to: IDOf(f), frame: append([]byte(nil), f...)}
		if m.to == p.clientID {
			var r Request
			if json.Unmarshal(f[HeaderSize:], &r) == nil {
				m.typ, m.args = r.Type, r.Args
			}
		}
		p.in <- m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	p.c = c
	t.Cleanup(func() { c.Close() })
	return p
}

func (p *peer) info(keys, values []string) PeerInfo {
	if keys == nil {
		keys, values = []string{}, []string{}
	}
	return PeerInfo{UUID: p.uuid, SceneID: p.sceneID, ClientID: p.clientID, Keys: keys, Values: values}
}

func (p *peer) request(typ string, args any) {
	p.t.Helper()
	if err := p.c.Request(typ, args); err != nil {
		p.t.Fatalf("send %s: %v", typ, err)
	}
}

// join sends Join and waits for SetRoom.
func (p *peer) join(a JoinArgs) RoomInfo {
	p.t.Helper()
	if a.Peer.UUID == "" {
		a.Peer = p.info(nil, nil)
	}
	p.request("Join", a)
	var sr struct {
		Room RoomInfo `json:"room"`
	}
	p.expect("SetRoom").decode(p.t, &sr)
	return sr.Room
}

// expect waits for the next server message of type typ, keeping the
// others it passes in p.seen.
func (p *peer) expect(typ string) msg {
	p.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-p.in:
			if m.typ == typ {
				return m
			}
			p.seen = append(p.seen, m)
		case <-deadline:
			p.t.Fatalf("peer %s: no %s within 10s (saw %d other messages)", p.uuid[:8], typ, len(p.seen))
		}
	}
}

// frame waits for the next relayed frame.
func (p *peer) frame() msg {
	p.t.Helper()
	return p.expect("")
}

// barrier pings the server and returns everything received before the
// answer, and what expect skipped earlier: the server answers in order on
// the connection.
func (p *peer) barrier() []msg {
	p.t.Helper()
	out := p.seen
	p.seen = nil
	p.request("Ping", ClientArgs{ClientID: p.clientID})
	p.expect("Ping")
	out = append(out, p.seen...)
	p.seen = nil
	return out
}

func countType(ms []msg, typ string) int {
	n := 0
	for _, m := range ms {
		if m.typ == typ {
			n++
		}
	}
	return n
}

// eventually polls cond until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newTempDir() (string, error) { return os.MkdirTemp("", "ubiq-test-") }
