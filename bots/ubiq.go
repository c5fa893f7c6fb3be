package bots

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xrealm/xrealm/interest"
	"github.com/xrealm/xrealm/ubiq"
)

// Ubiq interest modes of UbiqTransport.
const (
	UbiqAll  = "all"  // one room, everyone receives everyone (Ubiq's relay)
	UbiqKNN  = "knn"  // one room with server-side k-nearest-neighbour interest
	UbiqGrid = "grid" // hex-grid cell rooms: member of one's cell, observer of the ring around it
)

// UbiqTransport carries poses over the Ubiq wire protocol: each bot is a
// peer that joins a room and sends its pose, an ARENA-style JSON payload
// carrying the send timestamp, to its avatar's NetworkId. It speaks the
// room protocol directly (Join, Ping every second, AppendPeerProperties for
// positions, SetObserved for grid cells) and works against any Ubiq room
// server, including Ubiq's own for mode "all".
type UbiqTransport struct {
	Addr        string // host:port (TCP), or a ws:// or wss:// URL
	Mode        string // UbiqAll (default), UbiqKNN or UbiqGrid
	Room        string // room uuid for all and knn; "" = a fixed default
	PayloadSize int    // poses are padded to this many bytes; 0 = 500

	K             int           // knn: set size; 0 = 20
	Recompute     float64       // knn: recomputes per second; 0 = 5
	PositionEvery time.Duration // knn: position property period; 0 = 200ms

	// DecodePosEvery bounds how often a bot that watches its peers decodes
	// the position of one sender's poses; 0 = 100ms, negative = every pose.
	DecodePosEvery time.Duration

	CellSize float64  // grid: hex cell size in metres; 0 = 20
	Ring     int      // grid: rings of cells observed around one's own; 0 = 1
	Shard    [16]byte // grid: namespace of the cell room ids

	pings atomic.Int64 // peer pings sent, by all bots
}

// Peer pings. Once a second, with its Ping to the server, a bot pings the
// peer it last received a pose from: a frame relayed through the room to
// that peer's echo object, "ping {sent ns} {sender's index}", which the
// peer answers at once with "pong {sent ns}" to the sender's echo object.
// The sender times the round trip (Received.RoundTrip), as Ubiq's
// experiments measure latency: by ping through the relay. The relay
// delivers by interest, so a ping reaches its target, and the pong its
// sender, only while each is in the other's interest set; Pings counts
// the pings sent, to compare with the round trips timed.
const (
	echoB     = 0xec0 // NetworkId.B of a bot's echo object; A is its index + 1
	avatarB   = 0xb07 // NetworkId.B of a bot's avatar
	pingMagic = "ping "
	pongMagic = "pong "
)

// Pings returns how many peer pings the transport's bots sent.
func (t *UbiqTransport) Pings() int64 { return t.pings.Load() }

// DefaultUbiqRoom is the room bots join when none is given.
const DefaultUbiqRoom = "7e1a0b5e-6c55-4d4e-9a55-0000000b0755"

// rejectedType marks a server message that may be a Rejected join: a grid
// bot decodes only those of the server's messages after its first join.
var rejectedType = []byte(`"Rejected"`)

