package benchbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/server"
)

// ProfileConfig profiles xrealm under the bus load without changing the
// server: the server runs in this process under the CPU profiler, and the
// generator runs as a child process (`xrealm bots`), so that the profile
// holds the server's work only.
type ProfileConfig struct {
	BotsCmd  []string // the xrealm executable; "bots" and flags follow
	Users    int
	Scenes   int
	Rate     float64
	Size     int
	Duration time.Duration
	Insecure bool
	Out      string // CPU profile file, for go tool pprof
	Log      *slog.Logger
}

// Check returns an error naming the flag of a setting Profile cannot
// run with. --profile-users 0 profiled an idle server: the generator
// refused to start, and the profile was written all the same.
func (pc *ProfileConfig) Check() error {
	switch {
	case pc.Users < 1:
		return fmt.Errorf("--profile-users %d: want at least 1", pc.Users)
	case pc.Scenes < 1:
		return fmt.Errorf("--profile-scenes %d: want at least 1", pc.Scenes)
	case pc.Duration <= 0:
		return fmt.Errorf("--profile-duration %v: want a duration above 0", pc.Duration)
	case pc.Size < 1:
		return fmt.Errorf("--size %d: want at least 1 (bytes)", pc.Size)
	case pc.Out == "":
		return errors.New("--profile: no profile file")
	case len(pc.BotsCmd) == 0:
		return errors.New("profile: no generator command")
	}
	return bots.CheckRate(pc.Rate)
}

// Profile runs one profiled load and writes the CPU profile.
func Profile(ctx context.Context, pc ProfileConfig) error {
	if pc.Log == nil {
		pc.Log = slog.Default()
	}
	if err := pc.Check(); err != nil {
		return fmt.Errorf("bench bus: %w", err)
	}
	// The profile file first: it failed after the server had started and
	// the generator had warmed up.
	f, err := os.Create(pc.Out)
	if err != nil {
		return fmt.Errorf("bench bus: --profile: %w", err)
	}
	defer f.Close()
	dir, err := os.MkdirTemp("", "xrealm-profile-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := server.Defaults()
	cfg.DataDir = dir
	if cfg.HTTPAddr, err = freeAddr(); err != nil {
		return err
	}
	if cfg.MQTTAddr, err = freeAddr(); err != nil {
		return err
	}
	cfg.HTTPSAddr, cfg.MQTTSAddr, cfg.MQTTWSAddr, cfg.NATSAddr, cfg.NATSWSAddr = "", "", "", "", ""
	cfg.UbiqAddr, cfg.UbiqWSSAddr, cfg.UbiqWSAddr = "", "", ""
	cfg.Insecure = pc.Insecure
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := server.Start(ctx, cfg, quiet)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	args := append(append([]string(nil), pc.BotsCmd[1:]...), "bots", "--addr", cfg.MQTTAddr,
		"--users", strconv.Itoa(pc.Users), "--scenes", strconv.Itoa(max(1, pc.Scenes)), "--rate", fmt.Sprint(pc.Rate),
		"--size", strconv.Itoa(pc.Size), "--behaviour", "randomwalk", "--duration", (pc.Duration + 10*time.Second).String()) // outlasts the profile; stopped after it
	if pc.Insecure {
		args = append(args, "--no-auth")
	} else {
		args = append(args, "--token-url", "http://"+cfg.HTTPAddr)
	}
	cmd := exec.CommandContext(ctx, pc.BotsCmd[0], args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	diesWithBench(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the generator: %w", err)
	}
	exited := make(chan struct{}) // closed when the generator has exited, with waitErr
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Signal(os.Interrupt) // it prints its totals
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()
	// A generator that ends before the profile does leaves a profile of a
	// server with less load than asked: an error, not a profile.
	genEnded := func() error {
		return fmt.Errorf("bench bus: the generator (xrealm bots) ended before the profile did (%v); its output is above", waitErr)
	}
	select { // connect and warm up
	case <-time.After(3 * time.Second):
	case <-exited:
		return genEnded()
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	pc.Log.Info("profiling xrealm", "users", pc.Users, "for", pc.Duration, "insecure", pc.Insecure, "profile", pc.Out)
	select {
	case <-time.After(pc.Duration):
	case <-exited:
		pprof.StopCPUProfile()
		return genEnded()
	case <-ctx.Done():
	}
	pprof.StopCPUProfile()
	return ctx.Err()
}
