package benchsfu

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/xrealm/xrealm/bench/tmpfiles"

	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/sfu"
)

// The bench's child processes talk to the orchestrator by lines on their
// standard input and output:
//
//	bus:  → "ready", then "nodes 1,2,..." whenever the live SFU nodes change
//	bots: → "connected"; ← "window <from µs> <to µs>"; → "result <json>"

// RunBus runs the bus (insecure NATS at addr) and the session manager until
// ctx ends.
func RunBus(ctx context.Context, addr string, out io.Writer, log *slog.Logger) error {
	dir, err := tmpfiles.MkdirTemp("xrsfu-bus-") // one of a bus killed is removed by the next
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "xrsfu-bus", NATSAddr: addr, Insecure: true, MaxPayload: 1 << 20, Logger: log})
	if err != nil {
		return err
	}
	defer b.Shutdown()
	nc, err := b.Connect("manager")
	if err != nil {
		return err
	}
	defer nc.Close()
	m, err := sfu.StartManager(nc, log)
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Fprintln(out, "ready")
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if now := strings.Join(m.Nodes(), ","); now != last {
				last = now
				fmt.Fprintln(out, "nodes", now)
			}
		}
	}
}

// BotsConfig is one site's bots process.
type BotsConfig struct {
	Bus       string // NATS URL
	Site      string
	Near      []string
	Addr      string // the site's address for ICE
	Users     []int  // user numbers (1..N) at this site
	N         int    // users in the session
	Senders   []int  // scenario 2: users that send 3 descriptions; empty: everyone sends the base
	ClipPath  string
	Estimator string
	Delays    string // sfu.ParseDelayRoutes
	// Aligned starts every publisher's frame clock at the same instant;
	// otherwise user u starts at frac(u·φ) of the frame period (spread).
	Aligned bool
	// ReportInterval is the bots' RTCP report interval per stream.
	ReportInterval time.Duration
	Log            *slog.Logger
}

// Phase is when user u's first frame is captured within the frame period:
// frac(u·φ) of it, a low-discrepancy spread that is the same in every
// process, so the users of all sites interleave.
func Phase(u int, period time.Duration) time.Duration {
	f := math.Mod(float64(u)*0.6180339887498949, 1)
	return time.Duration(f * float64(period))
}

// BotResult is one bot's outcome, printed by the bots process.
type BotResult struct {
	ID      uint32               `json:"id"`
	Node    string               `json:"node"`
	Publish []int                `json:"publish"`
	Stats   bots.VolumetricStats `json:"stats"`
	Error   string               `json:"error,omitempty"`
}

// RunBots connects the site's bots, reports "connected", waits for the
// window on in, and prints the results when it closed.
func RunBots(ctx context.Context, cfg BotsConfig, in io.Reader, out io.Writer) error {
	clip, err := bots.LoadClip(cfg.ClipPath)
	if err != nil {
		return err
	}
	routes, err := sfu.ParseDelayRoutes(cfg.Delays)
	if err != nil {
		return err
	}
	var (
		mu  sync.Mutex
		bs  = map[int]*bots.VolumetricBot{}
		pub = map[int][]int{}
		wg  sync.WaitGroup
	)
	sem := make(chan struct{}, 4)
	errs := make(chan error, len(cfg.Users))
	for _, u := range cfg.Users {
		publish, slots := []int{0}, min(cfg.N-1, 63)
		if len(cfg.Senders) > 0 {
			publish, slots = nil, 3*len(cfg.Senders)
			for _, s := range cfg.Senders {
				if s == u {
					publish = []int{0, 1, 2}
				}
			}
		}
		// users stand on a circle of 3 m facing its centre
		a := 2 * math.Pi * float64(u) / float64(cfg.N)
		pose := &sfu.Pose{Position: [3]float64{3 * math.Cos(a), 0, 3 * math.Sin(a)}, Forward: [3]float64{-math.Cos(a), 0, -math.Sin(a)}, FOV: math.Pi / 2}
		var phase time.Duration
		if !cfg.Aligned {
			phase = Phase(u, time.Duration(float64(time.Second)/clip.FPS))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			nc, err := nats.Connect(cfg.Bus, nats.Name(fmt.Sprintf("bot-u%d", u)))
			if err != nil {
				errs <- fmt.Errorf("bot u%d: bus %s: %w", u, cfg.Bus, err)
				return
			}
			dn, err := sfu.NewDelayNet(routes)
			if err != nil {
				errs <- err
				return
			}
			var b *bots.VolumetricBot
			for try := 0; try < 5; try++ {
				dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				b, err = bots.DialVolumetric(dctx, bots.VolumetricConfig{NC: nc, Session: "bench", Client: fmt.Sprintf("u%d", u), ID: uint32(u),
					Site: cfg.Site, Near: cfg.Near, Estimator: cfg.Estimator, ICEAddresses: []string{cfg.Addr}, Net: dn, Clip: clip,
					Publish: publish, Slots: slots, Pose: pose, MTU: 1400, Phase: phase, ReportInterval: cfg.ReportInterval, Logger: cfg.Log})
				cancel()
				if err == nil || ctx.Err() != nil {
					break
				}
				cfg.Log.Warn("bot join failed, retrying", "user", u, "err", err)
			}
			if err != nil {
				errs <- fmt.Errorf("bot u%d: %w", u, err)
				return
			}
			mu.Lock()
			bs[u], pub[u] = b, publish
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	defer func() {
		for _, b := range bs {
			b.Close()
		}
	}()
	for err := range errs {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	for _, b := range bs {
		go func() {
			if err := b.Run(rctx); err != nil {
				cfg.Log.Warn("bot stopped", "err", err)
			}
		}()
	}
	lag := sfu.StartLagProbe(rctx, 5*time.Millisecond)
	fmt.Fprintln(out, "connected")
	var from, to int64
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if n, _ := fmt.Sscanf(sc.Text(), "window %d %d", &from, &to); n == 2 {
			break
		}
	}
	if from == 0 {
		return fmt.Errorf("bots %s: no window received", cfg.Site)
	}
	f, t := time.UnixMicro(from), time.UnixMicro(to)
	for _, b := range bs {
		b.OpenWindow(f, t)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(f)):
	}
	lag.Take() // the window's lag only
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(t)):
	}
	lagJSON, _ := json.Marshal(lag.Take())
	// descriptions captured before the end may complete up to their deadline after it
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(t) + 700*time.Millisecond):
	}
	fmt.Fprintf(out, "lag %s\n", lagJSON)
	users := make([]int, 0, len(bs))
	for u := range bs {
		users = append(users, u)
	}
	sort.Ints(users)
	enc := json.NewEncoder(out)
	for _, u := range users {
		fmt.Fprint(out, "result ")
		if err := enc.Encode(BotResult{ID: uint32(u), Node: bs[u].Node(), Publish: pub[u], Stats: bs[u].Stats()}); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "done")
	return nil
}
