package bwe

import (
	"errors"
	"slices"
	"testing"

	"github.com/pion/rtcp"
)

// FuzzParseFeedback unmarshals the input as RTCP and expands every TWCC
// feedback in it: a feedback is refused with an error, or gives one report
// per packet status, in sequence order, with an arrival time for each
// received packet and Received as its status symbol says. A feedback is
// refused with ErrReservedSymbol exactly when one of its statuses (not
// its padding) is the reserved symbol 3.
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
	for _, tt := range reservedSymbolCases {
		f.Add(tt.raw)
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
			syms := statusSymbols(fb)
			reps, err := ParseFeedback(fb)
			if reserved := slices.Contains(syms, 3); reserved != errors.Is(err, ErrReservedSymbol) {
				t.Fatalf("statuses %v (of %d), error %v", syms, fb.PacketStatusCount, err)
			}
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
				if r.Received != (syms[i] == rtcp.TypeTCCPacketReceivedSmallDelta || syms[i] == rtcp.TypeTCCPacketReceivedLargeDelta) {
					t.Fatalf("report %d: received %v for status symbol %d", i, r.Received, syms[i])
				}
			}
		}
	})
}

// statusSymbols lists the status symbols of fb's packets, at most its
// status count of them.
func statusSymbols(fb *rtcp.TransportLayerCC) []uint16 {
	var syms []uint16
	for _, c := range fb.PacketChunks {
		switch c := c.(type) {
		case *rtcp.RunLengthChunk:
			for range c.RunLength {
				syms = append(syms, c.PacketStatusSymbol)
			}
		case *rtcp.StatusVectorChunk:
			syms = append(syms, c.SymbolList...)
		}
	}
	return syms[:min(len(syms), int(fb.PacketStatusCount))]
}
