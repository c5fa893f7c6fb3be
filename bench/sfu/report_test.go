package benchsfu

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/volumetric"
)

func TestSummarise(t *testing.T) {
	clip := &bots.Clip{Points: 1000, DescSizes: [3]int{150, 250, 600}}
	lat := func(us ...int64) *bots.VolumetricStats {
		h := bots.NewHistogram()
		for _, v := range us {
			_ = h.RecordValue(v)
		}
		return &bots.VolumetricStats{Latency: h.Export()}
	}
	type D = [volumetric.Descriptions]uint64
	tests := []struct {
		name     string
		scenario int
		results  []BotResult
		check    func(r Result) bool
	}{
		{"scenario 1: one of two publishers received", 1, []BotResult{
			{ID: 1, Publish: []int{0}, Stats: bots.VolumetricStats{Sent: 10, Descs: map[uint32]D{2: {10}}, Packets: 9, Expected: 10, Latency: lat(10000).Latency}},
			{ID: 2, Publish: []int{0}, Stats: bots.VolumetricStats{Sent: 10, Descs: map[uint32]D{1: {2}}, Packets: 1, Expected: 10, Latency: lat(30000).Latency}},
		}, func(r Result) bool {
			return r.PublishersPct == 50 && r.FramesPct == 60 && r.LossPct == 50 && r.P99ms >= 29 && r.P99ms <= 31
		}},
		{"scenario 2: points of full senders", 2, []BotResult{
			{ID: 1, Publish: []int{0, 1, 2}, Stats: bots.VolumetricStats{Sent: 10}},
			{ID: 5, Stats: bots.VolumetricStats{Descs: map[uint32]D{1: {10, 10, 0}}}},
		}, func(r Result) bool { return r.PointsPct == 40 && r.PublishersPct == 0 }},
	}
	for _, tc := range tests {
		r := Result{Scenario: tc.scenario}
		summarise(&r, clip, tc.results)
		if !tc.check(r) {
			t.Errorf("%s: %+v", tc.name, r)
		}
	}
	var b bytes.Buffer
	Tables(&b, []Result{{Setup: "central", Scenario: 1, Users: 8, PublishersPct: 50}, {Setup: "4sfu", Scenario: 1, Users: 8, PublishersPct: 100}})
	if !strings.Contains(b.String(), "| 8 | 50.0") || !strings.Contains(b.String(), "| central | 4sfu |") {
		t.Errorf("table:\n%s", b.String())
	}
}

// A run where no frame arrived has no latency: its empty histogram gave
// p50 / p90 / p99 of 0 ms, which the table showed as the best latency of
// all and the p99 plot drew at 0.
func TestNothingReceivedHasNoLatency(t *testing.T) {
	clip := &bots.Clip{Points: 1000, DescSizes: [3]int{150, 250, 600}}
	r := Result{Setup: "central", Scenario: 1, Users: 2}
	summarise(&r, clip, []BotResult{
		{ID: 1, Publish: []int{0}, Stats: bots.VolumetricStats{Sent: 10, Expected: 10}},
		{ID: 2, Publish: []int{0}, Stats: bots.VolumetricStats{Sent: 10, Expected: 10}},
	})
	if !r.NoLatency {
		t.Fatalf("a run that received nothing: %+v, want NoLatency", r)
	}
	var b bytes.Buffer
	Tables(&b, []Result{r})
	if strings.Contains(b.String(), "0 / 0 / 0") || !strings.Contains(b.String(), "| 2 | nothing received |") {
		t.Errorf("table:\n%s", b.String())
	}
	dir := t.TempDir()
	if err := Plots(dir, []Result{r}); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "scenario1-p99.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(svg), "<circle") {
		t.Errorf("the p99 plot draws a point for a run with no latency:\n%s", svg)
	}
}

