package bots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
	"github.com/pion/rtp"
	"github.com/pion/transport/v4"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu"
	"github.com/xrealm/xrealm/volumetric"
)

// VolumetricConfig configures a volumetric bot: a headless SFU client that
// replays a pre-encoded Clip as point-cloud tracks and measures what it
// receives.
type VolumetricConfig struct {
	NC              *nats.Conn
	Session, Client string
	// ID is the client number in fragment headers (unique in the session).
	ID        uint32
	Site      string
	Near      []string
	Estimator string
	// ICEAddresses restricts ICE to these local IPs (a namespace's address).
	ICEAddresses []string
	// Net, if set, is pion's network (sfu.NewDelayNet in the bench).
	Net  transport.Net
	Clip *Clip
	// Publish lists the descriptions sent (0 is the 15 % base); none makes
	// a pure receiver.
	Publish []int
	// Slots is the number of video receive slots.
	Slots int
	// Pose, if set, is sent after joining (the allocator ranks publishers
	// by it), and again every PoseEvery while the bot runs (Run).
	Pose *sfu.Pose
	// PoseEvery is how often Run sends the pose again: a node hears a
	// pose only when it is sent, so one that starts later (or forgot it)
	// learns where the bot is at the next resend. 0 means 5 s; SetPose
	// sends a new pose at once.
	PoseEvery time.Duration
	// MTU of RTP payloads; 0 means 1200. It must be larger than
	// volumetric.HeaderSize (DialVolumetric refuses it otherwise).
	MTU int
	// Deadline for a description to complete; 0 means 500 ms.
	Deadline time.Duration
	// ReportEvery sends the frame report to the node (op stats); 0 means 1 s.
	ReportEvery time.Duration
	// Phase, if not 0, puts frame captures at the wall-clock instants t
	// with t mod period = Phase: publishers started together would
	// otherwise capture every frame at the same instant, which independent
	// cameras do not. 0 starts at once.
	Phase time.Duration
	// ReportInterval is the RTCP report interval per stream
	// (sfu.ClientConfig.ReportInterval); 0 means 1 s.
	ReportInterval time.Duration
	Logger         *slog.Logger
}

// VolumetricStats is what a bot received in its measurement window.
type VolumetricStats struct {
	// Descs counts, per publisher ID, the descriptions captured in the
	// window that completed within the deadline from their capture.
	Descs map[uint32][volumetric.Descriptions]uint64 `json:"descs"`
	// Latency is capture → complete description, µs, late ones included.
	Latency *hdrhistogram.Snapshot `json:"latency"`
	// Packets is the number of distinct RTP packets that arrived in the
	// window, Expected the sequence-number span they cover: loss after
	// retransmission is 1 - Packets/Expected.
	Packets  uint64 `json:"packets"`
	Expected uint64 `json:"expected"`
	// Sent is the number of frames this bot published in the window.
	Sent uint64 `json:"sent"`
}

// VolumetricBot is one connected bot.
type VolumetricBot struct {
	cfg    VolumetricConfig
	client *sfu.Client
	frames *volumetric.FrameTracker

	// poseMu orders the pose's sends (SetPose, the resends): a resend of
	// the old pose must not reach the node after the new one.
	poseMu sync.Mutex
	pose   *sfu.Pose

	mu       sync.Mutex
	from, to time.Time
	descs    map[uint32][volumetric.Descriptions]uint64
	hist     *hdrhistogram.Histogram
	packets  uint64
	expected uint64
	sent     uint64
}

