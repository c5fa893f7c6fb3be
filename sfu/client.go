package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/nack"
	"github.com/pion/interceptor/pkg/report"
	"github.com/pion/interceptor/pkg/twcc"
	"github.com/pion/transport/v4"
	"github.com/pion/webrtc/v4"
)

// ClientConfig configures a Go client (tests, bots, benchmarks).
type ClientConfig struct {
	NC      *nats.Conn
	Session string
	Client  string
	Site    string
	// Near are further preferred sites (JoinRequest.Near).
	Near []string
	// Estimator names the estimator the node uses towards this client
	// ("gcc", "hera"); empty is the node's default.
	Estimator string
	// Publish lists the tracks to send: ID and codec MIME type. Point-cloud
	// descriptions are "pc0", "pc1", "pc2" with MimeTypePointCloud.
	Publish []PublishTrack
	// AudioSlots and VideoSlots are the receive slots to pre-negotiate;
	// point-cloud tracks use video slots.
	AudioSlots, VideoSlots int
	// ICEAddresses and Net as in Config.
	ICEAddresses []string
	Net          transport.Net
	// OnTrack is called for each receive slot once media flows.
	OnTrack func(*webrtc.TrackRemote, *webrtc.RTPReceiver)
	// OnEvent is called for each slot event.
	OnEvent func(Event)
	// ReportInterval as in Config: RTCP reports per stream; zero is 1 s.
	ReportInterval time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger

	// placed, if set, is called with each assignment before the offer goes
	// to its node (tests).
	placed func(Assignment)
	// offerTimeout, if set, returns how long an offer to node waits,
	// instead of offerTimeout (tests).
	offerTimeout func(node string) time.Duration
}

// PublishTrack is a track a client sends.
type PublishTrack struct {
	ID   string
	Mime string
}

// Client is a WebRTC client of the SFU that signals over the bus.
type Client struct {
	cfg    ClientConfig
	log    *slog.Logger
	Node   string
	PC     *webrtc.PeerConnection
	Tracks map[string]*webrtc.TrackLocalStaticRTP
	signal string
	evSub  *nats.Subscription
}

// Join retries: when the node a client was placed on does not answer its
// offer (it died after the manager checked it, or hangs), or the manager is
// busy, the client asks the manager again, joinAttempts times in all,
// waiting joinBackoff, then twice that. An offer waits at most
// offerTimeout. A node that did not answer is sent a leave for the client
// (it may have taken the offer) and excluded from the next placements.
const (
	joinAttempts = 3
	joinBackoff  = 200 * time.Millisecond
	offerTimeout = 10 * time.Second
)

