// Command pcpub is the point-cloud publisher of the web client's end-to-end
// test (web/test/pointcloud.test.ts): a real SFU client (bots.VolumetricBot)
// that replays the synthetic figure, split into the three MDC descriptions
// and Draco-encoded once, as point-cloud RTP tracks pc0-pc2.
//
// It prints one JSON line on stdout when it publishes, {"ready": true, ...}
// with the clip's size, or {"skip": "..."} and exits 0 when Google Draco's
// tools are missing. It runs until SIGTERM, SIGINT or its stdin closes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/sfu"
	"github.com/xrealm/xrealm/volumetric"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pcpub:", err)
		os.Exit(1)
	}
}

func run() error {
	bus := flag.String("bus", "nats://127.0.0.1:4222", "NATS URL of the SFU's bus")
	token := flag.String("token", "", "NATS token (xrealm token --role sfu); empty for an --insecure bus")
	session := flag.String("session", "", "SFU session")
	client := flag.String("client", "pcbot", "SFU client id (the web client places the cloud at the avatar of this ARENA client)")
	id := flag.Uint("id", 77, "client number in fragment headers")
	points := flag.Int("points", 10000, "points per frame")
	frames := flag.Int("frames", 15, "frames in the replayed loop")
	fps := flag.Float64("fps", 15, "frames per second")
	x := flag.Float64("x", 0, "the publisher's position, sent as its SFU pose")
	z := flag.Float64("z", -3, "")
	flag.Parse()
	if *session == "" {
		return errors.New("--session is required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // the test closes stdin when it is done with us
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	out := json.NewEncoder(os.Stdout)
	clip, err := bots.EncodeClip(ctx, bots.ClipConfig{Points: *points, Frames: *frames, FPS: *fps, Seed: 1})
	if errors.Is(err, volumetric.ErrNoDraco) {
		return out.Encode(map[string]any{"skip": err.Error()})
	}
	if err != nil {
		return err
	}
	opts := []nats.Option{nats.Name("pcpub")}
	if *token != "" {
		opts = append(opts, nats.Token(*token))
	}
	nc, err := nats.Connect(*bus, opts...)
	if err != nil {
		return fmt.Errorf("bus %s: %w", *bus, err)
	}
	defer nc.Close()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := bots.DialVolumetric(dctx, bots.VolumetricConfig{NC: nc, Session: *session, Client: *client, ID: uint32(*id), Clip: clip,
		Publish: []int{0, 1, 2}, ICEAddresses: []string{"127.0.0.1"}, Logger: log,
		Pose: &sfu.Pose{Position: [3]float64{*x, 0, *z}, Forward: [3]float64{0, 0, 1}, FOV: 1.5}})
	if err != nil {
		return err
	}
	defer b.Close()
	var bytes int
	for _, f := range clip.Frames {
		for _, d := range f {
			bytes += len(d)
		}
	}
	if err := out.Encode(map[string]any{"ready": true, "node": b.Node(), "points": clip.Points, "descPoints": clip.DescSizes,
		"fps": clip.FPS, "bytesPerFrame": bytes / len(clip.Frames)}); err != nil {
		return err
	}
	return b.Run(ctx)
}
