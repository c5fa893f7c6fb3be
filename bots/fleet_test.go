package bots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	if r.Sent < int64(users*10) || r.Expected != (r.Sent+r.Missed)*int64(perScene) {
		t.Errorf("sent %d missed %d expected %d: want about %d sent, each due to %d members", r.Sent, r.Missed, r.Expected, users*20, perScene)
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
