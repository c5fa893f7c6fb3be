// Package benchcc runs the Hera evaluation: bulk TCP flows of several
// congestion controls through the trace-driven emulator (package netem),
// measuring throughput, link utilisation and one-way queueing delay from the
// emulator's per-packet log, and Jain's fairness index among competing flows.
package benchcc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/xrealm/xrealm/bench/tmpfiles"

	"github.com/xrealm/xrealm/cc"
	"github.com/xrealm/xrealm/hera"
	"github.com/xrealm/xrealm/netem"
)

// Config is one benchmark campaign.
type Config struct {
	Traces       []string // trace files; each is used for both directions
	Algos        []string // congestion controls by xrealm name (cubic, bbr, reno, hera, hera-paper)
	Duration     time.Duration
	Seeds        []uint64
	Delay        time.Duration
	QueuePackets int
	Flows        int // competing flows per run; 1 for the throughput/delay runs
	// QoE adds one app-level stream of the same algorithm next to the bulk
	// flows: QoEFPS frames per second of QoERate/8/QoEFPS bytes each, like
	// a video call sharing the link with a download (see QoEResult).
	QoE     bool
	QoERate float64 // bit/s; 0 means 20 Mbit/s
	QoEFPS  int     // 0 means 60
	OutDir  string
	// HeraParams overrides the default parameters of "hera" when set, and
	// HeraArgs says how (the flags of xrealm cc load that set them): hera's
	// results carry it, so that they are not taken for default hera's.
	HeraParams *hera.Params
	HeraArgs   string
	Logger     *slog.Logger
	// TCPInfoDir, if set, gets one file per run (TRACE-ALGO-SEED.tcpinfo)
	// with flow 0's TCP_INFO every 10 ms: seconds since the start,
	// snd_cwnd, srtt (µs), min_rtt (µs), pacing rate and delivery rate
	// (Mbit/s; pacing +Inf when the flow is not paced), unacked segments,
	// total retransmits and the CA state. Run creates the directory.
	TCPInfoDir string
}

// Result is one run.
type Result struct {
	Trace string `json:"trace"`
	Algo  string `json:"algo"`
	// HeraArgs is a hera run's parameters that differ from the defaults,
	// as flags of xrealm cc load (bench cc --hera-args); empty for the
	// defaults and the other algorithms.
	HeraArgs       string     `json:"hera_args,omitempty"`
	Seed           uint64     `json:"seed"`
	Flows          int        `json:"flows"`
	DurationS      float64    `json:"duration_s"`
	ThroughputMbps float64    `json:"throughput_mbps"` // delivered by the link, IP bytes
	CapacityMbps   float64    `json:"capacity_mbps"`
	Utilisation    float64    `json:"utilisation"`
	MeanQDelayMs   float64    `json:"mean_qdelay_ms"`
	P95QDelayMs    float64    `json:"p95_qdelay_ms"`
	Drops          uint64     `json:"drops"`
	GoodputMbps    []float64  `json:"goodput_mbps"` // per flow, at the receiver
	JainMean       float64    `json:"jain_mean,omitempty"`
	JainSeries     []*float64 `json:"jain_series,omitempty"` // per second; null where the link delivered nothing
	// RateSeries is the receivers' total goodput per second (Mbit/s) over
	// the measurement window.
	RateSeries []float64  `json:"rate_series_mbps,omitempty"`
	UpLate     uint64     `json:"up_late"`
	DownLate   uint64     `json:"down_late"`
	Valid      bool       `json:"valid"`
	Invalid    string     `json:"invalid,omitempty"`
	QoE        *QoEResult `json:"qoe,omitempty"`
	// Load1 is the machine's 1-minute load average when the run ended
	// (other engineers share the machine).
	Load1 float64 `json:"load1,omitempty"`
}

// load1 reads the 1-minute load average, 0 if unavailable.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var v float64
	fmt.Sscan(string(b), &v)
	return v
}

