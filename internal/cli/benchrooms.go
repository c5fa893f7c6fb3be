package cli

import (
	"context"
	"encoding/binary"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/cpuload"
	"github.com/xrealm/xrealm/tlscert"
	"github.com/xrealm/xrealm/ubiq"
)

// runBenchRooms runs `xrealm bench rooms`: Ubiq-protocol bots join a room
// server one after the other and the latency of their poses is measured
// as the room grows, to find its capacity. `xrealm bench rooms serve`
// runs just the room server (embedded bus and Ubiq listener), which the
// bench starts as a child process unless --addr names another server.
func runBenchRooms(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "serve" {
		return runRoomsServe(ctx, args[1:])
	}
	fs := flag.NewFlagSet("bench rooms", flag.ContinueOnError)
	addr := fs.String("addr", "", "Ubiq server to test (host:port or ws:// URL); empty = start \"xrealm bench rooms serve\" as a child")
	serverPID := fs.Int("server-pid", 0, "pid of the server under test, for its CPU time (set automatically for the child)")
	mode := fs.String("mode", bots.UbiqAll, "interest: all (the baseline: everyone receives everyone), knn or grid")
	beh := fs.String("behaviour", "randomwalk", "bot behaviour: randomwalk, boids or static")
	area := fs.Float64("area", 200, "side of the square the bots move in, metres")
	rate := fs.Float64("rate", 60, "poses per second per bot")
	size := fs.Int("size", 500, "pose payload size in bytes (padded)")
	ramp := fs.Duration("ramp", 1500*time.Millisecond, "one more bot every this long")
	maxBots := fs.Int("max", 300, "stop after this many bots")
	window := fs.Duration("window", 5*time.Second, "measurement window")
	stopMean := fs.Duration("stop-mean", 500*time.Millisecond, "stop once mean latency exceeds this")
	k := fs.Int("k", 20, "knn: set size")
	cell := fs.Float64("cell", 20, "grid: cell size, metres")
	ring := fs.Int("ring", 1, "grid: observed rings")
	out := fs.String("out", "", "write the windows as CSV to this file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the bots (this process) to this file")
	serverProfile := fs.String("server-cpuprofile", "", "child server: write its CPU profile to this file")
	linger := fs.Duration("linger", 0, "child server: write linger of its connections (0 = the server's default)")
	hold := fs.Int("hold", 0, "windows to keep measuring once every bot has joined")
	serverCPUs := fs.String("server-cpus", "", "child server: pin it to these CPUs (taskset list, e.g. 1); empty = no pinning")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if err := checkRoomsFlags(*mode, *beh, *rate, *area, *size, *maxBots, *k, *cell, *ring, *ramp, *window); err != nil {
		return usageErr(err)
	}
	if err := checkRoomsServerFlags(*addr, *serverPID, *linger, *serverProfile, *serverCPUs, *stopMean, *hold); err != nil {
		return usageErr(err)
	}
	stopProfile, err := cpuProfileTo(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	log := slog.Default()
	// The CSV is opened before the server starts, so that a path that
	// cannot be written fails before it, naming the flag.
	var w *roomsCSV
	if *out != "" {
		if w, err = openRoomsCSV(*out); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		defer w.close()
	}
	if *addr == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		*addr = l.Addr().String()
		l.Close()
		sargs := []string{"bench", "rooms", "serve", "--listen", *addr}
		if *serverProfile != "" {
			sargs = append(sargs, "--cpuprofile", *serverProfile)
		}
		if *linger != 0 {
			sargs = append(sargs, "--linger", linger.String())
		}
		name := exe
		if *serverCPUs != "" {
			name, sargs = "taskset", append([]string{"-c", *serverCPUs, exe}, sargs...)
		}
		cmd := exec.CommandContext(ctx, name, sargs...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		// The server goes with a bench that is killed (no clean-up runs);
		// taskset execs it and keeps this.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
		*serverPID = cmd.Process.Pid
		if err := waitListening(ctx, *addr); err != nil {
			return err
		}
	}
	half := *area / 2
	spec := bots.Spec{Name: *beh, Area: bots.Area{MinX: -half, MaxX: half, MinZ: -half, MaxZ: half, Height: 1.6}}
	tr := &bots.UbiqTransport{Addr: *addr, Mode: *mode, PayloadSize: *size, K: *k, CellSize: *cell, Ring: *ring,
		Room: ubiqRoomFor(*mode)}
	r := &roomsRun{spec: spec, tr: tr, rate: *rate, acc: bots.NewAccounts(), log: log, start: time.Now()}
	defer r.stop()

	fmt.Printf("# xrealm bench rooms: mode=%s behaviour=%s rate=%gHz size=%dB ramp=%v window=%v addr=%s\n", *mode, *beh, *rate, *size, *ramp, *window, *addr)
	fmt.Printf("# latency: one-way (sender to receiver, one clock) and ping round trip (peer to peer and back through the relay), in ms\n")
	fmt.Printf("%6s %6s %9s %10s %10s %8s %8s %8s %8s %8s %7s %6s %7s %6s %6s %5s %5s\n", "t", "peers", "sent/s", "recv/s", "MB/s", "mean", "p50", "p99", "rttMean", "rtt99", "srvCPU", "botCPU", "ext", "polar", "coll", "idle", "steal")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.rampUp(ctx, *ramp, *maxBots) }()

	capP99, capRTT, capMean := -1, -1, -1
	var lastTot bots.Totals
	var lastPings int64
	lastSrv, lastSelf := procCPU(*serverPID), selfCPU()
	lastIdle, lastSteal := machineCPU()
	last := time.Now()
	tick := time.NewTicker(*window)
	defer tick.Stop()
	r.acc.Live() // reset
	r.acc.LiveRoundTrips()
	full := false
	windows := 0
	where := "the lines above"
	if *out != "" {
		where = "the lines above and " + *out
	}
	defer sayInterrupted(ctx, "bench rooms", "stopping the bots and the room server")()
	for {
		select {
		case <-ctx.Done():
			fmt.Printf("# interrupted with %d peers; capacity so far: ping round trip p99<=100ms up to %s peers; one-way p99<=100ms up to %s peers\n",
				r.count(), capStr(capRTT, r.count()), capStr(capP99, r.count()))
			return interruptedError(windows, "window", where)
		case err := <-errc:
			if err != nil {
				return err
			}
			full = true
			errc = nil
			continue
		case <-tick.C:
		}
		now := time.Now()
		dt := now.Sub(last).Seconds()
		tot, h := r.acc.Live()
		rt, pings := r.acc.LiveRoundTrips(), tr.Pings()
		srv, self := procCPU(*serverPID), selfCPU()
		idle, steal := machineCPU()
		peers := r.count()
		ext, pol, coll := r.flock()
		row := []float64{now.Sub(r.start).Seconds(), float64(peers), float64(tot.Sent-lastTot.Sent) / dt, float64(tot.Received-lastTot.Received) / dt,
			float64(tot.Bytes-lastTot.Bytes) / dt, h.Mean() / 1000, float64(h.ValueAtQuantile(50)) / 1000, float64(h.ValueAtQuantile(99)) / 1000,
			float64(h.Max()) / 1000, (srv - lastSrv) / dt, (self - lastSelf) / dt, ext, pol, coll, (idle - lastIdle) / dt, (steal - lastSteal) / dt,
			rt.Mean() / 1000, float64(rt.ValueAtQuantile(50)) / 1000, float64(rt.ValueAtQuantile(99)) / 1000, float64(pings-lastPings) / dt, float64(rt.TotalCount()) / dt}
		windows++
		lastTot, lastSrv, lastSelf, last, lastPings = tot, srv, self, now, pings
		lastIdle, lastSteal = idle, steal
		fmt.Printf("%6.0f %6d %9.0f %10.0f %10.2f %8.1f %8.1f %8.1f %8.1f %8.1f %7s %6.2f %7.1f %6.2f %6.1f %5.2f %5.2f\n",
			row[0], peers, row[2], row[3], row[4]/1e6, row[5], row[6], row[7], row[16], row[18], cpuCell(row[9]), row[10], ext, pol, coll, row[14], row[15])
		if w != nil {
			if err := w.write(row); err != nil {
				return fmt.Errorf("--out %s: %w (%d windows above)", *out, err, windows)
			}
		}
		// A room whose bots are all gone measures nothing more: its
		// windows have no latency, so --hold never ran out.
		if peers > 0 && ctx.Err() == nil {
			if gone, why := r.gone(); gone == peers {
				return fmt.Errorf("all %d bots were disconnected (the room server at %s stopped or closed them; the first: %v); %d windows in %s",
					peers, *addr, why, windows, where)
			}
		}
		if h.TotalCount() == 0 {
			continue
		}
		if capP99 < 0 && row[7] > 100 {
			capP99 = r.lastGood(peers)
		}
		if capRTT < 0 && rt.TotalCount() > 0 && row[18] > 100 {
			capRTT = r.lastGood(peers)
		}
		// the mean rule by ping, as Ubiq's experiment (one-way before the
		// first pongs come)
		if mean := row[5]; max(mean, row[16]) > float64(stopMean.Milliseconds()) {
			capMean = r.lastGood(peers)
			break
		}
		r.markGood(peers)
		if full {
			if *hold <= 0 {
				break
			}
			*hold--
		}
	}
	fmt.Printf("# capacity: ping round trip p99<=100ms up to %s peers; one-way p99<=100ms up to %s peers; mean<=%v up to %s peers (of %d started)\n",
		capStr(capRTT, r.count()), capStr(capP99, r.count()), *stopMean, capStr(capMean, r.count()), r.count())
	return nil
}