// DialVolumetric joins the session and starts receiving.
func DialVolumetric(ctx context.Context, cfg VolumetricConfig) (*VolumetricBot, error) {
	if cfg.Clip == nil {
		return nil, errors.New("bots: volumetric bot without a clip")
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1200
	}
	if cfg.MTU <= volumetric.HeaderSize {
		// Every frame would fail to packetize in Run.
		return nil, fmt.Errorf("bots: volumetric bot %s: MTU %d leaves no room for payload after the %d-byte fragment header", cfg.Client, cfg.MTU, volumetric.HeaderSize)
	}
	if cfg.Deadline == 0 {
		cfg.Deadline = 500 * time.Millisecond
	}
	if cfg.ReportEvery == 0 {
		cfg.ReportEvery = time.Second
	}
	if cfg.PoseEvery <= 0 {
		cfg.PoseEvery = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &VolumetricBot{cfg: cfg, frames: volumetric.NewFrameTracker(cfg.Deadline, 1024),
		descs: map[uint32][volumetric.Descriptions]uint64{}, hist: NewHistogram()}
	var pub []sfu.PublishTrack
	for _, d := range cfg.Publish {
		if d < 0 || d >= volumetric.Descriptions {
			return nil, fmt.Errorf("bots: description %d out of range", d)
		}
		pub = append(pub, sfu.PublishTrack{ID: fmt.Sprintf("pc%d", d), Mime: sfu.MimeTypePointCloud})
	}
	c, err := sfu.Dial(ctx, sfu.ClientConfig{NC: cfg.NC, Session: cfg.Session, Client: cfg.Client, Site: cfg.Site, Near: cfg.Near,
		Estimator: cfg.Estimator, ICEAddresses: cfg.ICEAddresses, Net: cfg.Net, Publish: pub, VideoSlots: cfg.Slots, OnTrack: b.onTrack, ReportInterval: cfg.ReportInterval})
	if err != nil {
		return nil, err
	}
	b.client = c
	if cfg.Pose != nil {
		if err := b.SetPose(ctx, *cfg.Pose); err != nil {
			c.Close()
			return nil, err
		}
	}
	return b, nil
}

// SetPose makes p the bot's pose and sends it to its node at once; Run
// sends it again every PoseEvery.
func (b *VolumetricBot) SetPose(ctx context.Context, p sfu.Pose) error {
	b.poseMu.Lock()
	defer b.poseMu.Unlock()
	b.pose = &p
	if err := b.client.SetPose(ctx, p); err != nil {
		return fmt.Errorf("bots: %s: send pose: %w", b.cfg.Client, err)
	}
	return nil
}

// resendPose sends the bot's pose, if it has one, again.
func (b *VolumetricBot) resendPose(ctx context.Context) error {
	b.poseMu.Lock()
	defer b.poseMu.Unlock()
	if b.pose == nil {
		return nil
	}
	return b.client.SetPose(ctx, *b.pose)
}

// keepPose sends the pose again every PoseEvery until ctx ends.
func (b *VolumetricBot) keepPose(ctx context.Context) {
	t := time.NewTicker(b.cfg.PoseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := b.resendPose(rctx); err != nil && ctx.Err() == nil {
				b.cfg.Logger.Debug("pose not sent again", "bot", b.cfg.Client, "err", err)
			}
			cancel()
		}
	}
}

// Node is the SFU node the bot was assigned.
func (b *VolumetricBot) Node() string { return b.client.Node }

// OpenWindow starts a measurement window [from, to) and clears the
// window's counters: descriptions count by capture time, packets by
// arrival time.
func (b *VolumetricBot) OpenWindow(from, to time.Time) {
	b.mu.Lock()
	b.from, b.to = from, to
	b.descs = map[uint32][volumetric.Descriptions]uint64{}
	b.hist.Reset()
	b.packets, b.expected, b.sent = 0, 0, 0
	b.mu.Unlock()
}

func (b *VolumetricBot) inWindow(t time.Time) bool {
	return !b.from.IsZero() && !t.Before(b.from) && t.Before(b.to)
}

// Stats returns the window's counters.
func (b *VolumetricBot) Stats() VolumetricStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := make(map[uint32][volumetric.Descriptions]uint64, len(b.descs))
	for k, v := range b.descs {
		d[k] = v
	}
	return VolumetricStats{Descs: d, Latency: b.hist.Export(), Packets: b.packets, Expected: b.expected, Sent: b.sent}
}

