package sfu

import (
	"context"
	"encoding/json"
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
	// OnEvent is called for each slot event of the node the client is
	// placed on (events a node that failed the placement sends are
	// dropped; those that came during the placement are passed on merged,
	// as one event, once it is placed).
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
	gate   *eventGate // cfg.OnEvent gets the events of c.Node only
}

// Dial joins: it asks the manager for a node, offers, and waits for the
// connection. When the node does not answer the offer, or the manager is
// busy, it asks the manager again (placement).
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	c := &Client{cfg: cfg, log: cfg.Logger, Tracks: map[string]*webrtc.TrackLocalStaticRTP{}}
	if c.log == nil {
		c.log = slog.Default()
	}
	if cfg.OnEvent != nil {
		var err error
		c.gate = newEventGate(cfg.OnEvent)
		c.evSub, err = cfg.NC.Subscribe(subjectEvents(cfg.Session, cfg.Client), func(m *nats.Msg) {
			var ev Event
			if json.Unmarshal(m.Data, &ev) == nil {
				c.gate.event(ev)
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
	// A packet not recovered after 10 NACKs (a second, at the interval of
	// 100 ms) is given up: pion's default asks for it for good, and a
	// packet the subscriber's SRTP refuses as a replay is never recovered.
	gen, _ := nack.NewGeneratorInterceptor(nack.GeneratorMaxNacksPerPacket(10))
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

// join places the client (placement): it asks the manager for a node and
// sends it the offer, again when the manager is busy or the node does not
// answer.
func (c *Client) join(ctx context.Context, offer Signal) (Reply, error) {
	p := placement{
		nc:       c.cfg.NC,
		req:      JoinRequest{Session: c.cfg.Session, Client: c.cfg.Client, Site: c.cfg.Site, Near: c.cfg.Near},
		log:      c.log,
		retryMsg: "sfu client: join failed; asking the manager again",
		send: func(ctx context.Context, a Assignment, s Signal) (Reply, error) {
			c.Node, c.signal = a.Node, a.Signal
			return c.request(ctx, s)
		},
		placed: func(a Assignment) {
			if c.gate != nil {
				c.gate.try(a.Node)
			}
			if c.cfg.placed != nil {
				c.cfg.placed(a)
			}
		},
		timeout: c.cfg.offerTimeout,
	}
	a, rep, err := p.run(ctx, offer)
	if a.Node != "" && c.gate != nil {
		c.gate.place()
	}
	return rep, err
}

func (c *Client) request(ctx context.Context, s Signal) (Reply, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
	}
	rep, err := requestSignal(ctx, c.cfg.NC, c.signal, s)
	if err != nil {
		return rep, fmt.Errorf("sfu client %s: %w", c.cfg.Client, err)
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
