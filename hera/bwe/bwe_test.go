package bwe

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
)

func TestParseFeedback(t *testing.T) {
	fb := &rtcp.TransportLayerCC{
		Header:             rtcp.Header{Count: rtcp.FormatTCC, Type: rtcp.TypeTransportSpecificFeedback},
		BaseSequenceNumber: 65534, // wraps
		PacketStatusCount:  6,
		ReferenceTime:      10, // 640 ms
		FbPktCount:         3,
		PacketChunks: []rtcp.PacketStatusChunk{
			&rtcp.RunLengthChunk{Type: rtcp.TypeTCCRunLengthChunk, PacketStatusSymbol: rtcp.TypeTCCPacketReceivedSmallDelta, RunLength: 2},
			&rtcp.StatusVectorChunk{Type: rtcp.TypeTCCStatusVectorChunk, SymbolSize: rtcp.TypeTCCSymbolSizeTwoBit, SymbolList: []uint16{
				rtcp.TypeTCCPacketNotReceived, rtcp.TypeTCCPacketReceivedLargeDelta, rtcp.TypeTCCPacketNotReceived, rtcp.TypeTCCPacketReceivedSmallDelta,
				rtcp.TypeTCCPacketNotReceived, rtcp.TypeTCCPacketNotReceived, rtcp.TypeTCCPacketNotReceived}},
		},
		RecvDeltas: []*rtcp.RecvDelta{
			{Type: rtcp.TypeTCCPacketReceivedSmallDelta, Delta: 1000},
			{Type: rtcp.TypeTCCPacketReceivedSmallDelta, Delta: 250},
			{Type: rtcp.TypeTCCPacketReceivedLargeDelta, Delta: -2000},
			{Type: rtcp.TypeTCCPacketReceivedSmallDelta, Delta: 63750},
		},
	}
	// Round-trip through the wire format so the test covers what a peer sends.
	fb.Header.Length = uint16(fb.MarshalSize()/4 - 1)
	fb.Header.Padding = fb.MarshalSize() != int(fb.Len())
	raw, err := fb.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	pkts, err := rtcp.Unmarshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseFeedback(pkts[0].(*rtcp.TransportLayerCC))
	if err != nil {
		t.Fatal(err)
	}
	ms := func(us int64) time.Duration { return 640*time.Millisecond + time.Duration(us)*time.Microsecond }
	want := []PacketReport{
		{65534, true, ms(1000)},
		{65535, true, ms(1250)},
		{0, false, 0},
		{1, true, ms(-750)},
		{2, false, 0},
		{3, true, ms(63000)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d reports %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("report %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseFeedbackRejectsInconsistent(t *testing.T) {
	tests := []struct {
		name string
		fb   rtcp.TransportLayerCC
	}{
		{"too few statuses", rtcp.TransportLayerCC{PacketStatusCount: 3, PacketChunks: []rtcp.PacketStatusChunk{
			&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketNotReceived, RunLength: 2}}}},
		{"missing delta", rtcp.TransportLayerCC{PacketStatusCount: 1, PacketChunks: []rtcp.PacketStatusChunk{
			&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketReceivedSmallDelta, RunLength: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseFeedback(&tt.fb); err == nil {
				t.Fatal("ParseFeedback succeeded")
			}
		})
	}
}

// buildFeedback makes TWCC feedback for packets base..base+len(arr)-1;
// arr[i] < 0 means lost, otherwise the arrival time in µs on the receiver's
// clock.
func buildFeedback(base uint16, arr []int64, count uint8) *rtcp.TransportLayerCC {
	fb := &rtcp.TransportLayerCC{
		Header:             rtcp.Header{Count: rtcp.FormatTCC, Type: rtcp.TypeTransportSpecificFeedback},
		BaseSequenceNumber: base, PacketStatusCount: uint16(len(arr)), FbPktCount: count,
	}
	ref := int64(-1)
	for _, a := range arr {
		if a >= 0 {
			ref = a / 64000
			break
		}
	}
	fb.ReferenceTime = uint32(max(ref, 0))
	prev := max(ref, 0) * 64000
	var syms []uint16
	for _, a := range arr {
		if a < 0 {
			syms = append(syms, rtcp.TypeTCCPacketNotReceived)
			continue
		}
		d := (a - prev) / 250 * 250
		prev += d
		typ := rtcp.TypeTCCPacketReceivedSmallDelta
		if d < 0 || d > 255*250 {
			typ = rtcp.TypeTCCPacketReceivedLargeDelta
		}
		syms = append(syms, typ)
		fb.RecvDeltas = append(fb.RecvDeltas, &rtcp.RecvDelta{Type: typ, Delta: d})
	}
	for i := 0; i < len(syms); i += 7 {
		chunk := syms[i:min(i+7, len(syms))]
		fb.PacketChunks = append(fb.PacketChunks, &rtcp.StatusVectorChunk{Type: rtcp.TypeTCCStatusVectorChunk, SymbolSize: rtcp.TypeTCCSymbolSizeTwoBit, SymbolList: chunk})
	}
	return fb
}

// TestEstimatorOnSimulatedLink sends paced packets at the estimator's
// target through a simulated bottleneck and returns TWCC feedback every
// 50 ms; the target must settle near the capacity with a bounded queue.
func TestEstimatorOnSimulatedLink(t *testing.T) {
	tests := []struct {
		name       string
		bytesPerMs float64
		oneWay     time.Duration
	}{
		{"4Mbit 20ms", 500, 20 * time.Millisecond},
		{"1.5Mbit 50ms", 187.5, 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := time.Unix(1000, 0)
			opts := DefaultOptions()
			opts.Now = func() time.Time { return clock }
			e, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			const extID = 5
			info := &interceptor.StreamInfo{RTPHeaderExtensions: []interceptor.RTPHeaderExtension{{URI: TransportCCURI, ID: extID}}}
			type inflight struct {
				seq  uint16
				size int
				dep  time.Time // leaves the bottleneck
			}
			var queue []inflight
			var busyUntil time.Time
			w := e.AddStream(info, interceptor.RTPWriterFunc(func(h *rtp.Header, p []byte, _ interceptor.Attributes) (int, error) {
				b := h.GetExtension(extID)
				var ext rtp.TransportCCExtension
				ext.Unmarshal(b)
				size := h.MarshalSize() + len(p)
				start := clock
				if busyUntil.After(start) {
					start = busyUntil
				}
				busyUntil = start.Add(time.Duration(float64(size) / tt.bytesPerMs * float64(time.Millisecond)))
				queue = append(queue, inflight{ext.TransportSequence, size, busyUntil})
				return size, nil
			}))
			remoteOffset := int64(123_456_789) // µs; the receiver's clock is unrelated
			var seq uint16
			var credit float64
			type pendingFB struct {
				at time.Time
				fb *rtcp.TransportLayerCC
			}
			var fbs []pendingFB
			var arrivals []int64
			var base uint16
			var count uint8
			var delivered float64
			payload := make([]byte, 1100)
			for step := 0; step < 30000; step++ { // 1 ms steps, 30 s
				clock = clock.Add(time.Millisecond)
				credit += float64(e.GetTargetBitrate()) / 8 / 1000
				for credit >= 1200 {
					credit -= 1200
					h := &rtp.Header{Version: 2, SSRC: 1, SequenceNumber: seq}
					ext, _ := (&rtp.TransportCCExtension{TransportSequence: seq}).Marshal()
					h.SetExtension(extID, ext)
					w.Write(h, payload, nil)
					seq++
				}
				// Packets leaving the bottleneck arrive one way-delay later.
				for len(queue) > 0 && !queue[0].dep.After(clock) {
					p := queue[0]
					queue = queue[1:]
					arr := p.dep.Add(tt.oneWay)
					if len(arrivals) == 0 {
						base = p.seq
					}
					arrivals = append(arrivals, arr.Sub(time.Unix(1000, 0)).Microseconds()+remoteOffset)
					if step > 20000 {
						delivered += float64(p.size)
					}
				}
				if step%50 == 0 && len(arrivals) > 0 {
					fbs = append(fbs, pendingFB{clock.Add(tt.oneWay * 2), buildFeedback(base, arrivals, count)})
					count++
					arrivals = nil
				}
				for len(fbs) > 0 && !fbs[0].at.After(clock) {
					if err := e.WriteRTCP([]rtcp.Packet{fbs[0].fb}, nil); err != nil {
						t.Fatal(err)
					}
					fbs = fbs[1:]
				}
			}
			rate := delivered / 10000 // bytes per ms over the last 10 s
			qdelay := time.Duration(0)
			if busyUntil.After(clock) {
				qdelay = busyUntil.Sub(clock)
			}
			t.Logf("delivered %.0f B/ms of %.0f, queue at end %v, target %d bit/s, stats %v", rate, tt.bytesPerMs, qdelay, e.GetTargetBitrate(), e.GetStats())
			if rate < 0.7*tt.bytesPerMs {
				t.Errorf("delivered %.0f B/ms, want at least 70%% of %.0f", rate, tt.bytesPerMs)
			}
			if qdelay > 100*time.Millisecond {
				t.Errorf("queue at the end %v, want under 100 ms", qdelay)
			}
		})
	}
}

// wireFeedback is a TWCC feedback (RTCP PT 205, FMT 15) built byte by byte:
// base sequence number, status count, then the 16-bit chunks and the
// delta bytes as given, zero-padded to a 32-bit boundary.
func wireFeedback(base, count uint16, chunks []uint16, deltas []byte) []byte {
	b := []byte{0x80 | rtcp.FormatTCC, 205, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2}
	b = binary.BigEndian.AppendUint16(b, base)
	b = binary.BigEndian.AppendUint16(b, count)
	b = append(b, 0, 0, 1, 7) // reference time 64 ms, feedback 7
	for _, c := range chunks {
		b = binary.BigEndian.AppendUint16(b, c)
	}
	b = append(b, deltas...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)/4-1))
	return b
}