// roomsModes and roomsBehaviours are bench rooms' --mode and --behaviour
// choices.
var (
	roomsModes      = []string{bots.UbiqAll, bots.UbiqKNN, bots.UbiqGrid}
	roomsBehaviours = []string{"randomwalk", "boids", "static"}
)

// checkRoomsFlags refuses bench rooms settings it cannot run, before
// anything starts.
func checkRoomsFlags(mode, beh string, rate, area float64, size, maxBots, k int, cell float64, ring int, ramp, window time.Duration) error {
	switch {
	case !slices.Contains(roomsModes, mode):
		return fmt.Errorf("--mode %q: want one of %s", mode, strings.Join(roomsModes, ", "))
	case !slices.Contains(roomsBehaviours, beh):
		return fmt.Errorf("--behaviour %q: want one of %s", beh, strings.Join(roomsBehaviours, ", "))
	case bots.CheckRate(rate) != nil:
		return fmt.Errorf("--rate %g: want poses per second per bot above 0 (and at most %g)", rate, float64(bots.MaxRate))
	case !(area > 0 && area <= math.MaxFloat64):
		return fmt.Errorf("--area %g: want a side above 0 metres", area)
	case size < 0:
		return fmt.Errorf("--size %d: want at least 0 bytes", size)
	case maxBots < 1:
		return fmt.Errorf("--max %d: want at least 1 bot", maxBots)
	case ramp <= 0 || window <= 0:
		return fmt.Errorf("--ramp %v and --window %v: want positive durations", ramp, window)
	case mode == bots.UbiqKNN && k < 1:
		return fmt.Errorf("--k %d: want at least 1", k)
	case mode == bots.UbiqGrid && !(cell > 0 && cell <= math.MaxFloat64):
		return fmt.Errorf("--cell %g: want a cell size above 0 metres", cell)
	case mode == bots.UbiqGrid && ring < 0:
		return fmt.Errorf("--ring %d: want at least 0", ring)
	}
	return nil
}

