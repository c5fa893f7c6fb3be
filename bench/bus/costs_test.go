package benchbus

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// synthRow is a held step whose CPU follows known costs (µs): a broker that
// writes to each connection 100 times a second, or less to keep within
// 25,000 writes a second, but at least 25 times (xrealm's linger and write
// budget on two cores).
func synthRow(system string, users, scenes int, broker, gen CostSplit) Row {
	per := float64(users / scenes)
	d := float64(scenes) * per * per * 10
	w := min(float64(users)*100, max(25000, float64(users)*25))
	pub := float64(users) * 10
	bd, bw, bp := broker.At(d, w, pub)
	gd, gw, gp := gen.At(d, w, pub)
	bd, gd = bd+broker.Idle, gd+gen.Idle
	return Row{Experiment: "isolation", System: system, Users: users, Scenes: scenes, Seconds: 10, Sent: int64(pub * 10),
		Ratio: 1, P99ms: 20, PerSec: d, BrokerWrites: w, BrokerCPU: bd + bw + bp, GenCPU: gd + gw + gp}
}

func TestFitCosts(t *testing.T) {
	broker := CostSplit{Idle: 0.02, Delivery: 0.1, Write: 10, Publish: 4}
	gen := CostSplit{Idle: 0.01, Delivery: 0.08, Write: 9, Publish: 1}
	var rows []Row
	for _, scenes := range []int{1, 2, 5, 10} {
		for _, users := range []int{100, 200, 400, 800} {
			rows = append(rows, synthRow("xrealm", users, scenes, broker, gen))
		}
	}
	// Left out of the fit: a step that missed the limits, one whose write
	// calls were not counted, and another system's.
	bad := synthRow("xrealm", 900, 1, broker, gen)
	bad.BrokerCPU, bad.P99ms = 5, 900
	uncounted := synthRow("xrealm", 950, 1, broker, gen)
	uncounted.BrokerCPU, uncounted.BrokerWrites = 7, 0
	rows = append(rows, bad, uncounted, synthRow("other", 300, 1, CostSplit{Delivery: 9, Write: 9, Publish: 9}, gen))

	c, err := fitCosts(rows, "xrealm", 100*time.Millisecond, 0.99)
	if err != nil {
		t.Fatal(err)
	}
	if c.Steps != 16 {
		t.Errorf("Steps = %d, want 16", c.Steps)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*math.Max(1, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("broker idle", c.Broker.Idle, broker.Idle)
	near("machine idle", c.Machine.Idle, broker.Idle+gen.Idle)
	near("broker delivery", c.Broker.Delivery, broker.Delivery)
	near("broker write", c.Broker.Write, broker.Write)
	near("broker publish", c.Broker.Publish, broker.Publish)
	near("machine delivery", c.Machine.Delivery, broker.Delivery+gen.Delivery)
	near("machine write", c.Machine.Write, broker.Write+gen.Write)
	near("machine publish", c.Machine.Publish, broker.Publish+gen.Publish)
	if c.Broker.Misfit > 1e-6 {
		t.Errorf("misfit %v on exact data", c.Broker.Misfit)
	}
}

func TestFitCostsCannotSeparate(t *testing.T) {
	unit := CostSplit{Delivery: 1, Write: 1, Publish: 1}
	// Mosquitto writes every delivery with a call of its own: writes and
	// deliveries cannot be told apart.
	var oneWritePerDelivery []Row
	for _, users := range []int{50, 100, 150, 200, 250, 300, 350, 400} {
		r := synthRow("mosquitto", users, 1, unit, unit)
		r.BrokerWrites = r.PerSec
		oneWritePerDelivery = append(oneWritePerDelivery, r)
	}
	if _, err := fitCosts(oneWritePerDelivery, "mosquitto", 100*time.Millisecond, 0.99); !errors.Is(err, errCollinear) {
		t.Errorf("writes = deliveries: err = %v, want errCollinear", err)
	}
	if _, err := fitCosts(oneWritePerDelivery[:3], "mosquitto", 100*time.Millisecond, 0.99); err == nil || !strings.Contains(err.Error(), "3 held steps") {
		t.Errorf("three steps: err = %v, want too few", err)
	}
}

func TestCostsMarkdown(t *testing.T) {
	broker := CostSplit{Idle: 0.01, Delivery: 0.1, Write: 10, Publish: 4}
	r := &Results{Config: ConfigSummary{MaxP99: "100ms", MinRatio: 0.99}}
	for _, scenes := range []int{1, 5} {
		for _, users := range []int{200, 400, 600, 800} {
			r.Rows = append(r.Rows, synthRow("xrealm", users, scenes, broker, broker))
		}
	}
	var b strings.Builder
	costsMarkdown(&b, r, 100*time.Millisecond, 0.99)
	out := b.String()
	for _, want := range []string{
		"## Where the CPU goes",
		"| xrealm | 8 | 0.01 | 0.100 | 10.00 | 4.00 | 0.00 | 0.02 | 0.200 | 20.00 | 8.00 | 0.00 |",
		// 800 users in one scene (the capacity: the largest step): 6.4 M
		// deliveries (1.28 cores), 25,000 writes (0.5) and 8,000 publishes
		// (0.064) a second, and 0.02 idle; in five scenes a fifth of the
		// deliveries and the same writes.
		"| xrealm | 1 | 800 | 6400000 | 25000 | 8000 | 69% | 27% | 3% | 1.86 | 1.86 |",
		"| xrealm | 5 | 800 | 1280000 | 25000 | 8000 | 31% | 61% | 8% | 0.84 | 0.84 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestParseProcIO(t *testing.T) {
	for _, tc := range []struct {
		name          string
		in            string
		reads, writes int64
		wantErr       bool
	}{
		{name: "kernel format", in: "rchar: 10\nwchar: 20\nsyscr: 3\nsyscw: 4\nread_bytes: 0\n", reads: 3, writes: 4},
		{name: "no syscw", in: "rchar: 10\nsyscr: 3\n", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "not a number", in: "syscr: x\nsyscw: 4\n", wantErr: true},
		{name: "negative", in: "syscr: 3\nsyscw: -4\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := parseProcIO([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && (r != tc.reads || w != tc.writes) {
				t.Errorf("= %d, %d, want %d, %d", r, w, tc.reads, tc.writes)
			}
		})
	}
	if r, w, err := procSyscalls("self"); err != nil || r <= 0 || w < 0 {
		t.Errorf("procSyscalls(self) = %d, %d, %v", r, w, err)
	}
	if _, _, err := procSyscalls("999999999"); err == nil {
		t.Error("procSyscalls of a missing process: no error")
	}
}