// reservedSymbolCases are feedback that give a packet the reserved status
// symbol 3, as a peer would send them, and where the parsers must say it
// is; and two that carry it only where it does not count.
var reservedSymbolCases = []struct {
	name  string
	raw   []byte
	where string // "" if the feedback is valid
	recv  int    // received packets when valid
}{
	// run length 2 of symbol 1, then run length 2 of symbol 3
	{"run-length chunk", wireFeedback(100, 4, []uint16{0x2002, 0x6002}, []byte{4, 4}),
		"chunk 1 (run length 2) gives packet 102 (status 3 of 4)", 0},
	// two-bit status vector 1 0 3 1 0 0 0
	{"status vector chunk", wireFeedback(200, 5, []uint16{0xd340}, []byte{4, 4}),
		"chunk 0 (status vector, symbol 2) gives packet 202 (status 3 of 5)", 0},
	// two-bit status vector 1 1 3 0 0 0 0 for 2 packets: the 3 is padding
	{"symbol 3 after the status count", wireFeedback(300, 2, []uint16{0xd700}, []byte{4, 4}), "", 2},
	// run length 0 of symbol 3 describes no packet
	{"empty run of symbol 3", wireFeedback(400, 1, []uint16{0x6000, 0x2001}, []byte{4}), "", 1},
}