// onTrack reads one receive slot until it closes.
func (b *VolumetricBot) onTrack(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
	go func() {
		var seen seqWindow
		for {
			pkt, _, err := tr.ReadRTP()
			if err != nil {
				return
			}
			now := time.Now()
			fresh, span := seen.add(pkt.SequenceNumber)
			h, lat, done := b.frames.Observe(now, pkt.Payload)
			b.mu.Lock()
			if b.inWindow(now) {
				if fresh {
					b.packets++
				}
				b.expected += span
			}
			if done && int(h.Description) < volumetric.Descriptions && b.inWindow(time.UnixMicro(int64(h.CaptureUs))) {
				// every completion counts in the latency; only those within
				// the deadline from capture count as delivered (a late
				// retransmission is no use to a renderer)
				_ = b.hist.RecordValue(max(lat.Microseconds(), 1))
				if lat <= b.cfg.Deadline {
					c := b.descs[h.Client]
					c[h.Description]++
					b.descs[h.Client] = c
				}
			}
			b.mu.Unlock()
		}
	}()
}

// Run publishes the clip until ctx ends, reports frame statistics to the
// node and sends the bot's pose again every PoseEvery. The reports and
// resends end when Run returns, with an error too.
func (b *VolumetricBot) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var helpers sync.WaitGroup
	defer func() {
		cancel()
		helpers.Wait()
	}()
	helpers.Go(func() { b.report(ctx) })
	helpers.Go(func() { b.keepPose(ctx) })
	if len(b.cfg.Publish) == 0 {
		<-ctx.Done()
		return nil
	}
	clip := b.cfg.Clip
	period := time.Duration(float64(time.Second) / clip.FPS)
	seqs := make([]uint16, len(b.cfg.Publish))
	for i := range seqs {
		seqs[i] = uint16(b.cfg.ID*7919 + uint32(i)*104729)
	}
	if b.cfg.Phase > 0 {
		now := time.Now().UnixNano()
		wait := (int64(b.cfg.Phase%period) - now%int64(period) + int64(period)) % int64(period)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Duration(wait)):
		}
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for frame := uint32(0); ; frame++ {
		now := time.Now()
		f := clip.Frames[int(frame)%len(clip.Frames)]
		for i, d := range b.cfg.Publish {
			frags, err := volumetric.Packetize(volumetric.Header{Description: uint8(d), Client: b.cfg.ID, Frame: frame, CaptureUs: uint64(now.UnixMicro())}, f[d], b.cfg.MTU)
			if err != nil {
				return err
			}
			tr := b.client.Tracks[fmt.Sprintf("pc%d", d)]
			ts := uint32(float64(frame) * 90000 / clip.FPS)
			for k, p := range frags {
				seqs[i]++
				if err := tr.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seqs[i], Timestamp: ts, Marker: k == len(frags)-1}, Payload: p}); err != nil {
					return fmt.Errorf("bots: %s: %w", b.cfg.Client, err)
				}
			}
		}
		b.mu.Lock()
		if b.inWindow(now) {
			b.sent++
		}
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (b *VolumetricBot) report(ctx context.Context) {
	t := time.NewTicker(b.cfg.ReportEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := b.client.ReportFrames(rctx, sfu.FrameReportOf(b.frames.Stats(now))); err != nil && ctx.Err() == nil {
				b.cfg.Logger.Debug("frame report not sent", "bot", b.cfg.Client, "err", err)
			}
			cancel()
		}
	}
}

// Close leaves the session.
func (b *VolumetricBot) Close() { b.client.Close() }

// seqWindow tells new RTP sequence numbers from repeated ones and how far
// the highest one advanced.
type seqWindow struct {
	started bool
	highest uint16
	seen    [1 << 16 / 64]uint64
}

// add marks seq and returns whether it is new and by how many sequence
// numbers the highest advanced.
func (w *seqWindow) add(seq uint16) (fresh bool, advance uint64) {
	if !w.started {
		w.started, w.highest = true, seq
		w.mark(seq)
		return true, 1
	}
	if d := int16(seq - w.highest); d > 0 {
		for s := w.highest + 1; s != seq+1; s++ {
			w.clear(s + 1<<15) // forget the far half of the ring
		}
		w.highest = seq
		advance = uint64(d)
	}
	if w.seen[seq/64]&(1<<(seq%64)) != 0 {
		return false, advance
	}
	w.mark(seq)
	return true, advance
}

func (w *seqWindow) mark(s uint16)  { w.seen[s/64] |= 1 << (s % 64) }
func (w *seqWindow) clear(s uint16) { w.seen[s/64] &^= 1 << (s % 64) }