// QoEResult describes the app-level stream of a run. A frame's latency is
// from its scheduled send time (frame index / fps after the stream starts)
// to the arrival of its last byte at the receiving application, so it
// includes waiting in the sender's socket buffer as well as the network.
// Frames are never skipped: a frame that cannot be written on time delays
// the next ones, as in a stream without rate adaptation. Only frames
// scheduled from 2 s to 1 s before the end count (those of the last second
// may still be in flight when the run stops).
type QoEResult struct {
	TargetMbps      float64 `json:"target_mbps"`
	FPS             int     `json:"fps"`
	RateMbps        float64 `json:"rate_mbps"`        // frame bytes delivered per second of the window
	FramesScheduled int     `json:"frames_scheduled"` // due in the window, reached by the sender or not
	FramesDelivered int     `json:"frames_delivered"`
	LatMeanMs       float64 `json:"lat_mean_ms"`
	LatP50Ms        float64 `json:"lat_p50_ms"`
	LatP95Ms        float64 `json:"lat_p95_ms"`
	LatP99Ms        float64 `json:"lat_p99_ms"`
	Over100msPct    float64 `json:"over_100ms_pct"` // of scheduled frames: late or never delivered
	// LatQuantilesMs are the latencies at quantiles 0.01, 0.02, ..., 1.00.
	LatQuantilesMs []float64 `json:"lat_quantiles_ms"`
}

// Run runs every trace × algorithm × seed and appends results to
// OutDir/results.jsonl. It loads hera and hera-paper when needed and
// unloads what it loaded.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Flows < 1 {
		cfg.Flows = 1
	}
	if cfg.Flows > MaxFlows {
		return nil, fmt.Errorf("benchcc: %d flows: at most %d (a flow announces its index in one byte)", cfg.Flows, MaxFlows)
	}
	avail, err := cc.Available()
	if err != nil {
		return nil, fmt.Errorf("benchcc: %w", err)
	}
	if err := CheckAlgos(cfg.Algos, avail); err != nil {
		return nil, fmt.Errorf("benchcc: %w", err)
	}
	// Every trace is read before the first run: a malformed trace late in
	// the list stopped the bench after the runs of the traces before it,
	// hours into the default campaign.
	traces := make([]*netem.Trace, len(cfg.Traces))
	for i, tp := range cfg.Traces {
		if traces[i], err = netem.LoadTrace(tp); err != nil {
			return nil, fmt.Errorf("benchcc: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("benchcc: create %s: %w", cfg.OutDir, err)
	}
	if cfg.TCPInfoDir != "" {
		// Created here, so that a run does not go by with only a warning
		// that its diagnostics could not be written.
		if err := os.MkdirAll(cfg.TCPInfoDir, 0o755); err != nil {
			return nil, fmt.Errorf("benchcc: create the TCP_INFO directory %s: %w", cfg.TCPInfoDir, err)
		}
	}
	for _, a := range cfg.Algos {
		if a != "hera" && a != "hera-paper" {
			continue
		}
		// Always run the embedded build with its defaults, not whatever
		// version or parameters an earlier `xrealm cc load` left behind.
		avail, _ := cc.Available()
		if slices.Contains(avail, cc.KernelName(a)) {
			cfg.Logger.Info("benchcc: reloading", "cc", a)
			if err := cc.Unload(a); err != nil {
				return nil, err
			}
		}
		p, _ := hera.ForVariant(a)
		if a == "hera" && cfg.HeraParams != nil {
			p = *cfg.HeraParams
		}
		cfg.Logger.Info("benchcc: loading", "cc", a, "params", fmt.Sprintf("%+v", p))
		if err := cc.Load(a, p); err != nil {
			return nil, fmt.Errorf("%w (the kernel's own algorithms need no loading: --algos %s)", err, strings.Join(kernelAlgos(cfg.Algos), ","))
		}
		defer cc.Unload(a)
	}
	outPath := filepath.Join(cfg.OutDir, "results.jsonl")
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("benchcc: open results: %w", err)
	}
	defer out.Close()
	var results []Result
	// Progress: the default campaign is 210 runs of a minute each.
	total, k := len(cfg.Traces)*len(cfg.Seeds)*len(cfg.Algos), 0
	for i, tp := range cfg.Traces {
		tr := traces[i]
		for _, seed := range cfg.Seeds {
			for _, algo := range cfg.Algos {
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
				k++
				cfg.Logger.Info("benchcc: starting", "run", fmt.Sprintf("%d of %d", k, total), "trace", filepath.Base(tp), "algo", algo, "seed", seed,
					"left", (time.Duration(total-k+1) * cfg.Duration).String())
				r, err := runOne(ctx, cfg, tr, filepath.Base(tp), algo, seed)
				if err != nil {
					return results, err
				}
				cfg.Logger.Info("benchcc: run", "trace", r.Trace, "algo", algo, "seed", seed, "flows", r.Flows,
					"mbps", round2(r.ThroughputMbps), "util", round2(r.Utilisation), "p95_ms", round2(r.P95QDelayMs),
					"jain", round2(r.JainMean), "valid", r.Valid, "invalid", r.Invalid)
				if err := appendResult(out, r); err != nil {
					return results, fmt.Errorf("benchcc: append the run of %s, %s, seed %d to %s: %w", r.Trace, algo, seed, outPath, err)
				}
				results = append(results, r)
			}
		}
	}
	return results, nil
}

