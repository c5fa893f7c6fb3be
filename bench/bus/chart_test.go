package benchbus

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCapacity(t *testing.T) {
	row := func(users int, p99 float64, ratio float64) Row {
		return Row{System: "s", Users: users, P99ms: p99, Ratio: ratio}
	}
	tests := []struct {
		name   string
		rows   []Row
		want   int
		capped bool
	}{
		{"stops at the first miss", []Row{row(20, 5, 1), row(40, 30, 1), row(60, 150, 1)}, 40, false},
		{"ratio counts", []Row{row(20, 5, 1), row(40, 5, 0.95)}, 20, false},
		{"never missed", []Row{row(20, 5, 1), row(40, 6, 1)}, 40, true},
		{"first step missed", []Row{row(20, 500, 1)}, 0, false},
	}
	for _, tc := range tests {
		got, capped := capacity(tc.rows, "s", 100*time.Millisecond, 0.99)
		if got != tc.want || capped != tc.capped {
			t.Errorf("%s: capacity %d capped %v, want %d %v", tc.name, got, capped, tc.want, tc.capped)
		}
	}
}

func TestChartSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.svg")
	c := chart{Title: "t <&>", XLabel: "x", YLabel: "y", LogY: true, HLine: 100, HLineLabel: "limit",
		Series: []series{{Name: "a", X: []float64{20, 40}, Y: []float64{1, 200}}, {Name: "b", X: []float64{20}, Y: []float64{0}}}}
	if err := c.write(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	for _, want := range []string{"<svg", "</svg>", "t &lt;&amp;&gt;", "<polyline", ">a</text>", ">limit</text>"} {
		if !strings.Contains(s, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestProcReaders(t *testing.T) {
	cpu, err := procCPU("self")
	if err != nil || cpu < 0 {
		t.Fatalf("procCPU(self) = %v, %v", cpu, err)
	}
	rss, peak, err := procMem("self")
	if err != nil || rss <= 0 || peak < rss {
		t.Fatalf("procMem(self) = %d, %d, %v", rss, peak, err)
	}
	if _, _, err := machineCPU(); err != nil {
		t.Fatal(err)
	}
	if _, err := procCPU("999999999"); err == nil {
		t.Error("procCPU of a missing process: no error")
	}
}