// Join connects one bot and, except in grid mode, joins its room.
func (t *UbiqTransport) Join(ctx context.Context, id Identity, rx Receiver, decodePos bool) (Link, error) {
	l := &ubiqLink{t: t, peer: fmt.Sprintf("b07b07b0-%04x-4000-8000-%012x", id.Index&0xffff, id.Index),
		object:   ubiq.NetworkId{A: uint32(id.Index) + 1, B: avatarB},
		echo:     ubiq.NetworkId{A: uint32(id.Index) + 1, B: echoB},
		clientID: ubiq.NetworkId{A: uint32(id.Index) + 1, B: 0xc11e},
		sceneID:  ubiq.NetworkId{A: uint32(id.Index) + 1, B: 0x5ce},
		objectID: id.ObjectID, joined: make(chan struct{}), rejected: make(chan string, 1)}
	if l.objectID == "" {
		l.objectID = "bot" + strconv.Itoa(id.Index)
	}
	// Boids need peers' positions, but not from every pose: a position is
	// decoded from a sender at most once per posEvery (the scan and float
	// parsing cost more than the rest of receiving a frame).
	posEvery := int64(t.DecodePosEvery)
	if posEvery == 0 {
		posEvery = int64(100 * time.Millisecond)
	}
	var decoded decodeTimes // read goroutine only
	joined := false         // read goroutine only
	var r Received          // read goroutine only: one for all frames, no allocation each
	onFrame := func(f []byte, now int64) {
		if ubiq.IDOf(f) == l.clientID {
			// Only SetRoom matters, and only until it came: kNN rooms send
			// a stream of PeerAdded/PeerRemoved not worth decoding.
			// In grid mode each cell is a Join of its own, after the
			// first: its refusal ends the link.
			if joined && (t.Mode != UbiqGrid || !bytes.Contains(f[ubiq.HeaderSize:], rejectedType)) {
				return
			}
			var rej ubiq.RejectedArgs
			switch typ, _ := ubiq.DecodeServer(f[ubiq.HeaderSize:], nil); typ {
			case "SetRoom":
				joined = true
				l.joinOnce.Do(func() { close(l.joined) })
			case "Rejected":
				if _, err := ubiq.DecodeServer(f[ubiq.HeaderSize:], &rej); err != nil {
					rej.Reason = "(its reason unreadable: " + err.Error() + ")"
				}
				if t.Mode == UbiqGrid {
					l.refused.CompareAndSwap(nil, &rej.Reason)
					l.c.Close()
					return
				}
				select {
				case l.rejected <- rej.Reason:
				default:
				}
			}
			return
		}
		payload := f[ubiq.HeaderSize:]
		if to := ubiq.IDOf(f); to.B == echoB {
			if to == l.echo {
				l.onEcho(payload, now, rx)
			}
			return // another peer's ping or pong
		}
		r = Received{From: f[4:12], RecvNanos: now, Size: len(f)}
		if decodePos && decoded.due(ubiq.IDOf(f), now, posEvery) {
			r.SentNanos, r.Pos, r.HasPos = posePositionOf(payload)
		} else {
			r.SentNanos = poseSentNanos(payload)
		}
		rx.Receive(&r)
		rx.ReadDone()
		if from := ubiq.IDOf(f); from.B == avatarB {
			l.lastFrom.Store(from.A)
		}
	}
	c, err := ubiq.Dial(ctx, t.Addr, ubiq.ClientOptions{OnFrameAt: onFrame})
	if err != nil {
		return nil, fmt.Errorf("bot %d: %w", id.Index, err)
	}
	l.c = c
	if t.Mode == UbiqGrid {
		return l, nil // joins its cell with its first pose
	}
	room := t.Room
	if room == "" {
		room = DefaultUbiqRoom
	}
	if err := l.join(room); err != nil {
		c.Close()
		return nil, err
	}
	if t.Mode == UbiqKNN {
		k, rate := t.K, t.Recompute
		if k == 0 {
			k = 20
		}
		if rate == 0 {
			rate = 5
		}
		cfg := fmt.Sprintf(`{"mode":"knn","k":%d,"rate_hz":%g,"hysteresis_ms":500}`, k, rate)
		c.Request("AppendRoomProperties", ubiq.PropertiesArgs{Keys: []string{ubiq.InterestKey}, Values: []string{cfg}})
	}
	// Keep pinging while waiting, as Ubiq's clients do: the server drops
	// peers that are silent to it for 10s.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-l.joined:
			return l, nil
		case why := <-l.rejected:
			c.Close()
			return nil, fmt.Errorf("bot %d: the server refused the join: %s", id.Index, why)
		case <-tick.C:
			c.Request("Ping", ubiq.ClientArgs{ClientID: l.clientID})
		case <-c.Done():
			return nil, fmt.Errorf("bot %d: connection closed before SetRoom: %v", id.Index, c.Err())
		case <-ctx.Done():
			c.Close()
			return nil, fmt.Errorf("bot %d: no SetRoom from the relay: %w", id.Index, ctx.Err())
		}
	}
}

