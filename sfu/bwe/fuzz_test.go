package bwe

import (
	"errors"
	"testing"

	"github.com/pion/rtcp"

	herabwe "github.com/xrealm/xrealm/hera/bwe"
)

// FuzzCountTWCC unmarshals the input as RTCP from a subscriber and counts
// every transport-wide feedback in it, as WideGCC's loss controller does:
// never more packets than the status count; the reserved status symbol 3
// refused exactly when Hera's parser refuses it too; and, where Hera's
// stricter parser accepts the feedback, the same received and lost
// packets as it reports.
func FuzzCountTWCC(f *testing.F) {
	for _, fb := range []*rtcp.TransportLayerCC{
		{BaseSequenceNumber: 65534, PacketStatusCount: 3, ReferenceTime: 5, FbPktCount: 1,
			PacketChunks: []rtcp.PacketStatusChunk{&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketReceivedSmallDelta, RunLength: 3}},
			RecvDeltas:   []*rtcp.RecvDelta{{Type: rtcp.TypeTCCPacketReceivedSmallDelta, Delta: 250}, {Type: rtcp.TypeTCCPacketReceivedSmallDelta, Delta: 500}, {Type: rtcp.TypeTCCPacketReceivedSmallDelta}}},
		{BaseSequenceNumber: 10, PacketStatusCount: 7, FbPktCount: 2,
			PacketChunks: []rtcp.PacketStatusChunk{&rtcp.StatusVectorChunk{SymbolSize: rtcp.TypeTCCSymbolSizeTwoBit, SymbolList: []uint16{1, 0, 2, 0, 1, 0, 0}}},
			RecvDeltas:   []*rtcp.RecvDelta{{Type: rtcp.TypeTCCPacketReceivedSmallDelta, Delta: 250}, {Type: rtcp.TypeTCCPacketReceivedLargeDelta, Delta: -1000}, {Type: rtcp.TypeTCCPacketReceivedSmallDelta}}},
		{BaseSequenceNumber: 1, PacketStatusCount: 20, FbPktCount: 3,
			PacketChunks: []rtcp.PacketStatusChunk{&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketNotReceived, RunLength: 20}}},
	} {
		if b, err := fb.Marshal(); err == nil {
			f.Add(b)
		}
	}
	f.Add(wireFeedback(100, 4, []uint16{0x2002, 0x6002}, []byte{4, 4})) // run of symbol 3
	f.Add(wireFeedback(200, 5, []uint16{0xd340}, []byte{4, 4}))         // symbol 3 in a status vector
	f.Add(wireFeedback(300, 2, []uint16{0xd700}, []byte{4, 4}))         // symbol 3 in padding
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
			recv, lost, err := CountTWCC(fb)
			if recv < 0 || lost < 0 || recv+lost > int(fb.PacketStatusCount) {
				t.Fatalf("CountTWCC = %d received, %d lost for a status count of %d", recv, lost, fb.PacketStatusCount)
			}
			if err != nil && (!errors.Is(err, ErrReservedSymbol) || recv+lost != 0) {
				t.Fatalf("CountTWCC = %d received, %d lost and %v", recv, lost, err)
			}
			reps, herr := herabwe.ParseFeedback(fb)
			if errors.Is(err, ErrReservedSymbol) != errors.Is(herr, herabwe.ErrReservedSymbol) {
				t.Fatalf("CountTWCC: %v; ParseFeedback: %v", err, herr)
			}
			if err != nil || herr != nil {
				continue
			}
			wantRecv, wantLost := 0, 0
			for _, r := range reps {
				if r.Received {
					wantRecv++
				} else {
					wantLost++
				}
			}
			if recv != wantRecv || lost != wantLost {
				t.Fatalf("CountTWCC = %d received, %d lost; ParseFeedback %d and %d", recv, lost, wantRecv, wantLost)
			}
			if recv+lost != len(reps) {
				t.Fatalf("CountTWCC counts %d packets, ParseFeedback reports %d", recv+lost, len(reps))
			}
		}
	})
}