// checkRoomsServerFlags refuses the child server's settings with a
// server that is not the bench's child (--addr), which it ignored, and the
// stopping rules that mean nothing.
func checkRoomsServerFlags(addr string, serverPID int, linger time.Duration, serverProfile, serverCPUs string, stopMean time.Duration, hold int) error {
	switch {
	case addr != "" && linger != 0:
		return fmt.Errorf("--linger %v sets the bench's own room server, and --addr %s names another: set its linger where it runs", linger, addr)
	case addr != "" && serverProfile != "":
		return fmt.Errorf("--server-cpuprofile %q profiles the bench's own room server, and --addr %s names another", serverProfile, addr)
	case addr != "" && serverCPUs != "":
		return fmt.Errorf("--server-cpus %q pins the bench's own room server, and --addr %s names another: pin it where it runs", serverCPUs, addr)
	case addr == "" && serverPID != 0:
		return fmt.Errorf("--server-pid %d is for a server named by --addr (the bench's own room server is measured without it)", serverPID)
	case serverPID < 0:
		return fmt.Errorf("--server-pid %d: want a process id above 0", serverPID)
	case stopMean <= 0:
		return fmt.Errorf("--stop-mean %v: want a positive latency", stopMean)
	case hold < 0:
		return fmt.Errorf("--hold %d: want 0 or more windows", hold)
	}
	return nil
}