// appendResult writes r as one line of JSON, in one write. Its error was
// not looked at: a full disk lost every run after it, and the bench said
// they were appended.
func appendResult(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// MaxFlows is the most competing flows a run can have: each sender
// announces its index in its first byte.
const MaxFlows = 255

// receivers accepts the bulk flows of a run and counts, per flow, the
// bytes received in each bin after start. Every goroutine it starts is
// counted in wg, and close ends them all, including a connection still
// announcing its index.
type receivers struct {
	ln     net.Listener
	counts [][]int64 // [flow][bin]
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// startReceivers accepts flows connections on ln. Each must send its flow
// index (0 to flows-1, each once) as its first byte before announce; a
// connection that does not is closed and counts nothing.
func startReceivers(ln net.Listener, flows int, start time.Time, bin time.Duration, nbins int, announce time.Time) *receivers {
	r := &receivers{ln: ln, counts: make([][]int64, flows)}
	for i := range r.counts {
		r.counts[i] = make([]int64, nbins)
	}
	seen := make([]bool, flows)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for accepted := 0; accepted < flows; {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			if r.closed {
				r.mu.Unlock()
				c.Close()
				return
			}
			r.conns = append(r.conns, c)
			r.mu.Unlock()
			var id [1]byte
			c.SetReadDeadline(announce)
			if _, err := io.ReadFull(c, id[:]); err != nil || int(id[0]) >= flows || seen[id[0]] {
				c.Close()
				continue
			}
			c.SetReadDeadline(time.Time{})
			seen[id[0]] = true
			accepted++
			r.wg.Add(1) // this goroutine's own count keeps wg above zero
			go func(c net.Conn, bins []int64) {
				defer r.wg.Done()
				defer c.Close()
				buf := make([]byte, 1<<16)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if k := int(time.Since(start) / bin); k >= 0 && k < len(bins) {
							bins[k] += int64(n)
						}
					}
					if err != nil {
						return
					}
				}
			}(c, r.counts[id[0]])
		}
	}()
	return r
}

// close stops accepting and closes every connection (a receiver may never
// see a FIN once the emulated link is gone).
func (r *receivers) close() {
	r.ln.Close()
	r.mu.Lock()
	r.closed = true
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
}

