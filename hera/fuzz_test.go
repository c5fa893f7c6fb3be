package hera

import (
	"encoding/binary"
	"testing"
	"time"
)

// FuzzFlow runs a flow with parameters that Validate accepts (from
// command-line flags) through events from the kernel (ACKs with any RTT
// sample, losses, undos; the times and samples of a socket under any
// network). Nothing panics; once the rule has run, the window stays
// within [MinCwnd, MaxCwnd]; the histogram stays below its cap; the
// minimum RTT of a Tuned flow is at most the sample just taken.
func FuzzFlow(f *testing.F) {
	f.Add(uint8(0), []byte{}, []byte{1, 0, 0, 0, 0, 0, 0x10, 0x27, 0, 0})
	f.Add(uint8(1), []byte{}, []byte{1, 0, 0, 0, 0, 0, 0x10, 0x27, 0, 0, 2, 3, 0x88, 0x13, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(1), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		[]byte{0x40, 0x42, 0x0f, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09})
	f.Fuzz(func(t *testing.T, variant uint8, params, events []byte) {
		p := PaperParams()
		if variant&1 == 1 {
			p = DefaultParams()
		}
		// Overwrite parameters with the input's, 2 bytes each.
		u := func(i int) (uint32, bool) {
			if 2*i+2 > len(params) {
				return 0, false
			}
			return uint32(binary.LittleEndian.Uint16(params[2*i:])), true
		}
		set := []func(uint32){
			func(v uint32) { p.BucketWidth = time.Duration(v) * time.Microsecond },
			func(v uint32) { p.Backlog = int(v) },
			func(v uint32) { p.Buckets = int(v) },
			func(v uint32) { p.DeltaMax = v },
			func(v uint32) { p.HistCap = v },
			func(v uint32) { p.MinCwnd = v },
			func(v uint32) { p.MaxCwnd = v << (variant >> 4) },
			func(v uint32) { p.InitCwnd = v },
			func(v uint32) { p.DecreaseShift = v },
			func(v uint32) { p.LossBetaPermille = v },
			func(v uint32) { p.MinRTTWindow = time.Duration(v) * time.Millisecond },
			func(v uint32) { p.FloorGainEighths = v },
			func(v uint32) { p.BDPWindow = time.Duration(v) * time.Millisecond },
			func(v uint32) { p.BucketPackets = v },
			func(v uint32) { p.GateRTTs = v },
			func(v uint32) { p.OutageRTTs = v },
			func(v uint32) { p.OutageBoostPercent = v },
		}
		for i, s := range set {
			if v, ok := u(i); ok {
				s(v)
			}
		}
		if p.Validate() != nil {
			return
		}
		var path Path
		fl, err := NewFlowOnPath(p, &path)
		if err != nil {
			t.Fatalf("NewFlow(%+v): %v after Validate accepted", p, err)
		}
		var now uint64
		for ; len(events) >= 10; events = events[10:] {
			// 10 bytes: time step (µs, 3 bytes), RTT (4 bytes, signed),
			// acked (2 bytes), kind.
			now += uint64(events[0]) | uint64(events[1])<<8 | uint64(events[2])<<16
			rtt := int64(int32(binary.LittleEndian.Uint32(events[3:])))
			acked := uint32(binary.LittleEndian.Uint16(events[7:]))
			var cwnd uint32
			switch events[9] % 8 {
			case 6:
				cwnd = fl.OnLoss()
			case 7:
				cwnd = fl.OnUndo()
			default:
				cwnd = fl.OnAck(now, rtt, acked)
				valid := rtt > 0 && rtt <= int64(MaxValidRTT/time.Microsecond)
				if m := fl.MinRTT(); p.Variant == Tuned && valid && (m <= 0 || m > time.Duration(rtt)*time.Microsecond) {
					t.Fatalf("after a sample of %d µs the minimum RTT is %v", rtt, fl.MinRTT())
				}
			}
			if cwnd != fl.Cwnd() {
				t.Fatalf("returned window %d, Cwnd %d", cwnd, fl.Cwnd())
			}
			if fl.LastBucket() >= 0 && (cwnd < p.MinCwnd || cwnd > p.MaxCwnd) {
				t.Fatalf("params %+v: window %d outside [%d, %d] after the rule ran", p, cwnd, p.MinCwnd, p.MaxCwnd)
			}
			var total uint64
			for _, h := range fl.Histogram() {
				total += uint64(h)
			}
			if total >= uint64(p.HistCap) {
				t.Fatalf("histogram total %d at or above its cap %d", total, p.HistCap)
			}
		}
	})
}
