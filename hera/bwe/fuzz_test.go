package bwe

import (
	"testing"

	"github.com/pion/rtcp"
)

// FuzzParseFeedback unmarshals the input as RTCP and expands every TWCC
// feedback in it: a feedback is refused with an error, or gives one report
// per packet status, in sequence order, with an arrival time for each
// received packet.
func FuzzParseFeedback(f *testing.F) {
	fb := &rtcp.TransportLayerCC{
		BaseSequenceNumber: 65534, PacketStatusCount: 3, ReferenceTime: 5, FbPktCount: 1,
		PacketChunks: []rtcp.PacketStatusChunk{&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketReceivedSmallDelta, RunLength: 3}},
		RecvDeltas: []*rtcp.RecvDelta{
			{Type: rtcp.TypeTCCPacketReceivedSmallDelta, Delta: 250},
			{Type: rtcp.TypeTCCPacketReceivedSmallDelta, Delta: 500},
			{Type: rtcp.TypeTCCPacketReceivedSmallDelta, Delta: 0},
		},
	}
	if b, err := fb.Marshal(); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pkts, err := rtcp.Unmarshal(b)
		if err != nil {
			return
		}
		for _, p := range pkts {
			fb, ok := p.(*rtcp.TransportLayerCC)
			if !ok {
				continue
			}
			reps, err := ParseFeedback(fb)
			if err != nil {
				continue
			}
			if len(reps) != int(fb.PacketStatusCount) {
				t.Fatalf("%d reports for a status count of %d", len(reps), fb.PacketStatusCount)
			}
			for i, r := range reps {
				if r.Seq != fb.BaseSequenceNumber+uint16(i) {
					t.Fatalf("report %d has sequence number %d, want %d", i, r.Seq, fb.BaseSequenceNumber+uint16(i))
				}
				if !r.Received && r.Arrival != 0 {
					t.Fatalf("a lost packet has an arrival time")
				}
			}
		}
	})
}