// wait waits for every goroutine of r; counts are final afterwards.
func (r *receivers) wait() { r.wg.Wait() }

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func runOne(ctx context.Context, cfg Config, tr *netem.Trace, name, algo string, seed uint64) (Result, error) {
	res := Result{Trace: name, Algo: algo, Seed: seed, Flows: cfg.Flows, DurationS: cfg.Duration.Seconds()}
	if algo == "hera" && cfg.HeraParams != nil {
		res.HeraArgs = cfg.HeraArgs
	}
	logDir, err := tmpfiles.MkdirTemp("xrealm-benchcc-") // a run ended by a crash leaves it to the next
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(logDir)
	e, err := netem.Start(ctx, netem.Config{
		Up: tr, Down: tr, Delay: cfg.Delay, QueuePackets: cfg.QueuePackets,
		Seed: seed, LogDir: logDir, Logger: cfg.Logger,
	})
	if err != nil {
		return res, err
	}
	defer e.Close()
	linkStart := time.Now()

	// Receivers in the client namespace; senders in the host namespace
	// (data flows on the downlink, host→client).
	var ln net.Listener
	if err := netem.InNamespace(e.ClientNS, func() (err error) { ln, err = net.Listen("tcp", netem.ClientAddr+":5201"); return err }); err != nil {
		return res, err
	}
	defer ln.Close()
	const bin = 250 * time.Millisecond
	nbins := int(cfg.Duration/bin) + 8
	flowStart := time.Now()
	deadline := flowStart.Add(cfg.Duration)
	recv := startReceivers(ln, cfg.Flows, flowStart, bin, nbins, deadline)
	defer recv.close()
	counts := recv.counts
	kname := algo
	if algo == "hera" || algo == "hera-paper" {
		kname = cc.KernelName(algo)
	}
	var swg sync.WaitGroup
	errs := make(chan error, cfg.Flows)
	for i := 0; i < cfg.Flows; i++ {
		var c net.Conn
		d := net.Dialer{Control: cc.SetCongestion(kname)}
		if err := netem.InNamespace(e.HostNS, func() (err error) {
			c, err = d.DialContext(ctx, "tcp", netem.ClientAddr+":5201")
			return err
		}); err != nil {
			return res, fmt.Errorf("benchcc: connect flow %d with %s: %w", i, algo, err)
		}
		if i == 0 && cfg.TCPInfoDir != "" {
			path := filepath.Join(cfg.TCPInfoDir, fmt.Sprintf("%s-%s-%d.tcpinfo", filepath.Base(name), algo, seed))
			defer startTCPInfo(c, path, flowStart, cfg.Logger)()
		}
		swg.Add(1)
		go func(i int, c net.Conn) {
			defer swg.Done()
			defer c.Close()
			buf := make([]byte, 1<<16)
			buf[0] = byte(i)
			c.SetWriteDeadline(deadline)
			// An interruption ends the run at once (Ctrl-C waited for the
			// run's end, a minute by default, and said nothing).
			defer context.AfterFunc(ctx, func() { c.SetWriteDeadline(time.Now()) })()
			if _, err := c.Write(buf[:1]); err != nil {
				errs <- err
				return
			}
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}(i, c)
	}
	var qoe *qoeStream
	if cfg.QoE {
		if qoe, err = startQoE(ctx, e, kname, flowStart, deadline, cfg); err != nil {
			return res, err
		}
	}
	swg.Wait()
	time.Sleep(200 * time.Millisecond)
	if qoe != nil {
		qoe.close()
	}
	// Receivers may never see a FIN once the link is gone; close them.
	recv.close()
	if err := e.Close(); err != nil {
		return res, err
	}
	recv.wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	select {
	case err := <-errs:
		return res, fmt.Errorf("benchcc: flow with %s: %w", algo, err)
	default:
	}
	if qoe != nil {
		qoe.wait()
	}
	rep := e.Report()
	res.Load1 = load1()
	res.Valid = true
	if err := rep.KeptUp(); err != nil {
		res.Valid, res.Invalid = false, err.Error()
	}
	res.Drops = rep.Down.TailDrops + rep.Down.LossDrops
	res.UpLate, res.DownLate = rep.Up.Late, rep.Down.Late

	// Measure from 2 s after the flows start to the end of sending.
	off := flowStart.Sub(linkStart)
	from, to := off+2*time.Second, off+cfg.Duration
	if cfg.Duration <= 4*time.Second {
		from = off + cfg.Duration/4
	}
	fromUs, toUs := uint64(from/time.Microsecond), uint64(to/time.Microsecond)
	var delays []float64
	var delivered int64
	err = netem.ReadLog(filepath.Join(logDir, "downlink.log"), func(r netem.LogRecord) {
		if r.Dropped || r.Deq < fromUs || r.Deq >= toUs {
			return
		}
		delivered += int64(r.Bytes)
		delays = append(delays, float64(r.Deq-r.Enq)/1000)
	})
	if err != nil {
		return res, err
	}
	win := (to - from).Seconds()
	res.ThroughputMbps = float64(delivered) * 8 / win / 1e6
	res.CapacityMbps = float64(tr.Capacity(from, to)) * 8 / win / 1e6
	if res.CapacityMbps > 0 {
		res.Utilisation = res.ThroughputMbps / res.CapacityMbps
	}
	res.MeanQDelayMs, res.P95QDelayMs = meanP95(delays)

	// Per-flow goodput and Jain's index per second over the same window.
	b0, b1 := int((2*time.Second)/bin), int(cfg.Duration/bin)
	if cfg.Duration <= 4*time.Second {
		b0 = int(cfg.Duration / 4 / bin)
	}
	for _, bins := range counts {
		var s int64
		for _, v := range bins[b0:b1] {
			s += v
		}
		res.GoodputMbps = append(res.GoodputMbps, float64(s)*8/win/1e6)
	}
	if qoe != nil {
		// Frames of the last second may still be in flight when the run
		// stops; leave them out.
		if cfg.Duration > 4*time.Second {
			res.QoE = qoe.result(2*time.Second, cfg.Duration-time.Second)
		} else {
			res.QoE = qoe.result(cfg.Duration/4, cfg.Duration*3/4)
		}
	}
	per := int(time.Second / bin)
	for k := b0; k+per <= b1; k += per {
		var s int64
		for f := range counts {
			for _, v := range counts[f][k : k+per] {
				s += v
			}
		}
		res.RateSeries = append(res.RateSeries, round2(float64(s)*8/1e6))
	}
	if cfg.Flows > 1 {
		res.JainSeries, res.JainMean = jainSeries(counts, b0, b1, per)
	}
	return res, nil
}

