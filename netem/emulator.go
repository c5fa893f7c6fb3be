package netem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Addresses inside the emulator's own namespaces.
const (
	HostAddr   = "10.64.0.1"
	ClientAddr = "10.64.0.2"
	devName    = "netem0"
)

// LateThreshold is how late a packet may leave the emulator before it
// counts as late. A run in which more than LateFraction of the packets in a
// direction are late, or in which the kernel dropped packets before the
// emulator read them, is one the machine could not keep up with.
const (
	LateThreshold = 5 * time.Millisecond
	LateFraction  = 0.01
)

// Config configures an Emulator.
type Config struct {
	Up, Down     *Trace // uplink is client→host, downlink host→client
	Delay        time.Duration
	QueuePackets int
	QueueBytes   int
	Loss         float64
	Seed         uint64
	// LogDir, if set, receives uplink.log and downlink.log (see LinkConfig.Log).
	LogDir string
	Logger *slog.Logger
	// NoRealtime keeps the forwarding threads at normal priority. By
	// default each direction's thread asks for SCHED_FIFO priority
	// RealtimePriority (needs root; ignored with a warning when refused) so
	// that other load on the machine does not delay packets. For precise
	// timing the process should also leave GOMAXPROCS above the number of
	// its busy goroutines (xrealm netem and bench cc use
	// SuggestedGOMAXPROCS), so that
	// a forwarding thread returning from poll finds a free P at once.
	NoRealtime bool
}

// RealtimePriority is the SCHED_FIFO priority of the forwarding threads:
// above ordinary threads, below the kernel's own real-time threads (50+).
const RealtimePriority = 20

// Emulator is a running emulated link between a client namespace and a host
// namespace.
type Emulator struct {
	ClientNS, HostNS string
	cfg              Config
	log              *slog.Logger
	wg               sync.WaitGroup
	files            []io.Closer // TUN devices and namespaces
	logs             []io.Closer // asynchronous writers before their files
	up, down         *pump
	wake             int // eventfd that wakes the pumps to stop
	stop             atomic.Bool
	closeOnce        sync.Once
	closeErr         error
	report           Report
}

var nsCounter atomic.Uint64

