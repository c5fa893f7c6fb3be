package bwe

import (
	"fmt"
	"time"

	"github.com/pion/rtcp"
)

// PacketReport is the fate of one packet in a transport-wide congestion
// control (TWCC) feedback message.
type PacketReport struct {
	// Seq is the transport-wide sequence number.
	Seq uint16
	// Received reports whether the packet arrived.
	Received bool
	// Arrival is the receiver's arrival time, on the receiver's clock
	// (ReferenceTime·64 ms plus the deltas), valid when Received.
	Arrival time.Duration
}

// ParseFeedback expands a TWCC feedback packet into one report per packet
// status, in sequence order. It checks that the chunks and deltas agree
// with the packet status count.
func ParseFeedback(fb *rtcp.TransportLayerCC) ([]PacketReport, error) {
	n := int(fb.PacketStatusCount)
	reps := make([]PacketReport, 0, n)
	seq := fb.BaseSequenceNumber
	add := func(symbol uint16) {
		reps = append(reps, PacketReport{Seq: seq, Received: symbol == rtcp.TypeTCCPacketReceivedSmallDelta || symbol == rtcp.TypeTCCPacketReceivedLargeDelta})
		seq++
	}
	for _, c := range fb.PacketChunks {
		switch c := c.(type) {
		case *rtcp.RunLengthChunk:
			for i := 0; i < int(c.RunLength) && len(reps) < n; i++ {
				add(c.PacketStatusSymbol)
			}
		case *rtcp.StatusVectorChunk:
			for _, s := range c.SymbolList {
				if len(reps) == n {
					break
				}
				add(s)
			}
		default:
			return nil, fmt.Errorf("bwe: TWCC feedback %d has an unknown chunk type %T", fb.FbPktCount, c)
		}
	}
	if len(reps) != n {
		return nil, fmt.Errorf("bwe: TWCC feedback %d: chunks describe %d packets, status count says %d", fb.FbPktCount, len(reps), n)
	}
	at := time.Duration(fb.ReferenceTime) * 64 * time.Millisecond
	d := 0
	for i := range reps {
		if !reps[i].Received {
			continue
		}
		if d >= len(fb.RecvDeltas) {
			return nil, fmt.Errorf("bwe: TWCC feedback %d: %d received packets but only %d deltas", fb.FbPktCount, d+1, len(fb.RecvDeltas))
		}
		at += time.Duration(fb.RecvDeltas[d].Delta) * time.Microsecond
		reps[i].Arrival = at
		d++
	}
	return reps, nil
}
