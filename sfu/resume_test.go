package sfu

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/sfu/allocator"
)

// carriedKeys returns the tracks the peer's slots forward, sorted.
func (p *peer) carriedKeys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keys []string
	for _, s := range p.slots {
		if s.src != nil && s.dt.Active() {
			keys = append(keys, s.src.info.Key())
		}
	}
	slices.Sort(keys)
	return keys
}

// TestPausedVideoResumes: a subscriber's link narrows below the video it
// is sent, so its estimate falls and the video is paused (its audio, about
// 45 kbit/s, flows alone); then the link is freed, and the video must come
// back, within 15 s, and stay (not only for a probe). Real peers, the
// node's real estimators (chosen by name, as a client does), and a
// bottleneck on the subscriber's side of the path (shapeNet).
//
// Before probing (allocator.Prober), GCC recovered only as fast as it
// grows (8 % a second: 11-22 s for a 500 kbit/s video), and after the
// link had also narrowed below the audio for 3 s its delay-based estimate
// stayed at its 100 kbit/s minimum in four runs of five, for the 60 s
// watched in three (pion caps an increase in its near-convergence state
// at 1.5 × the rate received, the audio's). Before paused tracks stopped answering NACKs
// (downtrack.HandleRTCP), a 3 s outage held the loss-based estimate at its
// minimum for 12 s after the link was freed.
func TestPausedVideoResumes(t *testing.T) {
	for _, tc := range []struct {
		estimator string
		narrow    []int64 // bit/s: the first until the video is paused, then each for 3 s
		// steady: on the narrow link the video is never forwarded
		// within the budget again (only for probes, which fail)
		steady bool
		skip   string // why the case is skipped
	}{
		{"gcc", []int64{250_000, 250_000, 250_000}, false, ""},
		{"gcc", []int64{250_000, 30_000}, false, ""},
		{"gcc", []int64{20_000, 20_000}, false, ""},
		{"hera", []int64{250_000, 30_000}, true, ""},
		// Before hera/bwe held its estimate while the sender is
		// application-limited, audio alone on this link let it climb to
		// 891 kbit/s: the video resumed into the congested link, paused and
		// resumed again.
		// While hera/bwe found the sender limited only over the last
		// second, it did so up to 1 s after the video was paused, and
		// meanwhile the queue drained and the window's rate (cwnd over
		// the RTT) rose above the video: 4 resumes within the budget in
		// 6 s. Since it also looks at the last 100 and 200 ms, none came
		// from that in 3 runs, but a probe can still be kept.
		{"hera", []int64{250_000, 250_000, 250_000}, true, "in 1 run of 3 two probes on this link were kept (2 resumes within the budget), probably because once the probed video makes the sender no longer application-limited, hera/bwe's target is its held window over an RTT measured while the path was idle (several Mbit/s on loopback) until the probe's queue shows in the feedback, and the prober keeps a floor the first time the estimate covers it"},
	} {
		t.Run(fmt.Sprintf("%s-%v", tc.estimator, tc.narrow), func(t *testing.T) {
			if tc.skip != "" {
				t.Skip(tc.skip)
			}
			testPausedVideoResumes(t, tc.estimator, tc.narrow, tc.steady)
		})
	}
}

