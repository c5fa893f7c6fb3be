package bots

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/sfu"
)

func TestSeqWindow(t *testing.T) {
	tests := []struct {
		name            string
		seqs            []uint16
		fresh, advanced uint64
	}{
		{"in order", []uint16{10, 11, 12}, 3, 3},
		{"gap then retransmission", []uint16{10, 11, 13, 12}, 4, 4},
		{"duplicate", []uint16{10, 11, 11}, 2, 2},
		{"wrap", []uint16{65534, 65535, 0, 1}, 4, 4},
	}
	for _, tc := range tests {
		var w seqWindow
		var fresh, adv uint64
		for _, s := range tc.seqs {
			f, a := w.add(s)
			if f {
				fresh++
			}
			adv += a
		}
		if fresh != tc.fresh || adv != tc.advanced {
			t.Errorf("%s: fresh %d advanced %d, want %d %d", tc.name, fresh, adv, tc.fresh, tc.advanced)
		}
	}
}

// TestVolumetricBots: a publisher bot replays a clip through an SFU node to
// a receiver bot, which completes descriptions in its window.
func TestVolumetricBots(t *testing.T) {
	b, err := bus.Start(bus.Config{DataDir: t.TempDir(), Name: "vbots", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	conn := func(name string) *nats.Conn {
		nc, err := b.Connect(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	lo := []string{"127.0.0.1"}
	node, err := sfu.Start(context.Background(), sfu.Config{Logger: slog.New(slog.DiscardHandler), NC: conn("node"), ID: "1", Site: "a", Manager: true, ICEAddresses: lo,
		Registerer: prometheus.NewRegistry(), Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	// A clip of random bytes: the bots never decode, so Draco is not needed here.
	clip := &Clip{Points: 1000, FPS: 30, DescSizes: [3]int{150, 250, 600}}
	for i := 0; i < 3; i++ {
		clip.Frames = append(clip.Frames, [3][]byte{make([]byte, 900), make([]byte, 1500), make([]byte, 3600)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(node.ID()) > 0 { // the manager learns the node from its first heartbeat
		if _, err := sfu.RequestJoin(ctx, conn("probe"), sfu.JoinRequest{Session: "probe", Client: "probe"}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	pub, err := DialVolumetric(ctx, VolumetricConfig{NC: conn("p"), Session: "v", Client: "p", ID: 5, Site: "a", ICEAddresses: lo, Clip: clip, Publish: []int{0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := DialVolumetric(ctx, VolumetricConfig{NC: conn("r"), Session: "v", Client: "r", ID: 6, Site: "a", ICEAddresses: lo, Clip: clip, Slots: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	defer rcv.Close()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go pub.Run(rctx)
	go rcv.Run(rctx)
	start := time.Now()
	rcv.OpenWindow(start, start.Add(time.Hour))
	pub.OpenWindow(start, start.Add(time.Hour))
	for {
		st := rcv.Stats()
		if d := st.Descs[5]; d[0] >= 5 && d[1] >= 5 && d[2] >= 5 {
			if st.Packets == 0 || st.Expected < st.Packets || hdrhistogram.Import(st.Latency).TotalCount() == 0 {
				t.Fatalf("stats %+v", st)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("receiver stats %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pub.Stats().Sent == 0 {
		t.Fatal("publisher counted no frames sent")
	}
}