func TestParseFeedbackReservedSymbol(t *testing.T) {
	for _, tt := range reservedSymbolCases {
		t.Run(tt.name, func(t *testing.T) {
			pkts, err := rtcp.Unmarshal(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			reps, err := ParseFeedback(pkts[0].(*rtcp.TransportLayerCC))
			if tt.where == "" {
				if err != nil {
					t.Fatal(err)
				}
				recv := 0
				for _, r := range reps {
					if r.Received {
						recv++
					}
				}
				if recv != tt.recv {
					t.Fatalf("%d received, want %d (%+v)", recv, tt.recv, reps)
				}
				return
			}
			if !errors.Is(err, ErrReservedSymbol) || !strings.Contains(err.Error(), tt.where) {
				t.Fatalf("error %v, want ErrReservedSymbol at %q", err, tt.where)
			}
			if reps != nil {
				t.Fatalf("reports %+v with the error", reps)
			}
		})
	}
}

// A malformed feedback is counted and skipped; the estimator goes on with
// the next one and returns no error, which would stop the RTCP reader.
func TestEstimatorSkipsMalformedFeedback(t *testing.T) {
	clock := time.Unix(1000, 0)
	opts := DefaultOptions()
	opts.Now = func() time.Time { return clock }
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint16(0); seq < 4; seq++ {
		e.OnSent(seq, 1200)
	}
	clock = clock.Add(30 * time.Millisecond)
	var batch []rtcp.Packet
	for _, tt := range reservedSymbolCases[:2] {
		pkts, err := rtcp.Unmarshal(tt.raw)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, pkts...)
	}
	missingDelta := &rtcp.TransportLayerCC{PacketStatusCount: 1, PacketChunks: []rtcp.PacketStatusChunk{
		&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketReceivedSmallDelta, RunLength: 1}}}
	batch = append(batch, missingDelta, buildFeedback(0, []int64{1000, 2000, 3000, 4000}, 8))
	if err := e.WriteRTCP(batch, nil); err != nil {
		t.Fatalf("WriteRTCP: %v", err)
	}
	s := e.GetStats()
	if s["malformedFeedback"] != uint64(3) || !strings.Contains(s["lastMalformedFeedback"].(string), "deltas") {
		t.Fatalf("malformed %v, last %q; want 3, the missing delta", s["malformedFeedback"], s["lastMalformedFeedback"])
	}
	if s["minRTT"] != 30*time.Millisecond {
		t.Fatalf("min RTT %v: the valid feedback after the malformed ones was not used", s["minRTT"])
	}
}

