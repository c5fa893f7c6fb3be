package sfu

import (
	"context"
	"testing"
	"time"

	"github.com/xrealm/xrealm/volumetric"
)

func TestHopHists(t *testing.T) {
	capture := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	tests := []struct {
		relayed          bool
		arrived, handled time.Duration
	}{
		{false, 2 * ms, 3 * ms},
		{true, 30 * ms, 31 * ms},
		{true, 50 * ms, 60 * ms},
	}
	h := newHopHists()
	for _, tc := range tests {
		h.record(tc.relayed, capture, capture.Add(tc.arrived), capture.Add(tc.handled))
	}
	got := h.take()
	near := func(v, want float64) bool { return v >= want && v <= want*1.01 } // 2 significant digits
	if got.InLocal.N != 1 || !near(got.InLocal.Max, 2) || got.InRelay.N != 2 || !near(got.InRelay.Max, 50) || !near(got.Out.Max, 60) || !near(got.Fanout.Max, 10) {
		t.Fatalf("take = %+v", got)
	}
	if again := h.take(); again.Out.N != 0 || again.InRelay.N != 0 {
		t.Fatalf("take after take = %+v, want empty", again)
	}
	var nilHops *hopHists
	nilHops.record(false, capture, capture, capture) // a source without a node
}

func TestCaptureTime(t *testing.T) {
	b := make([]byte, volumetric.HeaderSize+4)
	volumetric.Header{Client: 1, Frame: 2, Count: 1, CaptureUs: 1_700_000_000_000_000}.Marshal(b)
	tests := []struct {
		name    string
		payload []byte
		ok      bool
	}{
		{"header", b, true},
		{"short", b[:5], false},
		{"not a header", make([]byte, 30), false},
	}
	for _, tc := range tests {
		c, ok := captureTime(tc.payload)
		if ok != tc.ok || (ok && c.UnixMicro() != 1_700_000_000_000_000) {
			t.Errorf("%s: captureTime = %v, %v", tc.name, c, ok)
		}
	}
}

func TestLagProbe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := StartLagProbe(ctx, time.Millisecond)
	time.Sleep(30 * time.Millisecond)
	if q := p.Take(); q.N == 0 || q.Max < 0 {
		t.Fatalf("Take = %+v, want samples", q)
	}
}