// jainSeries is Jain's index of the flows' bytes (counts[flow][bin]) in each
// window of per bins from bin b0 to b1, and its mean. A window in which no
// flow received anything (the link was out) has no index: it is nil in the
// series and left out of the mean, since equal shares of nothing say
// nothing about fairness.
func jainSeries(counts [][]int64, b0, b1, per int) (series []*float64, mean float64) {
	var sum float64
	var n int
	for k := b0; k+per <= b1; k += per {
		x := make([]float64, len(counts))
		var total float64
		for f := range counts {
			for _, v := range counts[f][k : k+per] {
				x[f] += float64(v)
			}
			total += x[f]
		}
		if total == 0 {
			series = append(series, nil)
			continue
		}
		j := Jain(x)
		series = append(series, &j)
		sum += j
		n++
	}
	if n > 0 {
		mean = sum / float64(n)
	}
	return series, mean
}

// Jain is Jain's fairness index (Σx)² / (n·Σx²), 1 for equal shares.
func Jain(x []float64) float64 {
	var s, s2 float64
	for _, v := range x {
		s += v
		s2 += v * v
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(x)) * s2)
}

func meanP95(v []float64) (mean, p95 float64) {
	if len(v) == 0 {
		return 0, 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	sort.Float64s(v)
	return s / float64(len(v)), v[int(math.Ceil(0.95*float64(len(v))))-1]
}
