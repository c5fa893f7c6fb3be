package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/sfu"
	"github.com/xrealm/xrealm/topic"
	"github.com/xrealm/xrealm/volumetric"
)

// runPointCloudBot implements `xrealm bots pointcloud`: one headless SFU
// client that replays the synthetic figure, split into the three MDC
// descriptions and Draco-encoded once, as point-cloud RTP tracks pc0-pc2.
// It prints one JSON line on stdout when it publishes ({"ready": true, ...}
// with the clip's size), or {"skip": "..."} and exits 0 when Google Draco's
// tools are missing. It runs until interrupted or until its stdin closes
// when --stdin is set (how the web client's tests stop it).
func runPointCloudBot(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bots pointcloud", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	bus := fs.String("bus", "nats://127.0.0.1:4222", "NATS URL of the SFU's bus")
	token := fs.String("token", "", "NATS token with the rights of an SFU client (xrealm token --role sfu --data <the server's data dir>); empty for an --insecure bus")
	session := fs.String("session", "", "SFU session: a scene as NS/SCENE, or its session id {ns}-{scene} (as the web client names it)")
	client := fs.String("client", "pcbot", "SFU client id (the web client places the cloud at the avatar of this ARENA client)")
	id := fs.Uint("id", 77, "client number in fragment headers")
	points := fs.Int("points", 10000, "points per frame")
	frames := fs.Int("frames", 15, "frames in the replayed loop")
	fps := fs.Float64("fps", 15, "frames per second")
	x := fs.Float64("x", 0, "the publisher's x position, sent as its SFU pose")
	z := fs.Float64("z", -3, "the publisher's z position, sent as its SFU pose")
	site := fs.String("site", "", "the site to be placed at (xrealm sfu --site): a node there if one runs, else by load")
	stdin := fs.Bool("stdin", false, "stop when stdin closes")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	// Each setting named alone, with its flag (the clip's error listed
	// its three numbers), and an --id beyond 32 bits refused, not cut.
	switch {
	case *id > math.MaxUint32:
		return usagef("--id %d: want a client number from 0 to %d", *id, uint32(math.MaxUint32))
	case *points < volumetric.Descriptions:
		return usagef("--points %d: want at least %d (a point per description)", *points, volumetric.Descriptions)
	case *frames < 1:
		return usagef("--frames %d: want at least 1", *frames)
	case !(*fps >= bots.MinClipFPS && *fps <= bots.MaxClipFPS):
		return usagef("--fps %g: want %g to %g frames per second", *fps, bots.MinClipFPS, float64(bots.MaxClipFPS))
	}
	if *session == "" {
		return usageErr(errors.New("--session is required: the scene as NS/SCENE, or its session id {ns}-{scene}"))
	}
	if ns, sc, ok := strings.Cut(*session, "/"); ok {
		if _, _, err := topic.ParseSceneName(*session); err != nil {
			return usagef("--session: %w", err)
		}
		*session = sfu.SessionOf(ns, sc)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	if *stdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	out := json.NewEncoder(os.Stdout)
	clip, err := bots.EncodeClip(ctx, bots.ClipConfig{Points: *points, Frames: *frames, FPS: *fps, Seed: 1})
	if errors.Is(err, volumetric.ErrNoDraco) {
		return out.Encode(map[string]any{"skip": err.Error()})
	}
	if err != nil {
		return err
	}
	nc, perms, err := connectBus(*bus, *token, "xrealm-pointcloud-bot", log)
	if err != nil {
		return fmt.Errorf("bus %s: %w", *bus, err)
	}
	defer nc.Close()
	// A token without the rights of an SFU client (a scene viewer's) has
	// its join refused by the bus, which the request only sees as a
	// timeout: the bot stops at the first permissions violation instead.
	rctx, refused := context.WithCancelCause(ctx)
	defer refused(nil)
	go func() {
		select {
		case pe := <-perms:
			refused(pe)
		case <-rctx.Done():
		}
	}()
	// permErr is err, or the violation that ended the bot
	permErr := func(err error) error {
		var pe *sfu.PermissionError
		if errors.As(context.Cause(rctx), &pe) {
			return pe
		}
		return err
	}
	dctx, cancel := context.WithTimeout(rctx, 30*time.Second)
	defer cancel()
	b, err := bots.DialVolumetric(dctx, bots.VolumetricConfig{NC: nc, Session: *session, Client: *client, ID: uint32(*id), Clip: clip, Site: *site,
		Publish: []int{0, 1, 2}, ICEAddresses: []string{"127.0.0.1"}, Logger: log,
		Pose: &sfu.Pose{Position: [3]float64{*x, 0, *z}, Forward: [3]float64{0, 0, 1}, FOV: 1.5}})
	if err != nil {
		return permErr(err)
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
	return permErr(b.Run(rctx))
}