// Start creates the namespaces and TUN devices and starts forwarding. Call
// Close to stop forwarding and remove everything; Start cleans up after
// itself when it fails.
func Start(ctx context.Context, cfg Config) (e *Emulator, err error) {
	if cfg.Up == nil || cfg.Down == nil {
		return nil, errors.New("netem: both an uplink and a downlink trace are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if removed, err := RemoveStale(); err != nil {
		cfg.Logger.Warn("netem: removing stale namespaces", "err", err)
	} else if len(removed) > 0 {
		cfg.Logger.Info("netem: removed stale namespaces", "names", removed)
	}
	id := fmt.Sprintf("%s%d-%d", nsPrefix, os.Getpid(), nsCounter.Add(1))
	e = &Emulator{ClientNS: id + "-c", HostNS: id + "-h", cfg: cfg, log: cfg.Logger, wake: -1}
	defer func() {
		if err != nil {
			e.teardown()
			e = nil
		}
	}()
	for _, ns := range []string{e.ClientNS, e.HostNS} {
		if err := addNamespace(ctx, ns); err != nil {
			return e, err
		}
		e.files = append(e.files, nsCloser(ns))
	}
	var ctun, htun *tunDev
	if err := InNamespace(e.ClientNS, func() (err error) { ctun, err = openTUN(devName); return err }); err != nil {
		return e, err
	}
	e.files = append(e.files, ctun)
	if err := InNamespace(e.HostNS, func() (err error) { htun, err = openTUN(devName); return err }); err != nil {
		return e, err
	}
	e.files = append(e.files, htun)
	for _, side := range []struct{ ns, local, peer string }{
		{e.ClientNS, ClientAddr, HostAddr},
		{e.HostNS, HostAddr, ClientAddr},
	} {
		for _, args := range [][]string{
			{"-n", side.ns, "link", "set", "lo", "up"},
			{"-n", side.ns, "link", "set", devName, "mtu", "1500", "txqueuelen", "10000", "up"},
			{"-n", side.ns, "addr", "add", side.local, "peer", side.peer, "dev", devName},
			{"-n", side.ns, "route", "add", "default", "dev", devName},
		} {
			if err := ipCmd(ctx, args...); err != nil {
				return e, err
			}
		}
	}
	mk := func(name string, tr *Trace, seed uint64, in, out *tunDev) (*pump, error) {
		lc := LinkConfig{Trace: tr, Delay: cfg.Delay, QueuePackets: cfg.QueuePackets, QueueBytes: cfg.QueueBytes, Loss: cfg.Loss, Seed: seed}
		if cfg.LogDir != "" {
			f, err := os.Create(filepath.Join(cfg.LogDir, name+".log"))
			if err != nil {
				return nil, fmt.Errorf("netem: create %s log: %w", name, err)
			}
			aw := newAsyncWriter(f)
			lc.Log = aw
			e.logs = append(e.logs, aw, f)
		}
		l, err := NewLink(lc)
		if err != nil {
			return nil, err
		}
		return &pump{name: name, in: in.fd, out: out.fd, link: l, realtime: !cfg.NoRealtime, log: e.log}, nil
	}
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
			return e, fmt.Errorf("netem: create log directory: %w", err)
		}
	}
	if e.up, err = mk("uplink", cfg.Up, cfg.Seed, ctun, htun); err != nil {
		return e, err
	}
	if e.down, err = mk("downlink", cfg.Down, cfg.Seed+1, htun, ctun); err != nil {
		return e, err
	}
	if e.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return e, fmt.Errorf("netem: eventfd: %w", err)
	}
	start := time.Now()
	for _, p := range []*pump{e.up, e.down} {
		p.start, p.wake, p.stop = start, e.wake, &e.stop
		e.wg.Add(1)
		go func() { defer e.wg.Done(); p.run() }()
	}
	e.log.Info("netem: link up", "client_ns", e.ClientNS, "host_ns", e.HostNS,
		"up_mbps", cfg.Up.MeanRate()/1e6, "down_mbps", cfg.Down.MeanRate()/1e6, "delay", cfg.Delay)
	return e, nil
}

type nsCloser string

func (n nsCloser) Close() error { return deleteNamespace(string(n)) }

// Command returns a command that runs in the client namespace with
// XREALM_NETEM_BASE set to the host's address and XREALM_NETEM_HOST_NETNS
// to the host namespace's name.
func (e *Emulator) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	c := CommandIn(ctx, e.ClientNS, name, args...)
	c.Env = append(os.Environ(), "XREALM_NETEM_BASE="+HostAddr, "XREALM_NETEM_HOST_NETNS="+e.HostNS)
	return c
}

// DirectionReport describes one direction after Close. Its Delivered and
// DeliveredBytes count the packets the emulator wrote out, not those that
// merely left the queue: every arrived packet is delivered, in flight,
// queued or dropped.
type DirectionReport struct {
	LinkStats
	// InFlight counts packets that had left the queue but were still in
	// the fixed one-way delay when the link closed: never written.
	// Queued counts packets still waiting in the queue.
	InFlight, Queued uint64
	// Late counts packets that left more than LateThreshold after their
	// scheduled time; MaxLate is the worst lateness.
	Late    uint64
	MaxLate time.Duration
	// KernelDrops counts packets the kernel dropped because the emulator
	// did not read its TUN device fast enough.
	KernelDrops uint64
	// Elapsed is how long the link ran.
	Elapsed time.Duration
	// Reads and Writes count the system calls on the TUN devices; with
	// segmentation offload one read carries up to 64 KB.
	Reads, Writes uint64
	// Realtime reports whether the forwarding thread ran at real-time
	// priority.
	Realtime bool
}

// Report summarises a run.
type Report struct {
	Up, Down DirectionReport
}

