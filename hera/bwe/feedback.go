package bwe

import (
	"errors"
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

// ErrReservedSymbol reports a TWCC feedback that gives a packet the
// packet status symbol 3 (binary 11). Section 3.1.1 of
// draft-holmer-rmcat-transport-wide-cc-extensions-01 defines 0 (not
// received), 1 (received, small delta) and 2 (received, large or negative
// delta) and reserves 3; libwebrtc refuses a feedback that carries it
// (pion/rtcp names it TypeTCCPacketReceivedWithoutDelta). Whether such a
// packet arrived, and whether a delta follows for it, is unknown, so the
// whole feedback is refused rather than guessed at.
var ErrReservedSymbol = errors.New("the reserved packet status symbol 3 (binary 11)")

// WalkStatuses calls f with the sequence number and status symbol of each
// packet a TWCC feedback reports, in order, reading no more statuses than
// its status count (the rest is padding). It refuses a feedback that gives
// one of those packets the reserved status symbol 3 (an error wrapping
// ErrReservedSymbol that names the chunk and packet), or that has a chunk
// of an unknown type; f has then seen the statuses before it. It does not
// check that the chunks cover the status count.
func WalkStatuses(fb *rtcp.TransportLayerCC, f func(seq, symbol uint16)) error {
	n := int(fb.PacketStatusCount)
	done := 0
	invalid := func(chunk int, kind string, symbol uint16) error {
		seq := fb.BaseSequenceNumber + uint16(done)
		if symbol == 3 {
			return fmt.Errorf("bwe: TWCC feedback %d: chunk %d (%s) gives packet %d (status %d of %d) %w",
				fb.FbPktCount, chunk, kind, seq, done+1, n, ErrReservedSymbol)
		}
		return fmt.Errorf("bwe: TWCC feedback %d: chunk %d (%s) gives packet %d (status %d of %d) the status symbol %d, which is not 2 bits",
			fb.FbPktCount, chunk, kind, seq, done+1, n, symbol)
	}
	add := func(symbol uint16) {
		f(fb.BaseSequenceNumber+uint16(done), symbol)
		done++
	}
	for ci, c := range fb.PacketChunks {
		switch c := c.(type) {
		case *rtcp.RunLengthChunk:
			if c.PacketStatusSymbol > rtcp.TypeTCCPacketReceivedLargeDelta && c.RunLength > 0 && done < n {
				return invalid(ci, fmt.Sprintf("run length %d", c.RunLength), c.PacketStatusSymbol)
			}
			for i := 0; i < int(c.RunLength) && done < n; i++ {
				add(c.PacketStatusSymbol)
			}
		case *rtcp.StatusVectorChunk:
			for i, s := range c.SymbolList {
				if done == n {
					break
				}
				if s > rtcp.TypeTCCPacketReceivedLargeDelta {
					return invalid(ci, fmt.Sprintf("status vector, symbol %d", i), s)
				}
				add(s)
			}
		default:
			return fmt.Errorf("bwe: TWCC feedback %d has an unknown chunk type %T", fb.FbPktCount, c)
		}
	}
	return nil
}

// ParseFeedback expands a TWCC feedback packet into one report per packet
// status, in sequence order. It checks that the chunks and deltas agree
// with the packet status count, and refuses a feedback that gives one of
// its packets the reserved status symbol 3 (an error wrapping
// ErrReservedSymbol that names the chunk); symbols after the status
// count (padding) are not read.
func ParseFeedback(fb *rtcp.TransportLayerCC) ([]PacketReport, error) {
	n := int(fb.PacketStatusCount)
	reps := make([]PacketReport, 0, n)
	err := WalkStatuses(fb, func(seq, symbol uint16) {
		reps = append(reps, PacketReport{Seq: seq, Received: symbol == rtcp.TypeTCCPacketReceivedSmallDelta || symbol == rtcp.TypeTCCPacketReceivedLargeDelta})
	})
	if err != nil {
		return nil, err
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