// roomsCSV is bench rooms' --out. It is opened before anything starts
// (a path that cannot be written is refused at once) but emptied only when
// the first window is written: a run that fails or is interrupted before
// leaves an earlier run's file as it was, and a new file is removed.
type roomsCSV struct {
	path    string
	f       *os.File
	created bool
	w       *csv.Writer
	started bool
}

func openRoomsCSV(path string) (*roomsCSV, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	created := err == nil
	if errors.Is(err, os.ErrExist) {
		f, err = os.OpenFile(path, os.O_WRONLY, 0)
	}
	if err != nil {
		return nil, err
	}
	return &roomsCSV{path: path, f: f, created: created, w: csv.NewWriter(f)}, nil
}

// write writes one window, after the header if it is the first, and
// flushes it, so that the file holds every window finished.
func (c *roomsCSV) write(row []float64) error {
	if !c.started {
		c.started = true
		if err := c.f.Truncate(0); err != nil {
			return err
		}
		c.w.Write([]string{"t_s", "peers", "sent_per_s", "recv_per_s", "recv_bytes_per_s", "mean_ms", "p50_ms", "p99_ms", "max_ms",
			"server_cpu", "bench_cpu", "extension_m", "polarisation", "collisions", "idle_cpu", "steal_cpu",
			"rtt_mean_ms", "rtt_p50_ms", "rtt_p99_ms", "pings_per_s", "pongs_per_s"})
	}
	rec := make([]string, len(row))
	for i, v := range row {
		rec[i] = strconv.FormatFloat(v, 'f', 3, 64)
	}
	c.w.Write(rec)
	c.w.Flush()
	return c.w.Error()
}

func (c *roomsCSV) close() {
	c.f.Close()
	if !c.started && c.created {
		os.Remove(c.path)
	}
}

func capStr(c, n int) string {
	if c < 0 {
		return fmt.Sprintf(">=%d (not reached)", n)
	}
	return strconv.Itoa(c)
}

func ubiqRoomFor(mode string) string {
	// Distinct rooms per mode, so that a server can be reused.
	switch mode {
	case bots.UbiqKNN:
		return "7e1a0b5e-6c55-4d4e-9a55-00000000c0de"
	}
	return bots.DefaultUbiqRoom
}

