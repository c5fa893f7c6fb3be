package bots

import (
	"context"
	"encoding/json"
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

// volumetricNode starts a bus and an SFU node with the manager; it returns
// a connector to the bus and a clip of random bytes (the bots never
// decode, so Draco is not needed).
func volumetricNode(t *testing.T, ctx context.Context) (conn func(name string) *nats.Conn, clip *Clip) {
	t.Helper()
	b, err := bus.Start(bus.Config{DataDir: t.TempDir(), Name: "vbots", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	conn = func(name string) *nats.Conn {
		nc, err := b.Connect(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	node, err := sfu.Start(context.Background(), sfu.Config{Logger: slog.New(slog.DiscardHandler), NC: conn("node"), ID: "1", Site: "a", Manager: true, ICEAddresses: loopback,
		Registerer: prometheus.NewRegistry(), Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	clip = &Clip{Points: 1000, FPS: 30, DescSizes: [3]int{150, 250, 600}}
	for i := 0; i < 3; i++ {
		clip.Frames = append(clip.Frames, [3][]byte{make([]byte, 900), make([]byte, 1500), make([]byte, 3600)})
	}
	for { // the manager learns the node from its first heartbeat
		if _, err := sfu.RequestJoin(ctx, conn("probe"), sfu.JoinRequest{Session: "probe", Client: "probe"}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the manager never placed a client on the node")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return conn, clip
}

var loopback = []string{"127.0.0.1"}

// TestVolumetricBots: a publisher bot replays a clip through an SFU node to
// a receiver bot, which completes descriptions in its window.
func TestVolumetricBots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, clip := volumetricNode(t, ctx)
	pub, err := DialVolumetric(ctx, VolumetricConfig{NC: conn("p"), Session: "v", Client: "p", ID: 5, Site: "a", ICEAddresses: loopback, Clip: clip, Publish: []int{0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := DialVolumetric(ctx, VolumetricConfig{NC: conn("r"), Session: "v", Client: "r", ID: 6, Site: "a", ICEAddresses: loopback, Clip: clip, Slots: 3})
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

// TestVolumetricPoseResent: a bot with a pose sends it again while it
// runs, so that a node that comes after its join (here a listener that
// subscribes to the session's poses then) learns where it is; a new pose
// (SetPose) is sent at once. It fails if the pose goes out only once, at
// the join: the listener then sees none.
func TestVolumetricPoseResent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, clip := volumetricNode(t, ctx)
	pose := sfu.Pose{Position: [3]float64{1, 1.6, -2}, Forward: [3]float64{0, 0, 1}, FOV: 1.5}
	pub, err := DialVolumetric(ctx, VolumetricConfig{NC: conn("p"), Session: "v", Client: "p", ID: 5, Site: "a", ICEAddresses: loopback,
		Clip: clip, Publish: []int{0}, Pose: &pose, PoseEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// the listener comes after the join's pose
	poses := make(chan sfu.PoseMessage, 64)
	sub, err := conn("late").Subscribe("sfu.poses.v", func(m *nats.Msg) {
		var pm sfu.PoseMessage
		if json.Unmarshal(m.Data, &pm) == nil && pm.Client == "p" {
			select {
			case poses <- pm:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go pub.Run(rctx)
	waitPose := func(what string, want sfu.Pose) {
		t.Helper()
		for {
			select {
			case pm := <-poses:
				if pm.Pose.Position == want.Position {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no pose message for %s at %v", what, want.Position)
			}
		}
	}
	waitPose("the pose sent again", pose)
	moved := pose
	moved.Position = [3]float64{4, 1.6, 0}
	if err := pub.SetPose(ctx, moved); err != nil {
		t.Fatal(err)
	}
	waitPose("the new pose", moved)
	// and it is the one sent again from then on
	for range 3 {
		select {
		case pm := <-poses:
			if pm.Pose.Position != moved.Position {
				t.Fatalf("pose sent after SetPose(%v): %v", moved.Position, pm.Pose.Position)
			}
		case <-ctx.Done():
			t.Fatal("the new pose was not sent again")
		}
	}
}
