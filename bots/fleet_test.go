package bots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xrealm/xrealm/server"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startXrealm(t *testing.T) (httpAddr, mqttAddr string, keys *server.Server) {
	t.Helper()
	cfg := server.Defaults()
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr, cfg.MQTTAddr = freeAddr(t), freeAddr(t)
	cfg.HTTPSAddr, cfg.MQTTSAddr, cfg.MQTTWSAddr, cfg.NATSAddr, cfg.NATSWSAddr = "", "", "", "", ""
	cfg.UbiqAddr, cfg.UbiqWSSAddr, cfg.UbiqWSAddr = "", "", ""
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.Start(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return cfg.HTTPAddr, cfg.MQTTAddr, s
}

// runFleet runs a small fleet for a short window and checks that every
// pose reached every member of its scene.
func runFleet(t *testing.T, tr Transport, behaviour string, users int, scenes []string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := StartFleet(ctx, FleetConfig{Transport: tr, Users: users, Scenes: scenes, Rate: 20, Behaviour: Spec{Name: behaviour}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Connected() != users {
		t.Fatalf("%d of %d bots connected", f.Connected(), users)
	}
	time.Sleep(300 * time.Millisecond) // subscriptions settle
	r, err := f.Measure(ctx, time.Second, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	perScene := users / len(scenes)
	// On a loaded machine (other tests, load 12 on 2 cores) some poses
	// take longer than the drain: collect again until they are all in,
	// or 10 s more have passed (then the check below fails).
	for deadline := time.Now().Add(10 * time.Second); r.Delivered < r.Sent*int64(perScene) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		r = f.Collect(time.Second)
	}
	// Every bot had 20 ticks due in the second measured (one more or
	// less at the window's edges, by its phase); each is sent or, on a
	// machine too loaded for the bot to keep up, missed.
	if due := r.Sent + r.Missed; due < int64(users*19) || due > int64(users*21) || r.Sent < int64(users) || r.Expected != due*int64(perScene) {
		t.Errorf("sent %d missed %d expected %d: want %d due (±%d), sent or missed, each due to %d members", r.Sent, r.Missed, r.Expected, users*20, users, perScene)
	}
	// Loopback at this load loses nothing; any loss is a bug in the
	// accounting or the client. (Ticks a sender was too late for, on a
	// loaded machine, are missed: expected, never sent.)
	if sent := r.Sent * int64(perScene); r.Delivered != sent {
		t.Errorf("delivered %d of the %d deliveries of the poses sent", r.Delivered, sent)
	}
	if r.Latency.TotalCount() != r.Delivered {
		t.Errorf("%d latencies for %d deliveries", r.Latency.TotalCount(), r.Delivered)
	}
	return r
}

func TestFleetAgainstXrealm(t *testing.T) {
	httpAddr, mqttAddr, srv := startXrealm(t)
	tests := []struct {
		name      string
		tr        Transport
		behaviour string
		scenes    []string
	}{
		{"tcp with tokens from the HTTP API", &MQTTTransport{Addr: mqttAddr, Tokens: &HTTPTokens{BaseURL: "http://" + httpAddr}}, "randomwalk", []string{"public/a"}},
		{"websocket with signed tokens", &MQTTTransport{Addr: "ws://" + httpAddr + "/mqtt", Tokens: &KeyTokens{Keys: srv.Keys}}, "boids", []string{"public/b", "public/c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runFleet(t, tc.tr, tc.behaviour, 6, tc.scenes)
			t.Logf("delivered %d, p50 %s p99 %s", r.Delivered, Quantile(r.Latency, 50), Quantile(r.Latency, 99))
		})
	}
}

func TestFleetRefusedWithoutToken(t *testing.T) {
	_, mqttAddr, _ := startXrealm(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := StartFleet(ctx, FleetConfig{Transport: &MQTTTransport{Addr: mqttAddr}, Users: 2})
	if err == nil {
		t.Fatal("bots without tokens joined a secure xrealm")
	}
	t.Logf("refused as expected: %v", err)
}

func TestFleetAgainstMosquitto(t *testing.T) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		t.Skip("mosquitto is not installed (apt-get install mosquitto, or scripts/setup.sh --test): skipping")
	}
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nlog_type error\n", port)), 0o644)
	cmd := exec.Command(bin, "-c", conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 100 {
			t.Fatalf("mosquitto does not listen on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	runFleet(t, &MQTTTransport{Addr: addr}, "static", 5, []string{"public/m"})
}

// TestFleetRefusesBadRate checks that a rate that is not a positive
// finite number of poses per second is refused before any bot connects;
// 0 is the default, 10/s.
func TestFleetRefusesBadRate(t *testing.T) {
	for _, rate := range []float64{-5, -1e-9, math.NaN(), math.Inf(1), math.Inf(-1), 2e9, 1e-12} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			if err := CheckRate(rate); err == nil {
				t.Fatalf("CheckRate(%g) accepted it", rate)
			}
			_, err := StartFleet(context.Background(), FleetConfig{Transport: noJoin{t}, Users: 2, Rate: rate})
			if err == nil || !strings.Contains(err.Error(), "rate") {
				t.Fatalf("StartFleet with rate %g: %v, want an error about the rate", rate, err)
			}
		})
	}
	for _, rate := range []float64{0.001, 1, 10, 60, MaxRate} {
		if err := CheckRate(rate); err != nil {
			t.Errorf("CheckRate(%g): %v", rate, err)
		}
	}
}

// noJoin is a transport that no bot may join.
type noJoin struct{ t *testing.T }

func (n noJoin) Join(context.Context, Identity, Receiver, bool) (Link, error) {
	n.t.Error("a bot joined despite a bad configuration")
	return nil, errors.New("no")
}

// Delivery expects every pose due, sent or skipped, to reach every member
// of its sender's scene, and counts the deliveries of the fleet's own
// poses only: the run's delivery ratio that xrealm bots prints (another
// run's bots in the scene made it 250%).
func TestFleetDelivery(t *testing.T) {
	f := &Fleet{cfg: FleetConfig{Prefix: "bot"}, acc: NewAccounts(), scenes: map[string]int{"public/a": 3, "public/b": 1}}
	for i, scene := range []string{"a", "a", "a", "b"} {
		name := fmt.Sprintf("bot%d", i)
		f.bots = append(f.bots, &bot{fleet: f, id: Identity{Index: i, Namespace: "public", Scene: scene, ObjectID: "camera_" + name + "_" + name}, meter: f.acc.NewMeter()})
	}
	period := int64(100 * time.Millisecond)
	at := time.Now().UnixNano()
	f.bots[0].meter.Sent(at)
	f.bots[0].meter.Missed(at+period, 2, period) // due, skipped
	f.bots[1].meter.Sent(at)
	f.bots[3].meter.Sent(at)
	deliver := func(to *bot, from string) {
		to.Receive(&Received{From: []byte(from), SentNanos: at, RecvNanos: at + 1000, Size: 100})
	}
	for _, b := range f.bots[:3] {
		deliver(b, f.bots[0].id.ObjectID)
		deliver(b, f.bots[1].id.ObjectID)
		// Not the fleet's: a browser, another run's bot, a bot number
		// beyond the fleet's, an object.
		for _, other := range []string{"camera_alice_1234", "camera_botx-1_botx-1", "camera_bot9_bot9", "camera_bot1_bot2", "camera_bot01_bot01", "box1"} {
			deliver(b, other)
		}
		b.ReadDone()
	}
	deliver(f.bots[3], f.bots[3].id.ObjectID)
	f.bots[3].ReadDone()
	expected, delivered := f.Delivery()
	if expected != (3+1)*3+1*1 || delivered != 7 {
		t.Errorf("expected %d delivered %d; want 13 and 7", expected, delivered)
	}
	if tot, _ := f.acc.Live(); tot.Received != 3*8+1 {
		t.Errorf("received %d in all, want every message counted (25)", tot.Received)
	}
}

// endLink is a link whose connection ends with err when end is closed.
type endLink struct {
	err  error
	done chan struct{}
	once sync.Once
}

func (l *endLink) SendPose(Pose, int64) error { return nil }
func (l *endLink) Close() error               { l.once.Do(func() { close(l.done) }); return nil }
func (l *endLink) Done() <-chan struct{}      { return l.done }
func (l *endLink) Err() error                 { return l.err }

type endTransport struct{ links []*endLink }

func (t endTransport) Join(_ context.Context, id Identity, _ Receiver, _ bool) (Link, error) {
	return t.links[id.Index], nil
}

// A fleet keeps why its first bot lost its connection, for the error that
// ends a run whose bots were all disconnected (not only "did the server
// stop?", which misleads when another run has taken their client ids
// over), and logs a few disconnections, not one line per bot.
func TestFleetLostReason(t *testing.T) {
	tr := endTransport{}
	for i := 0; i < 10; i++ {
		tr.links = append(tr.links, &endLink{err: fmt.Errorf("bot %d: the server closed the connection", i), done: make(chan struct{})})
	}
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := StartFleet(ctx, FleetConfig{Transport: tr, Users: len(tr.links), Behaviour: Spec{Name: "static"}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.LostReason() != nil {
		t.Fatalf("LostReason %v before any bot lost its connection", f.LostReason())
	}
	tr.links[7].Close()
	for f.Connected() != 9 || f.LostReason() == nil {
		if ctx.Err() != nil {
			t.Fatalf("connected %d, lost reason %v", f.Connected(), f.LostReason())
		}
		time.Sleep(time.Millisecond)
	}
	if got := f.LostReason().Error(); got != "bot 7: the server closed the connection" {
		t.Errorf("LostReason %q, want bot 7's", got)
	}
	for _, l := range tr.links {
		l.Close()
	}
	for f.lost.Load() != 10 {
		if ctx.Err() != nil {
			t.Fatalf("%d of 10 losses counted", f.lost.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if got := f.LostReason().Error(); got != "bot 7: the server closed the connection" {
		t.Errorf("LostReason %q after all were lost, want the first's, bot 7's", got)
	}
	mu.Lock()
	lines := strings.Count(logged.String(), "\n")
	mu.Unlock()
	if lines != logLost+1 {
		t.Errorf("%d log lines for 10 disconnections, want %d and one saying more followed:\n%s", lines, logLost+1, logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A fleet that cannot join says how many bots failed of how many, and
// how many were not tried (it stops starting joins at the first failure).
func TestFleetJoinErrorCounts(t *testing.T) {
	_, err := StartFleet(context.Background(), FleetConfig{Transport: failJoin{}, Users: 40, Parallel: 1})
	if err == nil || !strings.Contains(err.Error(), "1 of 40 bots could not join (39 not tried); first: no server") {
		t.Errorf("StartFleet: %v, want 1 of 40 failed, 39 not tried", err)
	}
}

type failJoin struct{}

func (failJoin) Join(context.Context, Identity, Receiver, bool) (Link, error) {
	return nil, errors.New("no server")
}

// Collect, as Delivery, counts the deliveries of the fleet's own poses
// only: a browser's or another run's bots' poses stamped in the window
// made a bench step's delivery ratio pass 100 % and mixed their
// latencies into the window's.
func TestFleetCollectCountsOwnOnly(t *testing.T) {
	f := &Fleet{cfg: FleetConfig{Prefix: "bot"}, acc: NewAccounts(), scenes: map[string]int{"public/a": 3, "public/b": 1}}
	for i, scene := range []string{"a", "a", "a", "b"} {
		name := fmt.Sprintf("bot%d", i)
		f.bots = append(f.bots, &bot{fleet: f, id: Identity{Index: i, Namespace: "public", Scene: scene, ObjectID: "camera_" + name + "_" + name}, meter: f.acc.NewMeter()})
	}
	at := time.Now().UnixNano()
	f.acc.OpenWindow(time.Unix(0, at-int64(time.Second)), time.Unix(0, at+int64(time.Second)))
	for _, i := range []int{0, 1, 3} {
		f.bots[i].meter.Sent(at)
	}
	deliver := func(to *bot, from string) {
		to.Receive(&Received{From: []byte(from), SentNanos: at, RecvNanos: at + 1000, Size: 100})
	}
	for _, b := range f.bots[:3] {
		deliver(b, f.bots[0].id.ObjectID)
		deliver(b, f.bots[1].id.ObjectID)
		for _, other := range []string{"camera_alice_1234", "camera_botx-1_botx-1", "camera_bot9_bot9", "box1"} {
			deliver(b, other)
		}
		b.ReadDone()
	}
	deliver(f.bots[3], f.bots[3].id.ObjectID)
	f.bots[3].ReadDone()
	r := f.Collect(2 * time.Second)
	if r.Expected != 2*3+1 || r.Delivered != 7 {
		t.Errorf("expected %d delivered %d; want 7 and 7", r.Expected, r.Delivered)
	}
	if n := r.Latency.TotalCount(); n != 7 {
		t.Errorf("%d latencies in the window, want the fleet's 7", n)
	}
	if tot, _ := f.acc.Live(); tot.Received != 3*6+1 {
		t.Errorf("received %d in all, want every message counted (19)", tot.Received)
	}
}
