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
}

// Emulator is a running emulated link between a client namespace and a host
// namespace.
type Emulator struct {
	ClientNS, HostNS string
	cfg              Config
	log              *slog.Logger
	cancel           context.CancelFunc
	wg               sync.WaitGroup
	files            []io.Closer // TUN devices and namespaces
	logs             []*os.File
	up, down         *pump
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
	e = &Emulator{ClientNS: id + "-c", HostNS: id + "-h", cfg: cfg, log: cfg.Logger}
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
	var ctun, htun *os.File
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
	mk := func(name string, tr *Trace, seed uint64, in, out *os.File) (*pump, error) {
		lc := LinkConfig{Trace: tr, Delay: cfg.Delay, QueuePackets: cfg.QueuePackets, QueueBytes: cfg.QueueBytes, Loss: cfg.Loss, Seed: seed}
		if cfg.LogDir != "" {
			f, err := os.Create(filepath.Join(cfg.LogDir, name+".log"))
			if err != nil {
				return nil, fmt.Errorf("netem: create %s log: %w", name, err)
			}
			lc.Log = f
			e.logs = append(e.logs, f)
		}
		l, err := NewLink(lc)
		if err != nil {
			return nil, err
		}
		return &pump{name: name, in: in, out: out, link: l}, nil
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
	pctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	start := time.Now()
	for _, p := range []*pump{e.up, e.down} {
		p.start = start
		p.ch = make(chan []*Packet, 1024)
		e.wg.Add(2)
		go func() { defer e.wg.Done(); p.read(pctx) }()
		go func() { defer e.wg.Done(); p.run(pctx) }()
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

// DirectionReport describes one direction after Close.
type DirectionReport struct {
	LinkStats
	// Late counts packets that left more than LateThreshold after their
	// scheduled time; MaxLate is the worst lateness.
	Late    uint64
	MaxLate time.Duration
	// KernelDrops counts packets the kernel dropped because the emulator
	// did not read its TUN device fast enough.
	KernelDrops uint64
	// Elapsed is how long the link ran.
	Elapsed time.Duration
}

// Report summarises a run.
type Report struct {
	Up, Down DirectionReport
}

// KeptUp reports whether the emulator delivered every packet on time. When
// it returns an error, measurements taken through the link are not valid.
func (r Report) KeptUp() error {
	for _, d := range []struct {
		name string
		r    DirectionReport
	}{{"uplink", r.Up}, {"downlink", r.Down}} {
		tot := d.r.Delivered
		if tot == 0 {
			continue
		}
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
		if e.cancel != nil {
			e.cancel()
		}
		// Reading the kernel's drop counters needs the devices alive.
		ck, hk := tunDrops(e.ClientNS), tunDrops(e.HostNS)
		e.closeTUNs()
		e.wg.Wait()
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

// pump forwards one direction: a reader goroutine batches packets from the
// input TUN, and run feeds them through the Link and writes them out when
// their delay has passed.
type pump struct {
	name    string
	in, out *os.File
	link    *Link
	start   time.Time
	ch      chan []*Packet

	pending       []departure // FIFO: the delay is constant
	late, maxLate uint64
	elapsed       time.Duration
	free          [][]byte
	freeMu        sync.Mutex
}

type departure struct {
	p  *Packet
	at uint64
}

func (p *pump) now() uint64 { return uint64(time.Since(p.start) / time.Microsecond) }

func (p *pump) getBuf() []byte {
	p.freeMu.Lock()
	defer p.freeMu.Unlock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	return make([]byte, 65536)
}

func (p *pump) putBuf(b []byte) {
	p.freeMu.Lock()
	p.free = append(p.free, b[:cap(b)])
	p.freeMu.Unlock()
}

// read moves packets from the input TUN to the channel, up to 64 per batch:
// it keeps reading until the device is empty before handing a batch over.
func (p *pump) read(ctx context.Context) {
	rc, err := p.in.SyscallConn()
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		var batch []*Packet
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			for len(batch) < 64 {
				buf := p.getBuf()
				n, err := unix.Read(int(fd), buf)
				if err == unix.EAGAIN {
					p.putBuf(buf)
					return len(batch) > 0
				}
				if err != nil {
					p.putBuf(buf)
					rerr = err
					return true
				}
				batch = append(batch, &Packet{Data: buf[:n], Enq: p.now()})
			}
			return true
		})
		if len(batch) > 0 {
			select {
			case p.ch <- batch:
			case <-ctx.Done():
				return
			}
		}
		if err != nil || (rerr != nil && rerr != unix.EINTR) {
			return
		}
	}
}

func (p *pump) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	emit := func(pk *Packet, at uint64) { p.pending = append(p.pending, departure{pk, at}) }
	rc, err := p.out.SyscallConn()
	if err != nil {
		return
	}
	defer func() { p.elapsed = time.Since(p.start) }()
	for {
		now := p.now()
		p.link.Advance(now, emit)
		p.release(rc, now)
		var next uint64
		have := false
		if t, ok := p.link.NextService(); ok {
			next, have = t, true
		}
		if len(p.pending) > 0 && (!have || p.pending[0].at < next) {
			next, have = p.pending[0].at, true
		}
		if have {
			if next <= p.now() {
				continue
			}
			timer.Reset(time.Duration(next-p.now()) * time.Microsecond)
		}
		select {
		case <-ctx.Done():
			return
		case batch := <-p.ch:
			p.accept(batch, emit)
			for more := true; more; {
				select {
				case b := <-p.ch:
					p.accept(b, emit)
				default:
					more = false
				}
			}
		case <-timer.C:
		}
		if have && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

func (p *pump) accept(batch []*Packet, emit func(*Packet, uint64)) {
	for _, pk := range batch {
		p.link.Advance(pk.Enq, emit)
		if !p.link.Arrive(pk) {
			p.putBuf(pk.Data)
		}
	}
}

// release writes every packet whose delivery time has come, in one batch.
func (p *pump) release(rc interface {
	Write(func(uintptr) bool) error
}, now uint64) {
	n := 0
	for n < len(p.pending) && p.pending[n].at <= now {
		n++
	}
	if n == 0 {
		return
	}
	due := p.pending[:n]
	rc.Write(func(fd uintptr) bool {
		for _, d := range due {
			unix.Write(int(fd), d.p.Data) // a dropped write is like a lost packet
		}
		return true
	})
	for _, d := range due {
		lateness := now - d.at
		if lateness > uint64(LateThreshold/time.Microsecond) {
			p.late++
		}
		p.maxLate = max(p.maxLate, lateness)
		p.putBuf(d.p.Data)
	}
	copy(p.pending, p.pending[n:])
	clear(p.pending[len(p.pending)-n:])
	p.pending = p.pending[:len(p.pending)-n]
}

func (p *pump) report(kernelDrops uint64) DirectionReport {
	return DirectionReport{
		LinkStats:   p.link.Stats(),
		Late:        p.late,
		MaxLate:     time.Duration(p.maxLate) * time.Microsecond,
		KernelDrops: kernelDrops,
		Elapsed:     p.elapsed,
	}
}