func waitListening(ctx context.Context, addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("room server at %s did not start: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// roomsRun is a growing set of bots.
type roomsRun struct {
	spec  bots.Spec
	tr    *bots.UbiqTransport
	rate  float64
	acc   *bots.Accounts
	log   *slog.Logger
	start time.Time

	mu     sync.Mutex
	bs     []*roomBot
	pacers []*pacer
	good   int // peers of the last window within both limits
	wg     sync.WaitGroup
	close  atomic.Bool
}

type roomBot struct {
	link  bots.Link
	meter *bots.Meter
	beh   bots.Behaviour
	seen  *seenPeers // nil unless the behaviour watches peers
	state atomic.Pointer[[2]bots.Vec3]
}

// Receive and ReadDone make a roomBot its transport's Receiver.
func (b *roomBot) Receive(m *bots.Received) {
	b.meter.Record(m)
	if b.seen != nil && m.HasPos {
		b.seen.update(m.From, m.Pos, m.RecvNanos)
	}
}

func (b *roomBot) ReadDone() { b.meter.Flush() }

func (r *roomsRun) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bs)
}

// gone returns how many bots' connections have ended, and why the first
// of them did.
func (r *roomsRun) gone() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	var why error
	for _, b := range r.bs {
		select {
		case <-b.link.Done():
			n++
			if why == nil {
				if e, ok := b.link.(interface{ Err() error }); ok {
					why = e.Err()
				}
			}
		default:
		}
	}
	if why == nil {
		why = errors.New("connection closed")
	}
	return n, why
}

func (r *roomsRun) markGood(n int) { r.mu.Lock(); r.good = n; r.mu.Unlock() }
func (r *roomsRun) lastGood(int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.good
}