type ubiqLink struct {
	t                               *UbiqTransport
	c                               *ubiq.Client
	peer, objectID                  string
	object, echo, clientID, sceneID ubiq.NetworkId
	joined                          chan struct{}
	joinOnce                        sync.Once
	rejected                        chan string            // the reason of a Rejected join, once
	refused                         atomic.Pointer[string] // grid: the reason of a refused cell join, which closed the link
	lastFrom                        atomic.Uint32          // avatar index + 1 of the last pose's sender; 0: none yet
	pong                            []byte                 // read goroutine only

	// Used by SendPose only, from the bot's sender goroutine.
	buf      []byte // the pose's payload
	out      []byte // the frames of one write
	req      []byte // a position request
	ping     []byte // the Ping request, the same every time
	lastPing time.Time
	lastPos  time.Time
	cell     interest.Cell
	inCell   bool
}

func (l *ubiqLink) join(room string) error {
	return l.c.Request("Join", ubiq.JoinArgs{UUID: room, Name: "xrealm bench", Peer: ubiq.PeerInfo{
		UUID: l.peer, SceneID: l.sceneID, ClientID: l.clientID,
		// the avatar's poses are state: a full queue keeps the newest
		Keys: []string{ubiq.CoalesceKey}, Values: []string{l.object.String()}}})
}

// SendPose sends the pose, and the Ping and position request when they are
// due, in one write: frames for the server go first, in the same system
// call as the pose (a client with Nagle on, as Ubiq's are, coalesces them
// too).
func (l *ubiqLink) SendPose(p Pose, sentNanos int64) error {
	now := time.Unix(0, sentNanos)
	l.out = l.out[:0]
	if now.Sub(l.lastPing) >= time.Second {
		l.lastPing = now
		if l.ping == nil {
			l.ping = ubiq.EncodeRequest("Ping", ubiq.ClientArgs{ClientID: l.clientID})
		}
		l.out = ubiq.AppendFrame(l.out, ubiq.ServerID, l.ping)
		if to := l.lastFrom.Load(); to != 0 {
			l.req = append(strconv.AppendInt(append(l.req[:0], pingMagic...), sentNanos, 10), ' ')
			l.req = strconv.AppendUint(l.req, uint64(l.echo.A), 10)
			l.out = ubiq.AppendFrame(l.out, ubiq.NetworkId{A: to, B: echoB}, l.req)
			l.t.pings.Add(1)
		}
	}
	switch l.t.Mode {
	case UbiqKNN:
		every := l.t.PositionEvery
		if every == 0 {
			every = 200 * time.Millisecond
		}
		if now.Sub(l.lastPos) >= every {
			l.lastPos = now
			l.req = ubiq.AppendPositionRequest(l.req[:0], p.Pos.X, p.Pos.Y, p.Pos.Z)
			l.out = ubiq.AppendFrame(l.out, ubiq.ServerID, l.req)
		}
	case UbiqGrid:
		size := l.t.CellSize
		if size == 0 {
			size = 20
		}
		ring := l.t.Ring
		if ring == 0 {
			ring = 1
		}
		cell := interest.Grid{Size: size}.CellOf(interest.Vec3{X: p.Pos.X, Y: p.Pos.Y, Z: p.Pos.Z})
		if !l.inCell || cell != l.cell {
			l.cell, l.inCell = cell, true
			if len(l.out) > 0 { // the Ping goes before the Join
				if err := l.c.SendFrames(l.out); err != nil {
					return err
				}
				l.out = l.out[:0]
			}
			if err := l.join(interest.FormatUUID(interest.CellRoomID(l.t.Shard, cell))); err != nil {
				return err
			}
			var rooms []string
			for _, c := range interest.Ring(cell, ring)[1:] {
				rooms = append(rooms, interest.FormatUUID(interest.CellRoomID(l.t.Shard, c)))
			}
			if err := l.c.Request("SetObserved", ubiq.SetObservedArgs{ClientID: l.clientID, Rooms: rooms}); err != nil {
				return err
			}
		}
	}
	size := l.t.PayloadSize
	if size == 0 {
		size = 500
	}
	l.buf = AppendPose(l.buf[:0], l.objectID, p, sentNanos, size)
	l.out = ubiq.AppendFrame(l.out, l.object, l.buf)
	return l.c.SendFrames(l.out)
}