// TestEstimatorFlowClockIsMonotonic: the flow's clock for a sample is its
// packet's send time plus the sample, which steps back when feedback
// reports an earlier packet late. hera.Flow's windowed minimum took such
// a step for an expired window (the unsigned difference wrapped), so two
// late reports replaced the 20 ms base RTT by a 50 ms sample and the
// queueing delay read 30 ms too low.
func TestEstimatorFlowClockIsMonotonic(t *testing.T) {
	clock := time.Unix(1000, 0)
	at := func(ms int) { clock = time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	opts := DefaultOptions()
	opts.Now = func() time.Time { return clock }
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	const remote = 50_000_000 // µs: the receiver's clock at our time 0, plus the one-way delay
	send := func(ms int, seq uint16) { at(ms); e.OnSent(seq, 1200) }
	feedback := func(ms int, seq uint16, arrivalMs int) {
		at(ms)
		e.WriteRTCP([]rtcp.Packet{buildFeedback(seq, []int64{remote + int64(arrivalMs)*1000}, uint8(seq))}, nil)
	}
	send(0, 0)
	send(90, 3)         // queued 30 ms, reported late
	send(100, 1)        // queued 30 ms, reported late
	feedback(200, 0, 0) // minRTT 200 ms
	send(210, 2)
	feedback(230, 2, 210) // minRTT 20 ms: the base
	feedback(240, 1, 130) // sample 20 + 30 ms
	feedback(250, 3, 120) // sample 20 + 30 ms
	if got := e.flow.MinRTT(); got != 20*time.Millisecond {
		t.Fatalf("the flow's base RTT is %v after late reports of queued packets, want 20ms", got)
	}
}

// TestEstimatorReferenceTimeWrap: a TWCC feedback's reference time is 24
// bits of 64 ms and wraps every 12.4 days of the receiver's clock, which
// for libwebrtc is not the call's start, so a call can see it wrap. The
// estimator took the reference time as it stood: the first feedback after
// the wrap set the minimum one-way delay 1073741.824 s lower, and a
// feedback from before the wrap that came after it (RTCP over UDP can be
// reordered) read as 1073741.824 s of queueing delay, which sent the
// target to the minimum bitrate.
func TestEstimatorReferenceTimeWrap(t *testing.T) {
	clock := time.Unix(1000, 0)
	at := func(ms int) { clock = time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	opts := DefaultOptions()
	opts.Now = func() time.Time { return clock }
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	const wrap = int64(1<<24) * 64000 // µs: the receiver's clock where the reference time wraps
	// The receiver's clock reads wrap - 40 ms at our time 0; the one-way
	// delay is 20 ms and there is no queue.
	arrival := func(sentMs int) int64 { return wrap - 40_000 + int64(sentMs)*1000 + 20_000 }
	feedback := func(ms int, seq uint16, sentMs int) {
		at(ms)
		fb := buildFeedback(seq, []int64{arrival(sentMs)}, uint8(seq))
		fb.ReferenceTime &= 1<<24 - 1 // 24 bits on the wire
		if err := e.WriteRTCP([]rtcp.Packet{fb}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, ms := range []int{0, 10, 30, 40} {
		at(ms)
		e.OnSent(uint16(i), 1200)
	}
	feedback(40, 0, 0)  // arrived at wrap - 20 ms
	feedback(70, 2, 30) // wrap + 10 ms: reference time 0
	check := func(when string) {
		t.Helper()
		if q := e.GetStats()["queueDelay"].(time.Duration); q != 0 {
			t.Errorf("%s: queueing delay %v across the reference time's wrap, want 0", when, q)
		}
		if got := e.GetTargetBitrate(); got <= opts.MinBitrate {
			t.Errorf("%s: target %d bit/s, want above the minimum %d", when, got, opts.MinBitrate)
		}
	}
	feedback(75, 1, 10) // wrap - 10 ms, reported after the wrap
	check("a report from before the wrap after one from after it")
	feedback(80, 3, 40) // wrap + 20 ms
	check("the next report")
}

// TestEstimatorDuplicateFeedbackIsNoLoss: a feedback that reaches the
// estimator twice (duplicated on the way, or resent) used to count, the
// second time, only its lost packets (its received ones had been taken),
// so one loss in twenty read as a loss rate of 100% and cut the window.
func TestEstimatorDuplicateFeedbackIsNoLoss(t *testing.T) {
	clock := time.Unix(1000, 0)
	opts := DefaultOptions()
	opts.Now = func() time.Time { return clock }
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	arr := make([]int64, 20)
	for i := range arr {
		e.OnSent(uint16(i), 1200)
		clock = clock.Add(time.Millisecond)
		arr[i] = 5_000_000 + int64(i)*1000
	}
	arr[7] = -1 // lost: 5%, under the 10% threshold
	clock = clock.Add(20 * time.Millisecond)
	fb := buildFeedback(0, arr, 1)
	for i := range 2 {
		if err := e.WriteRTCP([]rtcp.Packet{fb}, nil); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(time.Millisecond)
		if st := e.GetStats(); st["slowStart"] != true || st["lossRate"].(float64) > opts.LossThreshold {
			t.Fatalf("after the feedback's copy %d: slow start %v, loss rate %v; want slow start and a loss rate of 1/20", i+1, st["slowStart"], st["lossRate"])
		}
	}
}
