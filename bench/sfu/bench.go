package benchsfu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/cpuload"
	"github.com/xrealm/xrealm/sfu"
	"github.com/xrealm/xrealm/volumetric"
)

// PaperFullRate is the bitrate of one full-quality stream in the paper's
// setting: 100k points at 30 fps, Draco 11 bits, which this pipeline encodes
// to about 137 KB per frame (docs/sfu.md).
const PaperFullRate = 137_000 * 8 * 30

// Config is one campaign.
type Config struct {
	Exe       string   // the xrealm binary, run inside the namespaces
	Setups    []string // "central", "2sfu", "4sfu"
	Users     []int
	Scenarios []int // 1, 2
	// PaperLinkRate is the paper-scale capacity of every link; the bench
	// divides it by Scale.
	PaperLinkRate float64
	// Delays, one way, of c–s1..c–s4 and of the direct links s3–s1, s4–s2.
	CentralDelays [4]time.Duration
	DirectDelay   time.Duration
	Queue         time.Duration
	Warmup        time.Duration
	Measure       time.Duration
	Clip          bots.ClipConfig
	ClipPath      string
	Estimator     string
	RelaySlots    int           // xrealm sfu --relay-slots: 0 = relayed media on SCTP
	Aligned       bool          // publishers' frame clocks all start at once (BotsConfig.Aligned)
	NoSharedLinks bool          // xrealm sfu --shared-links=false
	RTCPInterval  time.Duration // xrealm sfu --rtcp-interval, and the bots'
	Out           string        // results.jsonl, appended to
	LogDir        string        // the children's stderr, one file per process and run
	Log           *slog.Logger
}

// SFUStats is one SFU process in the window.
type SFUStats struct {
	Site   string  `json:"site"`
	CPU    float64 `json:"cpu_pct"` // % of one core
	RSSMiB float64 `json:"rss_mib"` // maximum sampled
}

// Result is one run.
type Result struct {
	Setup    string  `json:"setup"`
	Scenario int     `json:"scenario"`
	Users    int     `json:"users"`
	Scale    float64 `json:"scale"`
	LinkMbps float64 `json:"link_mbps"`
	// Scenario 1: % of (receiver, publisher) pairs where the receiver
	// completed at least half of the publisher's frames; and the mean
	// share of frames completed.
	PublishersPct float64 `json:"publishers_pct,omitempty"`
	FramesPct     float64 `json:"frames_pct"`
	// Scenario 2: % of the senders' points received.
	PointsPct float64 `json:"points_pct,omitempty"`
	P50ms     float64 `json:"p50_ms"`
	P90ms     float64 `json:"p90_ms"`
	P99ms     float64 `json:"p99_ms"`
	// P99BySite is the p99 of the receivers at each site (where the
	// latency comes from: sites served over a direct link in 2sfu).
	P99BySite map[string]float64 `json:"p99_by_site_ms,omitempty"`
	LossPct   float64            `json:"loss_pct"`
	// NoLatency says that no frame arrived in the window: there is no
	// latency, and P50ms, P90ms and P99ms are 0 for want of one.
	NoLatency bool       `json:"no_latency,omitempty"`
	SFUs      []SFUStats `json:"sfus"`
	// Links: every shaped link direction over the window.
	Links []LinkStat `json:"links,omitempty"`
	// Machine: load average at the window's end and the whole machine's
	// CPU busy share during the window (other users included).
	RelaySlots     int `json:"relay_slots,omitempty"`      // 0: relayed media on SCTP
	RTCPIntervalMs int `json:"rtcp_interval_ms,omitempty"` // 0: 1 s (runs before it was set)
	// BotsCPU is each site's bots process over the window (% of one core).
	BotsCPU     map[string]float64 `json:"bots_cpu_pct,omitempty"`
	Aligned     bool               `json:"aligned,omitempty"` // publishers' frames captured at the same instant
	NoShared    bool               `json:"no_shared_links,omitempty"`
	Load1       float64            `json:"load1"`
	MachineBusy float64            `json:"machine_busy_pct"`
	// Steal is the share of the machine's CPU time the hypervisor took
	// over the window (part of MachineBusy); the Max values are the
	// largest of the window's one-second samples.
	Steal      float64 `json:"steal_pct"`
	MaxBusy1s  float64 `json:"max_busy_1s_pct,omitempty"`
	MaxSteal1s float64 `json:"max_steal_1s_pct,omitempty"`
	// BotLag is each site's bots process's scheduling lag over the window
	// (sfu.LagProbe: how late a 5 ms sleep wakes): CPU starvation of the
	// receivers.
	BotLag map[string]sfu.Quantiles `json:"bot_lag,omitempty"`
	// Hops are each SFU's packet ages in the window (sfu.HopStats, the
	// largest of its 5 s periods): where a packet's latency builds up.
	Hops   map[string]HopSummary `json:"hops,omitempty"`
	Errors []string              `json:"errors,omitempty"`
	At     string                `json:"at"`
}

