package benchcc

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestJain(t *testing.T) {
	tests := []struct {
		x    []float64
		want float64
	}{
		{[]float64{1, 1, 1, 1, 1, 1}, 1},
		{[]float64{1, 0, 0, 0, 0, 0}, 1.0 / 6},
		{[]float64{2, 1}, 0.9},
		{[]float64{0, 0}, 0},
	}
	for _, tt := range tests {
		if got := Jain(tt.x); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v, want %v", tt.x, got, tt.want)
		}
	}
}

func TestMeanP95(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i)
	}
	mean, p95 := meanP95(v)
	if mean != 50.5 || p95 != 95 {
		t.Fatalf("meanP95 = %v, %v; want 50.5, 95", mean, p95)
	}
}

func TestSummariseTargetCheck(t *testing.T) {
	rs := []Result{
		{Trace: "A", Algo: "bbr", Flows: 1, ThroughputMbps: 100, P95QDelayMs: 40, Valid: true},
		{Trace: "A", Algo: "hera", Flows: 1, ThroughputMbps: 95, P95QDelayMs: 10, Valid: true},
		{Trace: "B", Algo: "bbr", Flows: 1, ThroughputMbps: 100, P95QDelayMs: 40, Valid: true},
		{Trace: "B", Algo: "hera", Flows: 1, ThroughputMbps: 50, P95QDelayMs: 10, Valid: true},
		{Trace: "B", Algo: "hera", Flows: 1, Valid: false},
	}
	var buf bytes.Buffer
	Summarise(&buf, rs)
	out := buf.String()
	for _, want := range []string{"hera against bbr", "1 of 2 traces", "| B | hera | 1 (+1 invalid) |"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}