// Dial joins: it asks the manager for a node, offers, and waits for the
// connection. When the node does not answer the offer, or the manager is
// busy, it asks the manager again (joinAttempts).
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	c := &Client{cfg: cfg, log: cfg.Logger, Tracks: map[string]*webrtc.TrackLocalStaticRTP{}}
	if c.log == nil {
		c.log = slog.Default()
	}
	if cfg.OnEvent != nil {
		var err error
		c.evSub, err = cfg.NC.Subscribe(subjectEvents(cfg.Session, cfg.Client), func(m *nats.Msg) {
			var ev Event
			if json.Unmarshal(m.Data, &ev) == nil {
				cfg.OnEvent(ev)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("sfu client: %w", err)
		}
	}
	if err := c.connect(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) connect(ctx context.Context) error {
	m := &webrtc.MediaEngine{}
	if err := RegisterCodecs(m); err != nil {
		return err
	}
	reg := &interceptor.Registry{}
	gen, _ := nack.NewGeneratorInterceptor()
	resp, _ := nack.NewResponderInterceptor()
	rr, _ := report.NewReceiverInterceptor(reportOpts[report.ReceiverOption](c.cfg.ReportInterval, report.ReceiverInterval)...)
	sr, _ := report.NewSenderInterceptor(reportOpts[report.SenderOption](c.cfg.ReportInterval, report.SenderInterval)...)
	tw, _ := twcc.NewSenderInterceptor()
	hx, _ := twcc.NewHeaderExtensionInterceptor()
	// the batcher first: the report interceptors write through it
	for _, f := range []interceptor.Factory{RTCPBatcherFactory{}, gen, resp, rr, sr, tw, hx} {
		reg.Add(f)
	}
	se := NewSettingEngine(c.cfg.ICEAddresses, 0, 0)
	if c.cfg.Net != nil {
		se.SetNet(c.cfg.Net)
	}
	api := webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(reg), webrtc.WithSettingEngine(se))
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return fmt.Errorf("sfu client: %w", err)
	}
	c.PC = pc
	for _, t := range c.cfg.Publish {
		tr, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: t.Mime}, t.ID, c.cfg.Client)
		if err != nil {
			return fmt.Errorf("sfu client: track %s: %w", t.ID, err)
		}
		tx, err := pc.AddTransceiverFromTrack(tr, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly})
		if err != nil {
			return fmt.Errorf("sfu client: track %s: %w", t.ID, err)
		}
		go drainRTCP(tx.Sender().Read) // the node's NACKs reach the NACK responder only when read
		c.Tracks[t.ID] = tr
	}
	for kind, n := range map[webrtc.RTPCodecType]int{webrtc.RTPCodecTypeAudio: c.cfg.AudioSlots, webrtc.RTPCodecTypeVideo: c.cfg.VideoSlots} {
		for i := 0; i < n; i++ {
			if _, err := pc.AddTransceiverFromKind(kind, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
				return fmt.Errorf("sfu client: slot: %w", err)
			}
		}
	}
	pc.OnTrack(func(tr *webrtc.TrackRemote, r *webrtc.RTPReceiver) {
		// the node's sender reports reach the receiver-report interceptor
		// only when read: without them receiver reports carry no LSR and
		// the node measures no round-trip time (shared.go)
		go drainRTCP(r.Read)
		if c.cfg.OnTrack != nil {
			c.cfg.OnTrack(tr, r)
		}
	})
	connected := make(chan struct{})
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateConnected {
			select {
			case <-connected:
			default:
				close(connected)
			}
		}
	})
	sdp, err := Gathered(pc, true)
	if err != nil {
		return fmt.Errorf("sfu client: %w", err)
	}
	rep, err := c.join(ctx, Signal{Op: "offer", Session: c.cfg.Session, Client: c.cfg.Client, SDP: sdp, Estimator: c.cfg.Estimator})
	if err != nil {
		return err
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: rep.SDP}); err != nil {
		return fmt.Errorf("sfu client: answer: %w", err)
	}
	select {
	case <-connected:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sfu client %s: not connected: %w", c.cfg.Client, ctx.Err())
	}
}

// join asks the manager for a node and sends it the offer, again when the
// node or the manager asks for it (joinOnce), joinAttempts times at most,
// excluding the nodes that did not answer.
func (c *Client) join(ctx context.Context, offer Signal) (Reply, error) {
	wait := joinBackoff
	var failed []string // nodes that did not answer the offer
	for attempt := 1; ; attempt++ {
		rep, failedNode, again, err := c.joinOnce(ctx, offer, failed)
		if failedNode != "" {
			failed = append(failed, failedNode)
		}
		if err == nil || !again || ctx.Err() != nil {
			return rep, err
		}
		if attempt == joinAttempts {
			return rep, fmt.Errorf("%w (%d attempts)", err, attempt)
		}
		c.log.Info("sfu client: join failed; asking the manager again", "session", c.cfg.Session, "client", c.cfg.Client,
			"node", c.Node, "attempt", attempt, "retry_in", wait, "exclude", failed, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return Reply{}, fmt.Errorf("%w; then %w", err, ctx.Err())
		}
		wait *= 2
	}
}