// HopSummary is one SFU's packet ages (ms after capture) and its own
// scheduling lag over the window: the largest p99 of its statsEvery periods.
type HopSummary struct {
	InLocalP99 float64 `json:"in_local_p99_ms"` // arrival from a publisher at the SFU's site
	InRelayP99 float64 `json:"in_relay_p99_ms"` // arrival over a relay link
	OutP99     float64 `json:"out_p99_ms"`      // handed to every down track and relay
	FanoutP99  float64 `json:"fanout_p99_ms"`   // arrival → handed on
	LagP99     float64 `json:"lag_p99_ms"`
	LagMax     float64 `json:"lag_max_ms"`
	// TailMax is the largest tail queueing delay of the SFU's shared-path
	// groups ("sfu stats" max_tail_ms: p95 per-packet delay from TWCC).
	TailMax float64 `json:"tail_max_ms,omitempty"`
}

// statsEvery is the SFUs' --log-stats period.
const statsEvery = 2 * time.Second

// parseHops reads the "sfu hops" and "sfu stats" lines an SFU logged
// (xrealm sfu --log-stats) for periods that end in (from, to].
func parseHops(log string, from, to time.Time) (HopSummary, bool) {
	var h HopSummary
	found := false
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="sfu hops"`) && !strings.Contains(line, `msg="sfu stats"`) {
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		at, err := time.Parse(time.RFC3339Nano, kv["time"])
		if err != nil || !at.After(from.Add(statsEvery/2)) || at.After(to.Add(statsEvery/2)) {
			continue
		}
		found = found || strings.Contains(line, `msg="sfu hops"`)
		for k, dst := range map[string]*float64{"in_local_p99_ms": &h.InLocalP99, "in_relay_p99_ms": &h.InRelayP99, "out_p99_ms": &h.OutP99,
			"fanout_p99_ms": &h.FanoutP99, "lag_p99_ms": &h.LagP99, "lag_max_ms": &h.LagMax, "max_tail_ms": &h.TailMax} {
			v, _ := strconv.ParseFloat(kv[k], 64)
			*dst = max(*dst, v)
		}
	}
	return h, found
}

// Setups are the SFU setups a campaign can run (Config.Setups).
var Setups = []string{"central", "2sfu", "4sfu"}

// Scenarios are the scenarios a campaign can run (Config.Scenarios): 1,
// everyone sends the base description; 2, 4 senders × 3 descriptions.
var Scenarios = []int{1, 2}

// Validate checks the campaign's settings that are lists of choices or
// counts, so that a campaign with one it cannot run stops before anything
// is set up rather than recording failed runs. It does not look at the
// machine.
func (c *Config) Validate() error {
	if len(c.Setups) == 0 {
		return fmt.Errorf("no setup; want some of %s", strings.Join(Setups, ", "))
	}
	for _, s := range c.Setups {
		if !slices.Contains(Setups, s) {
			return fmt.Errorf("setup %q unknown; want some of %s", s, strings.Join(Setups, ", "))
		}
	}
	if len(c.Scenarios) == 0 {
		return errors.New("no scenario; want some of 1, 2")
	}
	for _, sc := range c.Scenarios {
		if !slices.Contains(Scenarios, sc) {
			return fmt.Errorf("scenario %d unknown; want some of 1 (everyone sends the base description), 2 (4 senders × 3 descriptions)", sc)
		}
	}
	if len(c.Users) == 0 {
		return errors.New("no user count")
	}
	for _, n := range c.Users {
		if n < 1 {
			return fmt.Errorf("user count %d: want at least 1", n)
		}
	}
	est := keys(sfu.DefaultEstimators())
	if !slices.Contains(est, c.Estimator) {
		return fmt.Errorf("estimator %q unknown; want one of %s", c.Estimator, strings.Join(est, ", "))
	}
	switch {
	case !(c.PaperLinkRate > 0 && c.PaperLinkRate <= math.MaxFloat64):
		return fmt.Errorf("link rate %g: want a positive bit rate", c.PaperLinkRate)
	case c.Measure <= 0:
		return fmt.Errorf("measurement window %v: want a positive duration", c.Measure)
	// One setting named at a time, with its flag: the four were listed
	// together, and a user had to find which one was wrong.
	case c.Warmup < 0:
		return fmt.Errorf("warm-up (--warmup) %v: want at least 0", c.Warmup)
	case c.Queue <= 0:
		return fmt.Errorf("queue (--queue) %v: want a duration above 0", c.Queue)
	case c.DirectDelay < 0:
		return fmt.Errorf("direct delay (--direct-delay) %v: want at least 0", c.DirectDelay)
	case c.RTCPInterval <= 0:
		return fmt.Errorf("RTCP interval (--rtcp-interval) %v: want a duration above 0", c.RTCPInterval)
	case c.RelaySlots < 0:
		return fmt.Errorf("relay slots %d: want at least 0", c.RelaySlots)
	case c.Clip.Points < volumetric.Descriptions:
		return fmt.Errorf("clip of %d points (--points): want at least %d", c.Clip.Points, volumetric.Descriptions)
	case c.Clip.Frames < 1:
		return fmt.Errorf("clip of %d frames (--frames): want at least 1", c.Clip.Frames)
	case !(c.Clip.FPS > 0 && c.Clip.FPS <= 1000):
		return fmt.Errorf("clip at %g fps (--fps): want more than 0 and at most 1000", c.Clip.FPS)
	}
	for i, d := range c.CentralDelays {
		if d < 0 {
			return fmt.Errorf("delay of link central–site %d %v: want at least 0", i+1, d)
		}
	}
	return nil
}

// makeDirs creates the directories of the clip cache and the results file.
func (c *Config) makeDirs() error {
	for _, dir := range []string{filepath.Dir(c.ClipPath), filepath.Dir(c.Out)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sfuSites are the sites that run an SFU in each setup.
func sfuSites(setup string) ([]string, error) {
	switch setup {
	case "central":
		return []string{"c"}, nil
	case "2sfu":
		return []string{"s1", "s2"}, nil
	case "4sfu":
		return Sites, nil
	}
	return nil, fmt.Errorf("setup %q: want central, 2sfu or 4sfu", setup)
}

// near is where a site's clients go when it has no SFU: over its direct link.
var near = map[string][]string{"s3": {"s1"}, "s4": {"s2"}}

// Run runs every setup × scenario × user count and appends each result to
// cfg.Out. The topology is created once and removed when Run returns.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.makeDirs(); err != nil {
		return nil, err
	}
	clip, err := bots.CachedClip(ctx, cfg.ClipPath, cfg.Clip)
	if err != nil {
		return nil, err
	}
	scale := PaperFullRate / clip.Bitrate(0, 1, 2)
	rate := cfg.PaperLinkRate / scale
	cfg.Log.Info("clip", "points", clip.Points, "fps", clip.FPS, "base_kbps", clip.Bitrate(0)/1e3, "full_kbps", clip.Bitrate(0, 1, 2)/1e3,
		"scale", scale, "link_mbps", rate/1e6)
	if err := Teardown(); err != nil { // leftovers of an interrupted run
		return nil, err
	}
	topo := Topology{Queue: cfg.Queue}
	for i, s := range Sites {
		topo.Links = append(topo.Links, Link{A: "c", B: s, Rate: rate, Delay: cfg.CentralDelays[i]})
	}
	topo.Links = append(topo.Links, Link{A: "s3", B: "s1", Rate: rate, Delay: cfg.DirectDelay}, Link{A: "s4", B: "s2", Rate: rate, Delay: cfg.DirectDelay})
	defer func() {
		if err := Teardown(); err != nil {
			cfg.Log.Error("teardown", "err", err)
		}
	}()
	if err := topo.Setup(ctx); err != nil {
		return nil, err
	}
	var out []Result
	// Progress: the default campaign is 48 runs.
	total, k := len(cfg.Scenarios)*len(cfg.Setups)*len(cfg.Users), 0
	for _, sc := range cfg.Scenarios {
		for _, setup := range cfg.Setups {
			for _, n := range cfg.Users {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				k++
				cfg.Log.Info("starting", "run", fmt.Sprintf("%d of %d", k, total), "setup", setup, "scenario", sc, "users", n)
				r, err := runOne(ctx, cfg, topo, clip, setup, sc, n)
				if ctx.Err() != nil {
					// Interrupted: the cut run is no result (it was
					// appended, with 'context canceled' among its errors).
					return out, ctx.Err()
				}
				r.Scale, r.LinkMbps = scale, rate/1e6
				if err != nil {
					r.Errors = append(r.Errors, err.Error())
					cfg.Log.Error("run failed", "setup", setup, "scenario", sc, "users", n, "err", err)
				}
				cfg.Log.Info("run", "setup", setup, "scenario", sc, "users", n, "publishers_pct", r.PublishersPct, "points_pct", r.PointsPct,
					"frames_pct", r.FramesPct, "p99_ms", r.P99ms, "loss_pct", r.LossPct, "load1", r.Load1, "busy", r.MachineBusy)
				out = append(out, r)
				if err := appendResult(cfg.Out, r); err != nil {
					return out, err
				}
			}
		}
	}
	return out, nil
}

func appendResult(path string, r Result) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return json.NewEncoder(f).Encode(r)
}

// proc is a child process in a namespace.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func start(ctx context.Context, logDir, ns, name string, args ...string) (*proc, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	// ip netns exec becomes the child (exec, no fork), which keeps this:
	// a killed bench took none of its SFUs, bots and bus with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p, nil
}

// expect waits for a line with the prefix.
func (p *proc) expect(ctx context.Context, prefix string, within time.Duration) (string, error) {
	t := time.NewTimer(within)
	defer t.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return "", fmt.Errorf("%s exited before %q (stderr in %s)", p.name, prefix, p.cmd.Stderr.(*os.File).Name())
			}
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
		case <-t.C:
			return "", fmt.Errorf("%s: no %q within %v", p.name, prefix, within)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func (p *proc) stop() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	_ = p.cmd.Wait()
	p.cmd.Stderr.(*os.File).Close()
}

func runOne(ctx context.Context, cfg Config, topo Topology, clip *bots.Clip, setup string, scenario, n int) (Result, error) {
	r := Result{Setup: setup, Scenario: scenario, Users: n, RelaySlots: cfg.RelaySlots, RTCPIntervalMs: int(cfg.RTCPInterval.Milliseconds()), Aligned: cfg.Aligned, NoShared: cfg.NoSharedLinks, At: time.Now().UTC().Format(time.RFC3339)}
	sites, err := sfuSites(setup)
	if err != nil {
		return r, err
	}
	logDir := filepath.Join(cfg.LogDir, fmt.Sprintf("%s-s%d-n%d", setup, scenario, n))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return r, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var procs []*proc
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()
	busURL := "nats://" + Addr("c") + ":4222"
	bp, err := start(ctx, logDir, NS("c"), "bus", cfg.Exe, "bench", "sfu", "--role", "bus", "--listen", Addr("c")+":4222")
	if err != nil {
		return r, err
	}
	procs = append(procs, bp)
	if _, err := bp.expect(ctx, "ready", 30*time.Second); err != nil {
		return r, err
	}
	mode := "track-selection"
	if scenario == 2 {
		mode = "layers"
	}
	var sfus []*proc
	for i, s := range sites {
		p, err := start(ctx, logDir, NS(s), "sfu-"+s, cfg.Exe, "sfu", "--join", busURL, "--id", strconv.Itoa(i+1), "--site", s,
			"--ice-addrs", Addr(s), "--mode", mode, "--estimator", cfg.Estimator, "--log-level", "info", "--log-stats", statsEvery.String(), "--egress-delays", topo.DelayRoutes(s),
			"--relay-slots", strconv.Itoa(cfg.RelaySlots), "--shared-links="+strconv.FormatBool(!cfg.NoSharedLinks), "--rtcp-interval", cfg.RTCPInterval.String())
		if err != nil {
			return r, err
		}
		procs = append(procs, p)
		sfus = append(sfus, p)
	}
	want := make([]string, len(sites))
	for i := range sites {
		want[i] = strconv.Itoa(i + 1)
	}
	if _, err := bp.expect(ctx, "nodes "+strings.Join(want, ","), 30*time.Second); err != nil {
		return r, err
	}
	var senders []string
	if scenario == 2 {
		for i := 1; i <= min(4, n); i++ {
			senders = append(senders, strconv.Itoa(i)) // users 1..4: one per site
		}
	}
	var botProcs []*proc
	for si, s := range Sites {
		var users []string
		for u := si + 1; u <= n; u += len(Sites) {
			users = append(users, strconv.Itoa(u))
		}
		if len(users) == 0 {
			continue
		}
		args := []string{cfg.Exe, "bench", "sfu", "--role", "bots", "--bus", busURL, "--site", s, "--addr", Addr(s),
			"--bot-users", strings.Join(users, ","), "--n", strconv.Itoa(n), "--clip", cfg.ClipPath, "--estimator", cfg.Estimator,
			"--bot-delays", topo.DelayRoutes(s), "--rtcp-interval", cfg.RTCPInterval.String()}
		if cfg.Aligned {
			args = append(args, "--phase", "aligned")
		}
		if nr := near[s]; len(nr) > 0 {
			args = append(args, "--near", strings.Join(nr, ","))
		}
		if len(senders) > 0 {
			args = append(args, "--senders", strings.Join(senders, ","))
		}
		p, err := start(ctx, logDir, NS(s), "bots-"+s, args...)
		if err != nil {
			return r, err
		}
		procs = append(procs, p)
		botProcs = append(botProcs, p)
	}
	for _, p := range botProcs {
		if _, err := p.expect(ctx, "connected", 3*time.Minute); err != nil {
			return r, err
		}
	}
	from := time.Now().Add(cfg.Warmup)
	to := from.Add(cfg.Measure)
	for _, p := range botProcs {
		fmt.Fprintf(p.stdin, "window %d %d\n", from.UnixMicro(), to.UnixMicro())
	}
	// sample the SFU processes and the machine over the window
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(time.Until(from)):
	}
	cpu0 := make([]float64, len(sfus))
	rss := make([]float64, len(sfus))
	for i, p := range sfus {
		cpu0[i], rss[i] = procUsage(p.cmd.Process.Pid)
	}
	botCPU0 := make([]float64, len(botProcs))
	for i, p := range botProcs {
		botCPU0[i], _ = procUsage(p.cmd.Process.Pid)
	}
	busy0, steal0, total0 := machineCPU()
	links0 := topo.linkCounters(ctx)
	backlog := map[string]uint64{}
	tick := time.NewTicker(time.Second)
	pb, ps, pt := busy0, steal0, total0
	for time.Now().Before(to) {
		select {
		case <-ctx.Done():
			tick.Stop()
			return r, ctx.Err()
		case <-tick.C:
		}
		for i, p := range sfus {
			_, m := procUsage(p.cmd.Process.Pid)
			rss[i] = max(rss[i], m)
		}
		b, st, t := machineCPU()
		if t > pt {
			r.MaxBusy1s = max(r.MaxBusy1s, 100*(b-pb)/(t-pt))
			r.MaxSteal1s = max(r.MaxSteal1s, 100*(st-ps)/(t-pt))
		}
		pb, ps, pt = b, st, t
		for k, c := range topo.linkCounters(ctx) {
			backlog[k] = max(backlog[k], c.backlog)
		}
	}
	tick.Stop()
	r.Links = linkStats(links0, topo.linkCounters(ctx), backlog, topo.Links[0].Rate, cfg.Measure)
	busy1, steal1, total1 := machineCPU()
	if total1 > total0 {
		r.MachineBusy = 100 * (busy1 - busy0) / (total1 - total0)
		r.Steal = 100 * (steal1 - steal0) / (total1 - total0)
	}
	r.Load1 = load1()
	r.BotsCPU = map[string]float64{}
	for i, p := range botProcs {
		c1, _ := procUsage(p.cmd.Process.Pid)
		r.BotsCPU[strings.TrimPrefix(p.name, "bots-")] = 100 * (c1 - botCPU0[i]) / cfg.Measure.Seconds()
	}
	for i, p := range sfus {
		c1, m := procUsage(p.cmd.Process.Pid)
		r.SFUs = append(r.SFUs, SFUStats{Site: sites[i], CPU: 100 * (c1 - cpu0[i]) / cfg.Measure.Seconds(), RSSMiB: max(rss[i], m)})
	}
	var results []BotResult
	siteHist := map[string]*hdrhistogram.Histogram{}
	for _, p := range botProcs {
		site := strings.TrimPrefix(p.name, "bots-")
		for {
			l, err := p.expect(ctx, "", 30*time.Second)
			if err != nil {
				return r, err
			}
			if l == "done" {
				break
			}
			if rest, ok := strings.CutPrefix(l, "lag "); ok {
				var q sfu.Quantiles
				if err := json.Unmarshal([]byte(rest), &q); err == nil {
					if r.BotLag == nil {
						r.BotLag = map[string]sfu.Quantiles{}
					}
					r.BotLag[site] = q
				}
				continue
			}
			if rest, ok := strings.CutPrefix(l, "result "); ok {
				var br BotResult
				if err := json.Unmarshal([]byte(rest), &br); err != nil {
					return r, fmt.Errorf("%s: %w", p.name, err)
				}
				results = append(results, br)
				if br.Stats.Latency != nil {
					if siteHist[site] == nil {
						siteHist[site] = bots.NewHistogram()
					}
					siteHist[site].Merge(hdrhistogram.Import(br.Stats.Latency))
				}
			}
		}
	}
	r.Hops = map[string]HopSummary{}
	for i, p := range sfus {
		// wait for the SFUs' period that ends after the window
		time.Sleep(time.Until(to.Add(statsEvery + 500*time.Millisecond)))
		if b, err := os.ReadFile(p.cmd.Stderr.(*os.File).Name()); err == nil {
			if h, ok := parseHops(string(b), from, to); ok {
				r.Hops[sites[i]] = h
			}
		}
	}
	summarise(&r, clip, results)
	r.P99BySite = map[string]float64{}
	for site, h := range siteHist {
		if h.TotalCount() == 0 {
			continue // no latency at this site, not one of 0 ms
		}
		r.P99BySite[site] = float64(h.ValueAtQuantile(99)) / 1000
	}
	return r, nil
}

// summarise computes the run's metrics from the bots' results.
func summarise(r *Result, clip *bots.Clip, results []BotResult) {
	sent := map[uint32]uint64{}
	full := map[uint32]bool{}
	for _, b := range results {
		if len(b.Publish) > 0 {
			sent[b.ID] = b.Stats.Sent
			full[b.ID] = len(b.Publish) == 3
		}
	}
	hist := bots.NewHistogram()
	var pairs, received, packets, expected float64
	var frames, framesWant, points, pointsWant float64
	for _, b := range results {
		if b.Stats.Latency != nil {
			hist.Merge(hdrhistogram.Import(b.Stats.Latency))
		}
		packets += float64(b.Stats.Packets)
		expected += float64(b.Stats.Expected)
		for p, s := range sent {
			if p == b.ID || s == 0 {
				continue
			}
			d := b.Stats.Descs[p]
			pairs++
			frames += float64(min(d[0], s))
			framesWant += float64(s)
			if float64(d[0]) >= 0.5*float64(s) {
				received++
			}
			for k := range d {
				points += float64(min(d[k], s)) * float64(clip.DescSizes[k])
			}
			if full[p] {
				pointsWant += float64(s) * float64(clip.Points)
			}
		}
	}
	if pairs > 0 {
		r.PublishersPct = 100 * received / pairs
		r.FramesPct = 100 * frames / framesWant
	}
	if r.Scenario == 2 {
		r.PublishersPct = 0
		if pointsWant > 0 {
			r.PointsPct = 100 * points / pointsWant
		}
	}
	if expected > 0 {
		r.LossPct = 100 * max(0, 1-packets/expected)
	}
	r.NoLatency = hist.TotalCount() == 0
	ms := func(q float64) float64 { return float64(hist.ValueAtQuantile(q)) / 1000 }
	r.P50ms, r.P90ms, r.P99ms = ms(50), ms(90), ms(99)
}

// procUsage returns a process's CPU seconds and resident MiB.
func procUsage(pid int) (cpu, rssMiB float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i > 0 {
		f := strings.Fields(s[i+2:])
		if len(f) > 21 {
			ut, _ := strconv.ParseFloat(f[11], 64)
			st, _ := strconv.ParseFloat(f[12], 64)
			rss, _ := strconv.ParseFloat(f[21], 64)
			cpu = (ut + st) / 100 // USER_HZ
			rssMiB = rss * float64(os.Getpagesize()) / (1 << 20)
		}
	}
	return cpu, rssMiB
}

// machineCPU returns busy (steal included), stolen and total CPU seconds
// of the whole machine (cpuload.Read).
func machineCPU() (busy, steal, total float64) {
	t, err := cpuload.Read()
	if err != nil {
		return 0, 0, 0
	}
	return t.Busy + t.Steal, t.Steal, t.Total()
}

func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// ReadResults reads a results.jsonl file.
func ReadResults(path string) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Result
	dec := json.NewDecoder(f)
	for {
		var r Result
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return out, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, r)
	}
}