// KeptUp reports whether the emulator delivered every packet on time: no
// more than LateFraction of the packets it wrote were late (packets still
// in flight at Close were not written and are not judged), and the kernel
// dropped none before the emulator read them. When it returns an error,
// measurements taken through the link are not valid.
func (r Report) KeptUp() error {
	for _, d := range []struct {
		name string
		r    DirectionReport
	}{{"uplink", r.Up}, {"downlink", r.Down}} {
		tot := d.r.Delivered
		if d.r.KernelDrops > 0 || float64(d.r.Late) > LateFraction*float64(tot) {
			return fmt.Errorf("netem: the machine could not keep up on the %s: %d of %d packets left more than %v late (worst %v), %d dropped by the kernel before the emulator read them; results of this run are not valid",
				d.name, d.r.Late, tot, LateThreshold, d.r.MaxLate, d.r.KernelDrops)
		}
	}
	return nil
}

// Close stops forwarding, flushes the logs and removes the TUN devices and
// namespaces. It is safe to call more than once.
func (e *Emulator) Close() error {
	e.closeOnce.Do(func() {
		// Reading the kernel's drop counters needs the devices alive.
		ck, hk := tunDrops(e.ClientNS), tunDrops(e.HostNS)
		e.stop.Store(true)
		if e.wake >= 0 {
			unix.Write(e.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		}
		e.wg.Wait()
		e.closeTUNs()
		for _, p := range []*pump{e.up, e.down} {
			if p == nil {
				continue
			}
			if err := p.link.Flush(); err != nil && e.closeErr == nil {
				e.closeErr = fmt.Errorf("netem: flush %s log: %w", p.name, err)
			}
		}
		e.teardown()
		if e.up != nil {
			e.report.Up = e.up.report(ck)
			e.report.Down = e.down.report(hk)
		}
	})
	return e.closeErr
}

// Report returns the run's summary; valid after Close.
func (e *Emulator) Report() Report { return e.report }

// closeTUNs closes the TUN devices, which stops the pumps.
func (e *Emulator) closeTUNs() {
	for _, f := range e.files {
		if _, ok := f.(nsCloser); !ok {
			f.Close()
		}
	}
}

// teardown closes everything Start opened and deletes the namespaces.
func (e *Emulator) teardown() {
	e.closeTUNs()
	for _, f := range e.logs {
		if err := f.Close(); err != nil && e.closeErr == nil {
			e.closeErr = fmt.Errorf("netem: close log: %w", err)
		}
	}
	for _, f := range e.files {
		if ns, ok := f.(nsCloser); ok {
			if err := ns.Close(); err != nil {
				e.log.Warn("netem: remove namespace", "ns", string(ns), "err", err)
				if e.closeErr == nil {
					e.closeErr = err
				}
			}
		}
	}
	e.files, e.logs = nil, nil
	if e.wake >= 0 {
		unix.Close(e.wake)
		e.wake = -1
	}
}

// tunDrops reads how many packets the kernel dropped on the namespace's TUN
// device because its queue to user space was full.
func tunDrops(ns string) uint64 {
	out, err := exec.Command("ip", "-n", ns, "-j", "-s", "link", "show", "dev", devName).Output()
	if err != nil {
		return 0
	}
	var links []struct {
		Stats64 struct {
			TX struct {
				Dropped uint64 `json:"dropped"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if json.Unmarshal(out, &links) != nil || len(links) == 0 {
		return 0
	}
	return links[0].Stats64.TX.Dropped
}

// pump forwards one direction on one OS thread: it reads every packet the
// input TUN has, feeds the segments through the Link, writes out those whose
// delay has passed (coalescing consecutive segments of one GSO packet into
// one write), and sleeps in ppoll until the next departure, the next
// service opportunity or the next arrival, whichever comes first.
type pump struct {
	name     string
	in, out  int // TUN file descriptors
	wake     int // eventfd written on stop
	stop     *atomic.Bool
	link     *Link
	start    time.Time
	realtime bool
	log      *slog.Logger
	isRT     bool

	pending       []departure // FIFO: the delay is constant
	late, maxLate uint64
	reads, writes uint64
	elapsed       time.Duration
	freeBufs      []*superPacket
	freeSmall     []*superPacket
	freePkts      []*Packet
}

type departure struct {
	p  *Packet
	at uint64
}

func (p *pump) now() uint64 { return uint64(time.Since(p.start) / time.Microsecond) }

// smallBufSize holds one packet of the link's MTU and its virtio header.
// A read that is one such packet (not a GSO super-packet) is copied into a
// buffer of this size before it is queued, so that a queue of small packets
// (ACKs, UDP) does not hold a 64 KB read buffer for each of them: with
// --queue-bytes or no queue limit, 1 MB of queued 100-byte packets held
// 650 MB.
const smallBufSize = 2048

// At most this many free buffers of each size are kept for reuse; the
// rest of a burst's buffers are left to the garbage collector.
const (
	maxFreeBufs  = 64   // 4 MB of read buffers
	maxFreeSmall = 4096 // 8 MB of small ones
)

func (p *pump) getBuf() *superPacket {
	if n := len(p.freeBufs); n > 0 {
		sp := p.freeBufs[n-1]
		p.freeBufs = p.freeBufs[:n-1]
		return sp
	}
	return &superPacket{buf: make([]byte, readBufSize)}
}

func (p *pump) getSmall() *superPacket {
	if n := len(p.freeSmall); n > 0 {
		sp := p.freeSmall[n-1]
		p.freeSmall = p.freeSmall[:n-1]
		return sp
	}
	return &superPacket{buf: make([]byte, smallBufSize)}
}

func (p *pump) putBuf(sp *superPacket) {
	if cap(sp.buf) == smallBufSize {
		if len(p.freeSmall) < maxFreeSmall {
			p.freeSmall = append(p.freeSmall, sp)
		}
		return
	}
	if len(p.freeBufs) < maxFreeBufs {
		p.freeBufs = append(p.freeBufs, sp)
	}
}

func (p *pump) getPkt() *Packet {
	if n := len(p.freePkts); n > 0 {
		pk := p.freePkts[n-1]
		p.freePkts = p.freePkts[:n-1]
		return pk
	}
	return new(Packet)
}

// release drops a reference to pk's buffer and recycles both.
func (p *pump) release1(pk *Packet) {
	if sp := pk.sp; sp != nil {
		if sp.refs--; sp.refs == 0 {
			p.putBuf(sp)
		}
	}
	*pk = Packet{}
	p.freePkts = append(p.freePkts, pk)
}

// setRealtime gives the calling thread SCHED_FIFO priority.
func setRealtime() error {
	return unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: RealtimePriority}, 0)
}

func (p *pump) run() {
	// The thread is never unlocked: if it got a real-time priority, it must
	// exit with this goroutine rather than run others.
	runtime.LockOSThread()
	if p.realtime {
		if err := setRealtime(); err != nil {
			p.log.Warn("netem: no real-time priority for the forwarding thread; timing may suffer under load", "direction", p.name, "err", err)
		} else {
			p.isRT = true
		}
	}
	defer func() { p.elapsed = time.Since(p.start) }()
	emit := func(pk *Packet, at uint64) { p.pending = append(p.pending, departure{pk, at}) }
	fds := []unix.PollFd{{Fd: int32(p.in), Events: unix.POLLIN}, {Fd: int32(p.wake), Events: unix.POLLIN}}
	var ts unix.Timespec
	for !p.stop.Load() {
		if !p.readAll(emit) {
			return
		}
		now := p.now()
		p.link.Advance(now, emit)
		p.release(now)
		next, have := p.link.NextService()
		if len(p.pending) > 0 && (!have || p.pending[0].at < next) {
			next, have = p.pending[0].at, true
		}
		var tsp *unix.Timespec
		if have {
			now = p.now()
			if next <= now {
				continue
			}
			ts = unix.NsecToTimespec(int64(next-now) * 1000)
			tsp = &ts
		}
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Ppoll(fds, tsp, nil); err != nil && err != unix.EINTR {
			p.log.Error("netem: poll", "direction", p.name, "err", err)
			return
		}
	}
}

// readAll reads what the input device holds, up to 256 reads, and offers
// every segment to the link. It reports false on a fatal read error.
func (p *pump) readAll(emit func(*Packet, uint64)) bool {
	for range 256 {
		sp := p.getBuf()
		n, err := unix.Read(p.in, sp.buf)
		if err != nil {
			p.putBuf(sp)
			switch err {
			case unix.EAGAIN:
				return true
			case unix.EINTR:
				continue
			}
			p.log.Error("netem: read TUN", "direction", p.name, "err", err)
			return false
		}
		p.reads++
		if n <= vnetHdrLen {
			p.putBuf(sp)
			continue
		}
		sp.n = n
		sp.parse()
		if sp.nseg == 1 && n <= smallBufSize {
			small := p.getSmall()
			small.n = copy(small.buf, sp.buf[:n])
			small.parse()
			p.putBuf(sp)
			sp = small
		}
		enq := p.now()
		p.link.Advance(enq, emit)
		sp.refs = 1 // this loop's own reference, so that drops cannot free sp early
		for i := range sp.nseg {
			pk := p.getPkt()
			pk.sp, pk.seg, pk.Enq, pk.Size = sp, i, enq, sp.segSize(i)
			sp.refs++
			if !p.link.Arrive(pk) {
				p.release1(pk)
			}
		}
		if sp.refs--; sp.refs == 0 {
			p.putBuf(sp)
		}
	}
	return true
}

// release writes every packet whose delivery time has come: consecutive
// segments of one GSO packet go out as one write.
func (p *pump) release(now uint64) {
	n := 0
	for n < len(p.pending) && p.pending[n].at <= now {
		n++
	}
	if n == 0 {
		return
	}
	due := p.pending[:n]
	for i := 0; i < n; {
		sp := due[i].p.sp
		j := i + 1
		if sp.nseg > 1 {
			for j < n && due[j].p.sp == sp && due[j].p.seg == due[j-1].p.seg+1 {
				j++
			}
		}
		b := sp.run(due[i].p.seg, due[j-1].p.seg+1)
		for {
			_, err := unix.Write(p.out, b) // any other failure is like a lost packet
			if err != unix.EINTR {
				break
			}
		}
		p.writes++
		i = j
	}
	for _, d := range due {
		lateness := now - d.at
		if lateness > uint64(LateThreshold/time.Microsecond) {
			p.late++
		}
		p.maxLate = max(p.maxLate, lateness)
		p.release1(d.p)
	}
	copy(p.pending, p.pending[n:])
	clear(p.pending[len(p.pending)-n:])
	p.pending = p.pending[:len(p.pending)-n]
}

func (p *pump) report(kernelDrops uint64) DirectionReport {
	// The link counts a packet delivered when it leaves the queue; the
	// packets still in the delay (p.pending) were never written.
	st := p.link.Stats()
	for _, d := range p.pending {
		st.Delivered--
		st.DeliveredBytes -= uint64(d.p.size())
	}
	return DirectionReport{
		LinkStats:   st,
		InFlight:    uint64(len(p.pending)),
		Queued:      uint64(p.link.QueueLen()),
		Late:        p.late,
		MaxLate:     time.Duration(p.maxLate) * time.Microsecond,
		KernelDrops: kernelDrops,
		Elapsed:     p.elapsed,
		Reads:       p.reads,
		Writes:      p.writes,
		Realtime:    p.isRT,
	}
}

// SuggestedGOMAXPROCS is the GOMAXPROCS a process running an emulator
// should use: two Ps per CPU for its other goroutines (which spend much of
// their time in socket system calls) plus one for each forwarding thread,
// so that a forwarding thread returning from a system call finds an idle P
// instead of waiting for a normal-priority thread to schedule it.
func SuggestedGOMAXPROCS() int { return 2*runtime.NumCPU() + 2 }
