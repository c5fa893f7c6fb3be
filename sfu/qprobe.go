package sfu

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"

	"github.com/xrealm/xrealm/hera/bwe"
)

// queueProbe measures the queueing delay of every packet the node sends on
// one subscriber PeerConnection, from the subscriber's transport-wide
// congestion control feedback: the feedback gives each packet's arrival
// time on the receiver's clock, the probe knows when it sent it, and the
// difference is the one-way delay plus a constant clock offset. The least
// of these over the last probeBaseWindow is the path's delay without a
// queue, so each packet's excess over it is the time it waited in queues.
//
// The shared-path controller uses the tail of these samples (the 95th
// percentile over an interval, all members of a group pooled): on a path
// whose load comes in bursts (one frame copied to every subscriber behind
// it) the queue a packet meets depends on when it comes, and the median
// round-trip time of receiver reports, which are sparse and rarely meet a
// burst, does not see the waits that make a subscriber's p99 latency.
type queueProbe struct {
	interceptor.NoOp
	start time.Time

	mu    sync.Mutex
	sent  [probeRing]sentPacket
	bases [probeBaseBuckets]baseBucket
	hist  delayHist
	// recv and lost count the packets sent that feedback reported
	// received and not received (takeLoss)
	recv, lost uint64
}

type sentPacket struct {
	seq uint16
	ok  bool
	at  int64 // ns since start
}

type baseBucket struct {
	slot int64 // which probeBaseBucket since start; 0 = none
	min  int64 // least one-way delay + offset seen in it, ns
}

// Probe sizes. A feedback acknowledges packets a few hundred ms after they
// were sent; the ring covers 4096 sends.
const (
	probeRing        = 4096
	probeBaseBucket  = 2 * time.Second
	probeBaseBuckets = 5 // the base is the least delay of the last 8-10 s
	histBin          = time.Millisecond
	histBins         = 512
)

// delayHist counts queueing delays in 1 ms bins (the last bin: 511 ms or
// more).
type delayHist [histBins]uint32

func (h *delayHist) add(d time.Duration) {
	i := int(d / histBin)
	h[min(max(i, 0), histBins-1)]++
}

func (h *delayHist) merge(o *delayHist) {
	for i, c := range o {
		h[i] += c
	}
}

func (h *delayHist) count() int {
	n := 0
	for _, c := range h {
		n += int(c)
	}
	return n
}

// quantile is the upper edge of the bin holding the q-quantile; -1 when
// empty.
func (h *delayHist) quantile(q float64) time.Duration {
	n := h.count()
	if n == 0 {
		return -1
	}
	want := int(q*float64(n-1)) + 1
	seen := 0
	for i, c := range h {
		seen += int(c)
		if seen >= want {
			return time.Duration(i+1) * histBin
		}
	}
	return histBins * histBin
}

// queueProbeFactory hands each new probe to onProbe (one PeerConnection
// per API in the node, newPeerAPI).
type queueProbeFactory struct {
	onProbe func(*queueProbe)
}

// NewInterceptor implements interceptor.Factory.
func (f queueProbeFactory) NewInterceptor(string) (interceptor.Interceptor, error) {
	q := &queueProbe{start: time.Now()}
	if f.onProbe != nil {
		f.onProbe(q)
	}
	return q, nil
}

// BindLocalStream records when each packet with a transport-wide sequence
// number leaves; the probe must be registered before the TWCC header
// extension interceptor, which then stamps the number first.
func (q *queueProbe) BindLocalStream(info *interceptor.StreamInfo, w interceptor.RTPWriter) interceptor.RTPWriter {
	var id uint8
	for _, e := range info.RTPHeaderExtensions {
		if e.URI == sdp.TransportCCURI {
			id = uint8(e.ID)
		}
	}
	if id == 0 {
		return w
	}
	return interceptor.RTPWriterFunc(func(h *rtp.Header, payload []byte, a interceptor.Attributes) (int, error) {
		if ext := h.GetExtension(id); len(ext) >= 2 {
			q.onSent(binary.BigEndian.Uint16(ext), time.Now())
		}
		return w.Write(h, payload, a)
	})
}

// BindRTCPReader reads the transport-wide feedback.
func (q *queueProbe) BindRTCPReader(r interceptor.RTCPReader) interceptor.RTCPReader {
	return interceptor.RTCPReaderFunc(func(b []byte, a interceptor.Attributes) (int, interceptor.Attributes, error) {
		n, a, err := r.Read(b, a)
		if err != nil {
			return n, a, err
		}
		if a == nil {
			a = interceptor.Attributes{}
		}
		pkts, perr := a.GetRTCPPackets(b[:n])
		if perr != nil {
			return n, a, err
		}
		for _, p := range pkts {
			if fb, ok := p.(*rtcp.TransportLayerCC); ok {
				q.onFeedback(fb)
			}
		}
		return n, a, err
	})
}

func (q *queueProbe) onSent(seq uint16, now time.Time) {
	q.mu.Lock()
	q.sent[int(seq)%probeRing] = sentPacket{seq: seq, ok: true, at: now.Sub(q.start).Nanoseconds()}
	q.mu.Unlock()
}

// onFeedback turns one feedback's arrival times into queueing delays.
func (q *queueProbe) onFeedback(fb *rtcp.TransportLayerCC) {
	reps, err := bwe.ParseFeedback(fb)
	if err != nil {
		return // chunks, count and deltas disagree: no arrival time can be trusted
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var owds []int64
	for _, r := range reps {
		p := q.sent[int(r.Seq)%probeRing]
		if !p.ok || p.seq != r.Seq {
			continue
		}
		if !r.Received {
			q.lost++
			continue
		}
		q.recv++
		owds = append(owds, int64(r.Arrival)-p.at)
	}
	if len(owds) == 0 {
		return
	}
	slot := time.Since(q.start).Nanoseconds()/int64(probeBaseBucket) + 1
	b := &q.bases[slot%probeBaseBuckets]
	if b.slot != slot {
		*b = baseBucket{slot: slot, min: owds[0]}
	}
	for _, o := range owds {
		b.min = min(b.min, o)
	}
	base := b.min
	for _, x := range q.bases {
		if x.slot > slot-probeBaseBuckets && x.slot > 0 {
			base = min(base, x.min)
		}
	}
	for _, o := range owds {
		q.hist.add(time.Duration(o - base))
	}
}

// takeLoss returns the packets the feedback reported received and lost
// since the last call.
func (q *queueProbe) takeLoss() (recv, lost uint64) {
	q.mu.Lock()
	recv, lost = q.recv, q.lost
	q.recv, q.lost = 0, 0
	q.mu.Unlock()
	return recv, lost
}

// take returns the queueing delays counted since the last call.
func (q *queueProbe) take() delayHist {
	q.mu.Lock()
	h := q.hist
	q.hist = delayHist{}
	q.mu.Unlock()
	return h
}