func TestParseHops(t *testing.T) {
	from := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	to := from.Add(20 * time.Second)
	line := func(at time.Time, inRelay, lag string) string {
		return "time=" + at.Format(time.RFC3339Nano) + ` level=INFO msg="sfu hops" in_local_p50_ms=1 in_local_p99_ms=3 in_relay_p50_ms=20 in_relay_p99_ms=` + inRelay +
			" out_p99_ms=40 fanout_p99_ms=0.5 fanout_max_ms=2 lag_p99_ms=" + lag + " lag_max_ms=9\n"
	}
	tests := []struct {
		name string
		log  string
		want HopSummary
		ok   bool
	}{
		{"none", `time=2026-11-22T09:00:05Z level=INFO msg="sfu stats" clients=3` + "\n", HopSummary{}, false},
		{"before the window", line(from.Add(-time.Second), "900", "1"), HopSummary{}, false},
		{"largest of the periods in the window", line(from.Add(2*time.Second), "30", "1") + line(from.Add(10*time.Second), "80", "4") + line(to.Add(5*time.Second), "999", "1"),
			HopSummary{InLocalP99: 3, InRelayP99: 80, OutP99: 40, FanoutP99: 0.5, LagP99: 4, LagMax: 9}, true},
		{"tail delay from the stats lines", line(from.Add(2*time.Second), "30", "1") +
			`time=2026-11-22T09:00:04Z level=INFO msg="sfu stats" clients=3 max_tail_ms=27` + "\n" +
			`time=2026-11-22T09:00:06Z level=INFO msg="sfu stats" clients=3 max_tail_ms=41` + "\n",
			HopSummary{InLocalP99: 3, InRelayP99: 30, OutP99: 40, FanoutP99: 0.5, LagP99: 1, LagMax: 9, TailMax: 41}, true},
	}
	for _, tc := range tests {
		got, ok := parseHops(tc.log, from, to)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: parseHops = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestSVGLinesLabelsEveryX: setups that ran different user counts each
// get their counts labelled on the x axis; the labels came from
// whichever series the map gave first, so the others' counts went
// unlabelled (and which ones changed from run to run).
func TestSVGLinesLabelsEveryX(t *testing.T) {
	series := map[string][][2]float64{
		"central": {{8, 1}, {16, 2}},
		"2sfu":    {{16, 1}, {32, 2}},
		"4sfu":    {{64, 3}},
	}
	for range 20 { // map order varies
		svg := svgLines("t", "users", "ms", []string{"central", "2sfu", "4sfu"}, series)
		for _, u := range []string{"8", "16", "32", "64"} {
			if n := strings.Count(svg, `text-anchor="middle">`+u+`</text>`); n != 1 {
				t.Fatalf("x label %s appears %d times, want once:\n%s", u, n, svg)
			}
		}
	}
}

// TestPlotsReplaceAtomically: Plots writes each SVG to a temporary file
// and renames it over the old one, so that a reader (or a crash) never
// sees half a plot, and leaves no temporary file behind; it wrote in
// place with os.WriteFile. A plot that cannot be written names its file.
func TestPlotsReplaceAtomically(t *testing.T) {
	dir := t.TempDir()
	rs := []Result{{Setup: "central", Scenario: 1, Users: 8, PublishersPct: 100, P99ms: 5}}
	old := filepath.Join(dir, "scenario1-p99.svg")
	if err := os.WriteFile(old, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A hard link to the old file keeps its contents if the new one is
	// renamed over it, and would see them change if written in place.
	keep := filepath.Join(dir, "keep")
	if err := os.Link(old, keep); err != nil {
		t.Fatal(err)
	}
	if err := Plots(dir, rs); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(keep); string(b) != "old" {
		t.Errorf("the old plot was written in place: its other link holds %.40q", b)
	}
	if b, _ := os.ReadFile(old); !strings.HasPrefix(string(b), "<svg") {
		t.Errorf("%s holds %.40q, want the new plot", old, b)
	}
	if fi, err := os.Stat(old); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: %v, mode %v, want 0644", old, err, fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".svg") && e.Name() != "keep" {
			t.Errorf("%s left behind", e.Name())
		}
	}
	if err := Plots(filepath.Join(dir, "none"), rs); err == nil || !strings.Contains(err.Error(), "scenario1-publishers.svg") {
		t.Errorf("Plots into a missing directory: %v, want the plot named", err)
	}
}
