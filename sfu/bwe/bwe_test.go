package bwe

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pion/interceptor/pkg/cc"
	"github.com/pion/rtcp"
)

var _ cc.BandwidthEstimator = (*WideGCC)(nil)

func TestLossControllerPasses100Mbit(t *testing.T) {
	l := NewLossController(DefaultMin, DefaultMax, 10_000_000)
	now := time.Unix(0, 0)
	for i := 0; i < 200; i++ {
		now = now.Add(250 * time.Millisecond)
		l.Update(now, 100, 0)
	}
	if got := l.Target(); got != DefaultMax {
		t.Fatalf("lossless target %d, want the %d maximum (above pion's fixed 100 Mbit/s)", got, DefaultMax)
	}
	for i := 0; i < 5; i++ {
		now = now.Add(250 * time.Millisecond)
		l.Update(now, 70, 30)
	}
	if got := l.Target(); got >= DefaultMax/2 {
		t.Fatalf("target %d after 30%% loss, want a decrease", got)
	}
	for i := 0; i < 100; i++ {
		now = now.Add(250 * time.Millisecond)
		l.Update(now, 0, 100)
	}
	if got := l.Target(); got != DefaultMin {
		t.Fatalf("target %d under total loss, want the minimum %d", got, DefaultMin)
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

func unmarshalFeedback(t testing.TB, raw []byte) *rtcp.TransportLayerCC {
	t.Helper()
	pkts, err := rtcp.Unmarshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	return pkts[0].(*rtcp.TransportLayerCC)
}

func TestCountTWCC(t *testing.T) {
	tests := []struct {
		name       string
		fb         *rtcp.TransportLayerCC
		recv, lost int
		where      string // the reserved symbol's place in the error; "" for none
	}{
		{"statuses past the count are padding", &rtcp.TransportLayerCC{PacketStatusCount: 10, PacketChunks: []rtcp.PacketStatusChunk{
			&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketReceivedSmallDelta, RunLength: 4},
			&rtcp.StatusVectorChunk{SymbolList: []uint16{0, 1, 0, 2, 1, 1, 1}}, // 7 symbols, only 6 count
		}}, 8, 2, ""},
		// run length 2 of symbol 1, then run length 2 of symbol 3
		{"symbol 3 in a run-length chunk", unmarshalFeedback(t, wireFeedback(100, 4, []uint16{0x2002, 0x6002}, []byte{4, 4})),
			0, 0, "chunk 1 (run length 2) gives packet 102 (status 3 of 4)"},
		// two-bit status vector 1 0 3 1 0 0 0
		{"symbol 3 in a status vector chunk", unmarshalFeedback(t, wireFeedback(200, 5, []uint16{0xd340}, []byte{4, 4})),
			0, 0, "chunk 0 (status vector, symbol 2) gives packet 202 (status 3 of 5)"},
		// two-bit status vector 1 1 3 0 0 0 0 for 2 packets
		{"symbol 3 after the status count", unmarshalFeedback(t, wireFeedback(300, 2, []uint16{0xd700}, []byte{4, 4})), 2, 0, ""},
		{"empty run of symbol 3", unmarshalFeedback(t, wireFeedback(400, 1, []uint16{0x6000, 0x2001}, []byte{4})), 1, 0, ""},
		{"hand-built run of symbol 3", &rtcp.TransportLayerCC{BaseSequenceNumber: 9, PacketStatusCount: 3, PacketChunks: []rtcp.PacketStatusChunk{
			&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketReceivedWithoutDelta, RunLength: 3},
		}}, 0, 0, "chunk 0 (run length 3) gives packet 9 (status 1 of 3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recv, lost, err := CountTWCC(tt.fb)
			if tt.where != "" {
				if !errors.Is(err, ErrReservedSymbol) || !strings.Contains(err.Error(), tt.where) {
					t.Fatalf("error %v, want ErrReservedSymbol at %q", err, tt.where)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if recv != tt.recv || lost != tt.lost {
				t.Fatalf("recv %d lost %d, want %d and %d", recv, lost, tt.recv, tt.lost)
			}
		})
	}
}

// Feedback with the reserved symbol, or that pion's GCC refuses, is
// counted and left out: WriteRTCP returns no error, which would end the
// reading of the subscriber's RTCP, and the valid feedback in the same
// batch still updates the loss controller.
func TestWideGCCSkipsMalformedFeedback(t *testing.T) {
	w, err := NewWideGCC(Config{})
	if err != nil {
		t.Fatal(err)
	}
	lost := &rtcp.TransportLayerCC{PacketStatusCount: 20, PacketChunks: []rtcp.PacketStatusChunk{
		&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketNotReceived, RunLength: 20}}}
	batch := []rtcp.Packet{unmarshalFeedback(t, wireFeedback(100, 4, []uint16{0x2002, 0x6002}, []byte{4, 4})), lost}
	if err := w.WriteRTCP(batch, nil); err != nil {
		t.Fatalf("WriteRTCP: %v", err)
	}
	s := w.GetStats()
	if s["wideMalformedFeedback"] != uint64(1) || !strings.Contains(s["wideLastMalformedFeedback"].(string), "reserved") {
		t.Fatalf("malformed %v, last %q; want 1, the reserved symbol", s["wideMalformedFeedback"], s["wideLastMalformedFeedback"])
	}
	if got := w.loss.AverageLoss(); got != 1 {
		t.Fatalf("average loss %v, want 1 from the valid feedback", got)
	}
	missingDelta := &rtcp.TransportLayerCC{PacketStatusCount: 1, PacketChunks: []rtcp.PacketStatusChunk{
		&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketReceivedSmallDelta, RunLength: 1}}}
	if err := w.WriteRTCP([]rtcp.Packet{missingDelta}, nil); err != nil {
		t.Fatalf("WriteRTCP: %v", err)
	}
	if s := w.GetStats(); s["wideMalformedFeedback"] != uint64(2) {
		t.Fatalf("malformed %v after a feedback without its delta, want 2", s["wideMalformedFeedback"])
	}
	w.Close()
	if err := w.WriteRTCP([]rtcp.Packet{lost}, nil); err == nil {
		t.Fatal("a closed estimator took feedback without an error")
	}
}

func TestWideGCCDefaults(t *testing.T) {
	w, err := NewWideGCC(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := w.GetTargetBitrate(); got != DefaultInitial {
		t.Fatalf("initial target %d, want %d", got, DefaultInitial)
	}
	if _, ok := w.GetStats()["delayTargetBitrate"]; !ok {
		t.Fatal("stats lack delayTargetBitrate")
	}
}