// onEcho handles a frame to the bot's echo object: a ping, answered at
// once, or the pong of its own ping, timed. Malformed ones are ignored.
func (l *ubiqLink) onEcho(payload []byte, now int64, rx Receiver) {
	ping, sent, from, ok := parseEcho(payload)
	switch {
	case !ok:
	case ping:
		l.pong = ubiq.AppendFrame(l.pong[:0], ubiq.NetworkId{A: from, B: echoB}, strconv.AppendInt([]byte(pongMagic), sent, 10))
		_ = l.c.SendFrames(l.pong)
	case sent <= now && now-sent <= int64(time.Minute): // a ping of this bot's last minute
		r := Received{RoundTrip: true, SentNanos: sent, RecvNanos: now}
		rx.Receive(&r)
	}
}

// parseEcho parses "ping {sent} {from}" (from > 0: the sender's echo
// object index) or "pong {sent}".
func parseEcho(payload []byte) (ping bool, sent int64, from uint32, ok bool) {
	s := string(payload)
	var err error
	switch {
	case strings.HasPrefix(s, pingMagic):
		t, f, found := strings.Cut(s[len(pingMagic):], " ")
		a, err2 := strconv.ParseUint(f, 10, 32)
		sent, err = strconv.ParseInt(t, 10, 64)
		return true, sent, uint32(a), found && err == nil && err2 == nil && a > 0
	case strings.HasPrefix(s, pongMagic):
		sent, err = strconv.ParseInt(s[len(pongMagic):], 10, 64)
		return false, sent, 0, err == nil
	}
	return false, 0, 0, false
}

// decodeTimes is when a bot last decoded a position from each sender.
// Bots' avatars (B = 0xb07, as Join makes them) are looked up by index in
// a slice: one memory access per frame instead of a map probe. The slice
// grows only by steps of at most denseStep past its end (a fleet's ids
// are dense), and the map holds at most maxDecodeOthers senders: a room's
// peers choose the ids they send from.
type decodeTimes struct {
	bots  []int64
	other map[ubiq.NetworkId]int64
}

const (
	denseStep       = 1024
	maxDecodeOthers = 4096
)

// due reports whether from's position should be decoded at now, and if
// so records now.
func (d *decodeTimes) due(from ubiq.NetworkId, now, every int64) bool {
	if from.B == avatarB && int(from.A) < len(d.bots)+denseStep {
		if int(from.A) >= len(d.bots) {
			d.bots = append(d.bots, make([]int64, int(from.A)+1-len(d.bots)+64)...)
		}
		if now-d.bots[from.A] < every {
			return false
		}
		d.bots[from.A] = now
		return true
	}
	if d.other == nil {
		d.other = map[ubiq.NetworkId]int64{}
	}
	if now-d.other[from] < every {
		return false
	}
	if len(d.other) >= maxDecodeOthers {
		// Forget them all: at worst a position is decoded once more.
		clear(d.other)
	}
	d.other[from] = now
	return true
}

func (l *ubiqLink) Close() error          { return l.c.Close() }
func (l *ubiqLink) Done() <-chan struct{} { return l.c.Done() }

// Err returns why the connection ended, once Done is closed.
func (l *ubiqLink) Err() error {
	if why := l.refused.Load(); why != nil {
		return fmt.Errorf("the server refused the join of a cell room: %s", *why)
	}
	return l.c.Err()
}