func testPausedVideoResumes(t *testing.T, estimator string, narrow []int64, steady bool) {
	c := startCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pub := dialAVPublisher(ctx, t, c)
	publishAudio(ctx, pub)
	go publishVideo(ctx, pub.Tracks["cam"], 2000) // about 500 kbit/s
	link, err := newShapeNet(100 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := Dial(ctx, ClientConfig{NC: c.conn(t, "sub"), Session: "s1", Client: "bob", Site: "a", ICEAddresses: loopback,
		Net: link, Estimator: estimator, AudioSlots: 1, VideoSlots: 1, OnTrack: (&kindBytes{}).onTrack}) // tracks read: feedback comes only for what is read
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	n := c.nodes[0]
	p := n.peerOf("s1", "bob")
	explain := func() string {
		p.mu.Lock()
		tail, loss := p.link.tail, p.link.loss
		p.mu.Unlock()
		return p.explain(n) + fmt.Sprintf(" queueing delay p95 %v, loss %.3f; dropped at the bottleneck %d; probes started %d, kept %d, failed %d", tail, loss, link.dropped.Load(),
			n.probes[allocator.ProbeStarted].Load(), n.probes[allocator.ProbeKept].Load(), n.probes[allocator.ProbeFailed].Load())
	}
	both := []string{"s1/alice/cam", "s1/alice/mic"}
	// back: the video is forwarded within the budget, not for a probe
	back := func() bool {
		p.mu.Lock()
		within := p.prober.Probing() == "" && p.allocated <= p.budget
		p.mu.Unlock()
		return within && slices.Equal(p.carriedKeys(), both)
	}
	waitForExplained(t, "bob's slots to carry alice's audio and video", back, explain)
	link.setRate(narrow[0])
	waitForExplained(t, "bob's video to be paused on a narrow link", func() bool {
		return slices.Equal(p.carriedKeys(), []string{"s1/alice/mic"})
	}, explain)
	// the audio flows alone, but for probes; the video's pauses and
	// resumes are counted, and its resumes within the budget (not for a
	// probe)
	pauses, resumes, withinBudget := 0, 0, 0
	carried, wasBack := false, false
	for _, r := range narrow[1:] {
		link.setRate(r)
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			c, b := slices.Equal(p.carriedKeys(), both), back()
			switch {
			case c && !carried:
				resumes++
			case !c && carried:
				pauses++
			}
			if b && !wasBack {
				withinBudget++
			}
			carried, wasBack = c, b
		}
	}
	t.Logf("before the link is freed: video resumed %d times (%d within the budget), paused %d: %s", resumes, withinBudget, pauses, explain())
	if steady && withinBudget > 0 {
		t.Errorf("bob's video was forwarded within his budget %d times on a %d bit/s link (resumed %d times, paused %d): %s", withinBudget, narrow[len(narrow)-1], resumes, pauses, explain())
	}
	// a probe on the narrow link congested it: it failed
	if k := n.probes[allocator.ProbeKept].Load(); k > 0 {
		t.Errorf("%d probes kept their floor on a %d bit/s link: %s", k, narrow[len(narrow)-1], explain())
	}
	link.setRate(0)
	freed := time.Now()
	for !slices.Equal(p.carriedKeys(), both) {
		if time.Since(freed) > 15*time.Second {
			t.Fatalf("bob's video still paused 15 s after his link was freed: %s", explain())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("video forwarded again %v after the link was freed: %s", time.Since(freed).Round(time.Millisecond), explain())
	// a probe may have brought it back: it must end with the video kept
	// (GCC grows by 8 % a second at most: a probe from its minimum lasts
	// up to 30 s), and the video paused again on the free link at most
	// once: a probe that fails there and is tried again (on a loaded
	// machine the estimators can read the CPU's delays as queueing: 2 of
	// 3 package runs beside a CPU hog failed on one re-pause), not one
	// that flaps
	repaused, paused := 0, false
	for !back() {
		now := !slices.Equal(p.carriedKeys(), both)
		if now && !paused {
			repaused++
			t.Logf("bob's video paused again on his free link (%d): %s", repaused, explain())
			if repaused > 1 {
				t.Fatalf("bob's video paused again %d times on his free link: %s", repaused, explain())
			}
		}
		paused = now
		if time.Since(freed) > 45*time.Second {
			t.Fatalf("bob's video not kept 45 s after his link was freed: %s", explain())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("video kept %v after the link was freed: %s", time.Since(freed).Round(time.Millisecond), explain())
	// the probes are on the node's metrics
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{n: n})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() == "xrealm_sfu_probes_total" {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" {
						got[l.GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	for ev, r := range map[allocator.ProbeEvent]string{allocator.ProbeStarted: "started", allocator.ProbeKept: "kept", allocator.ProbeFailed: "failed"} {
		if want := float64(n.probes[ev].Load()); got[r] != want {
			t.Errorf("xrealm_sfu_probes_total{result=%q} = %v, want %v (%v)", r, got[r], want, got)
		}
	}
}

// dialAVPublisher joins alice at site a of session s1 publishing a
// microphone ("mic", Opus) and a camera ("cam", VP8); the test closes it.
func dialAVPublisher(ctx context.Context, t *testing.T, c *cluster) *Client {
	t.Helper()
	pub, err := Dial(ctx, ClientConfig{NC: c.conn(t, "pub"), Session: "s1", Client: "alice", Site: "a", ICEAddresses: loopback,
		Publish: []PublishTrack{{ID: "mic", Mime: webrtc.MimeTypeOpus}, {ID: "cam", Mime: webrtc.MimeTypeVP8}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}
