package sfu

import (
	"sync"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
)

// pion's report interceptors write one sender or receiver report per
// stream, each as its own RTCP packet, all in the same instant: a
// subscriber with 63 slots sends 63 receiver reports at once, and the node
// 63 sender reports to it. On a path with a short drop-tail queue (the
// bench's links hold 54 packets) such a burst pushes media out of the
// queue. The batcher sits below the report interceptors and sends what
// they write within BatchWindow as compound packets of at most
// BatchBytes: receiver reports merged into as few RRs as possible (an RR
// carries up to 31 report blocks), sender reports stacked. Every other
// RTCP packet (NACK, PLI, TWCC feedback) passes at once.

// RTCP batching limits.
const (
	// BatchWindow is how long a report waits for the others of its round.
	BatchWindow = 2 * time.Millisecond
	// BatchBytes bounds one compound packet (before SRTCP's overhead).
	BatchBytes = 1100
	// maxReportBlocks is the most report blocks one RR or SR carries.
	maxReportBlocks = 31
)

// RTCPBatcherFactory makes one batcher per PeerConnection; register it
// before the report interceptors (the first registered interceptor gets
// the transport's writer, later ones write through it).
type RTCPBatcherFactory struct {
	// Window is BatchWindow when zero.
	Window time.Duration
}

// NewInterceptor implements interceptor.Factory.
func (f RTCPBatcherFactory) NewInterceptor(string) (interceptor.Interceptor, error) {
	w := f.Window
	if w <= 0 {
		w = BatchWindow
	}
	return &rtcpBatcher{window: w}, nil
}

type rtcpBatcher struct {
	interceptor.NoOp
	window time.Duration
}

// BindRTCPWriter implements interceptor.Interceptor.
func (b *rtcpBatcher) BindRTCPWriter(w interceptor.RTCPWriter) interceptor.RTCPWriter {
	return &batchWriter{next: w, window: b.window}
}

type batchWriter struct {
	next   interceptor.RTCPWriter
	window time.Duration

	mu      sync.Mutex
	pending []rtcp.Packet
	timer   *time.Timer
}

// Write implements interceptor.RTCPWriter.
func (w *batchWriter) Write(pkts []rtcp.Packet, attr interceptor.Attributes) (int, error) {
	for _, p := range pkts {
		switch p.(type) {
		case *rtcp.ReceiverReport, *rtcp.SenderReport:
		default:
			return w.next.Write(pkts, attr)
		}
	}
	w.mu.Lock()
	w.pending = append(w.pending, pkts...)
	if w.timer == nil {
		w.timer = time.AfterFunc(w.window, w.flush)
	}
	w.mu.Unlock()
	return 0, nil
}

func (w *batchWriter) flush() {
	w.mu.Lock()
	pending := w.pending
	w.pending, w.timer = nil, nil
	w.mu.Unlock()
	for _, c := range CompoundReports(pending, BatchBytes) {
		_, _ = w.next.Write(c, interceptor.Attributes{})
	}
}

// CompoundReports packs sender and receiver reports into compound packets
// of at most maxBytes (marshalled; a single larger report gets its own):
// the report blocks of all receiver reports are merged into RRs of up to 31
// blocks under the first RR's sender SSRC, and sender reports are stacked.
// Other packet types are kept as they are.
func CompoundReports(pkts []rtcp.Packet, maxBytes int) [][]rtcp.Packet {
	var out [][]rtcp.Packet
	var cur []rtcp.Packet
	size := 0
	add := func(p rtcp.Packet) {
		n := p.MarshalSize()
		if len(cur) > 0 && size+n > maxBytes {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, p)
		size += n
	}
	var blocks []rtcp.ReceptionReport
	var rrSSRC uint32
	for _, p := range pkts {
		rr, ok := p.(*rtcp.ReceiverReport)
		if !ok {
			add(p)
			continue
		}
		if len(rr.ProfileExtensions) > 0 || len(rr.Reports) == 0 {
			add(p)
			continue
		}
		if blocks == nil {
			rrSSRC = rr.SSRC
		}
		blocks = append(blocks, rr.Reports...)
	}
	// an RR of k blocks is 8 + 24k bytes: fill each compound's room
	for len(blocks) > 0 {
		room := (maxBytes - size - 8) / 24
		if room < 1 {
			if len(cur) > 0 {
				out = append(out, cur)
				cur, size = nil, 0
			}
			room = (maxBytes - 8) / 24
		}
		k := min(len(blocks), maxReportBlocks, max(room, 1))
		add(&rtcp.ReceiverReport{SSRC: rrSSRC, Reports: blocks[:k:k]})
		blocks = blocks[k:]
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
