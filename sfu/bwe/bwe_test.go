package bwe

import (
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

func TestCountTWCC(t *testing.T) {
	fb := &rtcp.TransportLayerCC{PacketStatusCount: 10, PacketChunks: []rtcp.PacketStatusChunk{
		&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketReceivedSmallDelta, RunLength: 4},
		&rtcp.StatusVectorChunk{SymbolList: []uint16{0, 1, 0, 2, 1, 1, 1}}, // 7 symbols, only 6 count
	}}
	recv, lost := CountTWCC(fb)
	if recv != 8 || lost != 2 {
		t.Fatalf("recv %d lost %d, want 8 and 2", recv, lost)
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