// joinOnce asks the manager for a node, not one of exclude, and sends it
// the offer. It reports whether to ask again: when the manager is busy, or
// the node does not answer (no responders, or no answer within
// offerTimeout). A node that does not answer is returned as failed, after
// a leave for the client was sent to it: one that hangs, or is only slow,
// may have registered the client, and would refuse its next offer
// ("already connected") and keep a peer nobody uses.
func (c *Client) joinOnce(ctx context.Context, offer Signal, exclude []string) (rep Reply, failed string, again bool, err error) {
	a, err := RequestJoin(ctx, c.cfg.NC, JoinRequest{Session: c.cfg.Session, Client: c.cfg.Client, Site: c.cfg.Site, Near: c.cfg.Near, Exclude: exclude})
	if err != nil {
		return Reply{}, "", errors.Is(err, ErrBusy), err
	}
	c.Node, c.signal = a.Node, a.Signal
	if c.cfg.placed != nil {
		c.cfg.placed(a)
	}
	timeout := offerTimeout
	if c.cfg.offerTimeout != nil {
		timeout = c.cfg.offerTimeout(a.Node)
	}
	octx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep, err = c.request(octx, offer)
	if err == nil {
		return rep, "", false, nil
	}
	err = fmt.Errorf("%w (node %s)", err, a.Node)
	if ctx.Err() != nil || !nodeGone(err) {
		return rep, "", false, err
	}
	c.leaveBestEffort()
	return rep, a.Node, true, err
}

// leaveBestEffort sends a leave for the client to its node without
// waiting for a reply: the node may not answer.
func (c *Client) leaveBestEffort() {
	b, _ := json.Marshal(Signal{Op: "leave", Session: c.cfg.Session, Client: c.cfg.Client})
	if err := c.cfg.NC.Publish(c.signal, b); err != nil {
		c.log.Debug("sfu client: leave not sent", "node", c.Node, "err", err)
	}
}

func (c *Client) request(ctx context.Context, s Signal) (Reply, error) {
	b, _ := json.Marshal(s)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
	}
	m, err := c.cfg.NC.RequestWithContext(ctx, c.signal, b)
	if err != nil {
		return Reply{}, fmt.Errorf("sfu client %s: %s: %w", c.cfg.Client, s.Op, err)
	}
	var rep Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return Reply{}, fmt.Errorf("sfu client %s: %s: %w", c.cfg.Client, s.Op, err)
	}
	if rep.Op == "error" {
		return rep, fmt.Errorf("sfu client %s: %s: %s", c.cfg.Client, s.Op, rep.Error)
	}
	return rep, nil
}

// SetPose sends the client's camera pose.
func (c *Client) SetPose(ctx context.Context, p Pose) error {
	_, err := c.request(ctx, Signal{Op: "pose", Session: c.cfg.Session, Client: c.cfg.Client, Pose: &p})
	return err
}

// ReportFrames sends the client's frame delivery report to its node, which
// exports it on /metrics.
func (c *Client) ReportFrames(ctx context.Context, r FrameReport) error {
	_, err := c.request(ctx, Signal{Op: "stats", Session: c.cfg.Session, Client: c.cfg.Client, Frames: &r})
	return err
}

// Close leaves the session and closes the connection.
func (c *Client) Close() {
	if c.evSub != nil {
		_ = c.evSub.Unsubscribe()
	}
	if c.PC != nil && c.signal != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = c.request(ctx, Signal{Op: "leave", Session: c.cfg.Session, Client: c.cfg.Client})
		cancel()
	}
	if c.PC != nil {
		_ = c.PC.Close()
	}
}

// drainRTCP reads RTCP until the sender or receiver closes: pion runs the
// interceptors (NACK responder, receiver reports) on what is read.
func drainRTCP(read func([]byte) (int, interceptor.Attributes, error)) {
	buf := make([]byte, 1500)
	for {
		if _, _, err := read(buf); err != nil {
			return
		}
	}
}
