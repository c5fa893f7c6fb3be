package benchbus

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"time"

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

// Profile runs one profiled load and writes the CPU profile.
func Profile(ctx context.Context, pc ProfileConfig) error {
	if pc.Log == nil {
		pc.Log = slog.Default()
	}
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
		"--size", strconv.Itoa(pc.Size), "--behaviour", "randomwalk", "--duration", (pc.Duration + 3*time.Second).String())
	if pc.Insecure {
		args = append(args, "--no-auth")
	} else {
		args = append(args, "--token-url", "http://"+cfg.HTTPAddr)
	}
	cmd := exec.CommandContext(ctx, pc.BotsCmd[0], args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the generator: %w", err)
	}
	defer cmd.Wait()
	time.Sleep(3 * time.Second) // connect and warm up
	f, err := os.Create(pc.Out)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	pc.Log.Info("profiling xrealm", "users", pc.Users, "for", pc.Duration, "insecure", pc.Insecure, "profile", pc.Out)
	select {
	case <-time.After(pc.Duration):
	case <-ctx.Done():
	}
	pprof.StopCPUProfile()
	return ctx.Err()
}
