package benchcc

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/xrealm/xrealm/cc"
	"github.com/xrealm/xrealm/netem"
)

// qoeHdr is a frame's header: index (uint32) and payload length (uint32).
const qoeHdr = 8

// qoeStream is the app-level stream of one run: the sender in the host
// namespace writes one frame per period, the receiver in the client
// namespace records when each frame's last byte arrives.
type qoeStream struct {
	start     time.Time // frame i is scheduled at start + i·period
	period    time.Duration
	frame     int // bytes per frame, header included
	target    float64
	fps       int
	ln        net.Listener
	sender    net.Conn
	recv      net.Conn
	closed    bool // close ran; a connection accepted afterwards is closed at once
	mu        sync.Mutex
	arrivals  map[uint32]time.Time
	scheduled int       // frames the sender has reached
	end       time.Time // no frame is scheduled at or after end
	wg        sync.WaitGroup
}

// startQoE connects the stream (port 5202, congestion control kname) and
// starts sending frames from start until deadline.
func startQoE(ctx context.Context, e *netem.Emulator, kname string, start, deadline time.Time, cfg Config) (*qoeStream, error) {
	rate, fps := cfg.QoERate, cfg.QoEFPS
	if rate <= 0 {
		rate = 20e6
	}
	if fps <= 0 {
		fps = 60
	}
	q := &qoeStream{
		period: time.Second / time.Duration(fps), target: rate, fps: fps,
		frame:    max(qoeHdr+1, int(rate/8/float64(fps))),
		arrivals: map[uint32]time.Time{},
	}
	if err := netem.InNamespace(e.ClientNS, func() (err error) { q.ln, err = net.Listen("tcp", netem.ClientAddr+":5202"); return err }); err != nil {
		return nil, fmt.Errorf("benchcc: QoE listener: %w", err)
	}
	d := net.Dialer{Control: cc.SetCongestion(kname)}
	if err := netem.InNamespace(e.HostNS, func() (err error) {
		q.sender, err = d.DialContext(ctx, "tcp", netem.ClientAddr+":5202")
		return err
	}); err != nil {
		q.ln.Close()
		return nil, fmt.Errorf("benchcc: QoE stream with %s: %w", kname, err)
	}
	q.start = time.Now()
	if start.After(q.start) {
		q.start = start
	}
	q.end = deadline
	q.wg.Add(2)
	go func() {
		defer q.wg.Done()
		q.receive()
	}()
	go func() {
		defer q.wg.Done()
		buf := make([]byte, q.frame)
		q.sender.SetWriteDeadline(deadline)
		for i := uint32(0); ; i++ {
			at := q.start.Add(time.Duration(i) * q.period)
			if !at.Before(deadline) {
				return
			}
			if w := time.Until(at); w > 0 {
				time.Sleep(w)
			}
			q.mu.Lock()
			q.scheduled = int(i) + 1
			q.mu.Unlock()
			binary.BigEndian.PutUint32(buf, i)
			binary.BigEndian.PutUint32(buf[4:], uint32(q.frame-qoeHdr))
			if _, err := q.sender.Write(buf); err != nil {
				return
			}
		}
	}()
	return q, nil
}

// receive accepts the stream's connection and records when each frame's
// last byte arrives, until the connection ends or close is called.
func (q *qoeStream) receive() {
	c, err := q.ln.Accept()
	if err != nil {
		return
	}
	q.mu.Lock()
	if q.closed {
		// Accepted as close ran: nothing else would close it.
		q.mu.Unlock()
		c.Close()
		return
	}
	q.recv = c
	q.mu.Unlock()
	defer c.Close()
	buf := make([]byte, q.frame)
	for {
		if _, err := io.ReadFull(c, buf[:qoeHdr]); err != nil {
			return
		}
		idx, n := binary.BigEndian.Uint32(buf), binary.BigEndian.Uint32(buf[4:])
		if int(n) > len(buf)-qoeHdr {
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		now := time.Now()
		q.mu.Lock()
		q.arrivals[idx] = now
		q.mu.Unlock()
	}
}

// close stops the stream; frames still in flight are not delivered. The
// receiver is closed too: it may never see a FIN once the link is gone.
func (q *qoeStream) close() {
	if q.sender != nil {
		q.sender.Close()
	}
	q.ln.Close()
	q.mu.Lock()
	q.closed = true
	if q.recv != nil {
		q.recv.Close()
	}
	q.mu.Unlock()
}

// wait waits for the sender and receiver to finish (after the emulator
// closed, which ends a receiver stuck without a FIN).
func (q *qoeStream) wait() { q.wg.Wait() }

// result summarises frames scheduled in [from, to) after the stream's start
// (which is within milliseconds of the bulk flows' start).
func (q *qoeStream) result(from, to time.Duration) *QoEResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := &QoEResult{TargetMbps: q.target / 1e6, FPS: q.fps}
	var lat []float64
	// Every frame due before the end counts, also those the sender never
	// reached because earlier writes blocked: they are lost.
	n := q.scheduled
	if !q.end.IsZero() {
		n = max(n, int((q.end.Sub(q.start)+q.period-1)/q.period))
	}
	for i := 0; i < n; i++ {
		at := time.Duration(i) * q.period
		if at < from || at >= to {
			continue
		}
		r.FramesScheduled++
		arr, ok := q.arrivals[uint32(i)]
		if !ok {
			r.Over100msPct++
			continue
		}
		l := arr.Sub(q.start.Add(at)).Seconds() * 1000
		lat = append(lat, l)
		if l > 100 {
			r.Over100msPct++
		}
	}
	r.FramesDelivered = len(lat)
	if r.FramesScheduled > 0 {
		r.Over100msPct = 100 * r.Over100msPct / float64(r.FramesScheduled)
	}
	r.RateMbps = float64(r.FramesDelivered*q.frame) * 8 / (to - from).Seconds() / 1e6
	if len(lat) == 0 {
		return r
	}
	sort.Float64s(lat)
	var s float64
	for _, v := range lat {
		s += v
	}
	r.LatMeanMs = s / float64(len(lat))
	r.LatP50Ms, r.LatP95Ms, r.LatP99Ms = quantile(lat, 0.5), quantile(lat, 0.95), quantile(lat, 0.99)
	for k := 1; k <= 100; k++ {
		r.LatQuantilesMs = append(r.LatQuantilesMs, math.Round(quantile(lat, float64(k)/100)*100)/100)
	}
	return r
}

// quantile of sorted v: the smallest value with at least q of the samples
// at or below it.
func quantile(v []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[max(0, min(i, len(v)-1))]
}