func (r *roomsRun) rampUp(ctx context.Context, every time.Duration, max int) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 0; i < max; i++ {
		if err := r.add(ctx, i); err != nil {
			if i == 0 {
				return fmt.Errorf("the room server at %s (--addr) did not take the first bot: %w", r.tr.Addr, err)
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	return nil
}

func (r *roomsRun) add(ctx context.Context, i int) error {
	rng := rand.New(rand.NewPCG(uint64(i), 0xb075))
	beh, err := r.spec.New(i, rng)
	if err != nil {
		return err
	}
	b := &roomBot{beh: beh, meter: r.acc.NewMeter()}
	pw, watches := beh.(bots.PeerWatcher)
	watches = watches && pw.WantsPeers()
	if watches {
		b.seen = &seenPeers{m: map[uint64]*seenPeer{}}
	}
	jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	link, err := r.tr.Join(jctx, bots.Identity{Index: i, ObjectID: "bot" + strconv.Itoa(i)}, b, watches)
	if err != nil {
		return err
	}
	b.link = link
	r.mu.Lock()
	r.bs = append(r.bs, b)
	r.mu.Unlock()
	r.schedule(ctx, b)
	return nil
}

// Bots are paced by shared goroutines, not one goroutine and timer per
// bot: each pacer owns up to pacerBots bots, wakes every pacerTick and
// sends the poses that are due, each on its bots.Schedule as a Fleet's
// bots: stamped with the time it was due, so that a pacer's lateness (at
// least up to pacerTick) counts in the latency, and the ticks a bot is a
// period or more late for are skipped and counted as missed.
const (
	pacerBots = 128
	pacerTick = 2 * time.Millisecond
)

type pacer struct {
	mu   sync.Mutex
	bots []*pacedBot
}

type pacedBot struct {
	*roomBot
	sched   bots.Schedule // its pace, as a Fleet's bots: poses stamped when due
	last    time.Time
	peers   []bots.Peer
	peersAt time.Time // when peers was taken from seen
	dead    bool
}

// peersEvery is how often a bot that watches its peers refreshes its copy
// of what it knows of them. Their positions are decoded at most every
// 100 ms (bots.UbiqTransport.DecodePosEvery), so a fresher copy would
// mostly repeat the last one, at the price of a map walk per pose.
const peersEvery = 50 * time.Millisecond

// schedule hands b to a pacer, starting one when all are full.
func (r *roomsRun) schedule(ctx context.Context, b *roomBot) {
	period := time.Duration(float64(time.Second) / r.rate)
	now := time.Now()
	pb := &pacedBot{roomBot: b, sched: bots.Schedule{Next: now.Add(time.Duration(rand.Int64N(int64(period)))), Period: period}, last: now}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.pacers); n > 0 {
		p := r.pacers[n-1]
		p.mu.Lock()
		if len(p.bots) < pacerBots {
			p.bots = append(p.bots, pb)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	p := &pacer{bots: []*pacedBot{pb}}
	r.pacers = append(r.pacers, p)
	r.wg.Add(1)
	go r.pace(ctx, p)
}

func (r *roomsRun) pace(ctx context.Context, p *pacer) {
	defer r.wg.Done()
	t := time.NewTicker(pacerTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		list := p.bots
		p.mu.Unlock()
		// One clock read per tick decides who is due (a bot is at most
		// the time of this loop late); step stamps each pose with the time
		// it was due.
		tick := time.Now()
		for _, b := range list {
			if b.dead || tick.Before(b.sched.Next) {
				continue
			}
			now := time.Now()
			if !r.step(b, now) {
				b.dead = true
				if !r.close.Load() {
					r.log.Warn("bot disconnected")
				}
			}
		}
	}
}

// step moves one bot and sends its pose; false if its connection is gone.
func (r *roomsRun) step(b *pacedBot, now time.Time) bool {
	if b.seen != nil && now.Sub(b.peersAt) >= peersEvery {
		b.peersAt = now
		b.peers = b.seen.snapshot(b.peers[:0], now.UnixNano())
	}
	// The behaviour moves on the schedule's clock, as a Fleet's bots do:
	// the pose is where the bot is at its stamp, the time it was due.
	due := b.sched.Next
	pose := b.beh.Step(due.Sub(b.last), b.peers)
	if dt := due.Sub(b.last).Seconds(); dt > 0 {
		if prev := b.state.Load(); prev != nil {
			b.state.Store(&[2]bots.Vec3{pose.Pos, pose.Pos.Sub(prev[0]).Scale(1 / dt)})
		} else {
			b.state.Store(&[2]bots.Vec3{pose.Pos, {}})
		}
	}
	b.last = due
	if err := b.link.SendPose(pose, b.sched.Due()); err != nil {
		return false
	}
	b.sched.Sent(b.meter, time.Now())
	return true
}

// flock returns the extension (mean distance to the centroid, m), the
// polarisation (length of the mean heading, 0..1) and the number of pairs
// closer than 1 m.
func (r *roomsRun) flock() (ext, pol float64, coll float64) {
	r.mu.Lock()
	var ps, vs []bots.Vec3
	for _, b := range r.bs {
		if s := b.state.Load(); s != nil {
			ps = append(ps, s[0])
			vs = append(vs, s[1])
		}
	}
	r.mu.Unlock()
	if len(ps) == 0 {
		return 0, 0, 0
	}
	var c, h bots.Vec3
	for i, p := range ps {
		c = c.Add(p)
		if l := vs[i].Len(); l > 0 {
			h = h.Add(vs[i].Scale(1 / l))
		}
	}
	c = c.Scale(1 / float64(len(ps)))
	for i, p := range ps {
		ext += p.Sub(c).Len()
		for j := i + 1; j < len(ps); j++ {
			if d := p.Sub(ps[j]); d.X*d.X+d.Z*d.Z < 1 {
				coll++
			}
		}
	}
	return ext / float64(len(ps)), h.Len() / float64(len(ps)), coll
}

func (r *roomsRun) stop() {
	r.close.Store(true)
	r.mu.Lock()
	bs := r.bs
	r.mu.Unlock()
	for _, b := range bs {
		b.link.Close()
	}
}

// seenPeers is what a boid knows of the others, from their poses. It is
// keyed by the sender's 8-byte Ubiq NetworkId as an integer: a map probe
// per received position with an integer hash, not a string's.
type seenPeers struct {
	mu sync.Mutex
	m  map[uint64]*seenPeer
}

type seenPeer struct {
	id       string
	pos, vel bots.Vec3
	at       int64
}

// peerKey is the map key of a sender id (a NetworkId's 8 bytes; shorter
// ids are padded with zeros).
func peerKey(from []byte) uint64 {
	var k [8]byte
	copy(k[:], from)
	return binary.LittleEndian.Uint64(k[:])
}

func (s *seenPeers) update(from []byte, pos bots.Vec3, now int64) {
	key := peerKey(from)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.m[key]
	if p == nil {
		s.m[key] = &seenPeer{id: string(from), pos: pos, at: now}
		return
	}
	if dt := float64(now-p.at) / 1e9; dt > 0.01 {
		p.vel = pos.Sub(p.pos).Scale(1 / dt)
		p.pos, p.at = pos, now
	}
}

func (s *seenPeers) snapshot(out []bots.Peer, now int64) []bots.Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, p := range s.m {
		if now-p.at > int64(2*time.Second) {
			delete(s.m, id)
			continue
		}
		out = append(out, bots.Peer{ID: p.id, Pos: p.pos, Vel: p.vel})
	}
	return out
}

// cpuProfileTo starts a CPU profile written to path ("" = none) and
// returns what stops it.
func cpuProfileTo(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// procCPU returns the user+system CPU seconds of process pid, NaN when
// they are unknown: pid 0 (a server named by --addr without --server-pid)
// or a process that cannot be read (gone).
func procCPU(pid int) float64 {
	if pid <= 0 {
		return math.NaN()
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return math.NaN()
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+2:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return math.NaN()
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// cpuCell is a CPU share as bench rooms prints it: "unknown" for NaN
// (procCPU's unknown).
func cpuCell(v float64) string {
	if math.IsNaN(v) {
		return "unknown"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// machineCPU returns the machine's idle and stolen CPU seconds so far
// (/proc/stat: idle + iowait, and steal: time the hypervisor gave this
// virtual machine's CPUs to others).
func machineCPU() (idle, steal float64) {
	t, err := cpuload.Read()
	if err != nil {
		return 0, 0
	}
	return t.Idle, t.Steal
}

func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// runRoomsServe runs a bare room server: embedded bus and Ubiq on TCP.
func runRoomsServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench rooms serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8009", "Ubiq TCP address")
	wsListen := fs.String("ws-listen", "", "Ubiq plain WebSocket address; empty = off")
	wssListen := fs.String("wss-listen", "", "Ubiq secure WebSocket address (self-signed certificate); empty = off")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the server to this file")
	linger := fs.Duration("linger", 0, "write linger of each connection (0 = ubiq's default, negative = none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("serve: unexpected arguments %q", fs.Args())
	}
	stopProfile, err := cpuProfileTo(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir, err := os.MkdirTemp("", "xrealm-rooms-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "rooms-bench", Insecure: true, MaxPayload: 8 << 20, Logger: log})
	if err != nil {
		return err
	}
	defer b.Shutdown()
	nc, err := b.Connect("xrealm-ubiq", nats.NoEcho())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := b.JetStream(ctx, nc)
	if err != nil {
		return err
	}
	cfg := ubiq.Config{NC: nc, JS: js, Logger: log}
	cfg.Writer.Linger = *linger
	if *wssListen != "" {
		if cfg.TLS, err = tlscert.Load("", "", dir, []string{"localhost", "127.0.0.1"}); err != nil {
			return err
		}
	}
	s, err := ubiq.NewServer(ctx, cfg)
	if err != nil {
		return err
	}
	for _, w := range []struct {
		addr   string
		secure bool
	}{{*wsListen, false}, {*wssListen, true}} {
		if w.addr == "" {
			continue
		}
		wl, err := net.Listen("tcp", w.addr)
		if err != nil {
			return err
		}
		go s.ServeWebSocket(wl, w.secure)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	go func() {
		if err := s.Serve(l); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Error("ubiq listener stopped", "err", err)
		}
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}
