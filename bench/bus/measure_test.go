package benchbus

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// A ramp step goes on to the next load exactly when capacity counts the
// load as held: when any of its measurements met the limits, whichever
// came last. It used to stop when the last measurement missed after an
// earlier one had held (a held step remeasured for missing p99 ≤ 50 ms under
// steal), and capacity then reported that load as held, and as a lower
// bound ("≥ n") where the ramp had in fact stopped.
func TestMeasureHeldAsCapacityCountsIt(t *testing.T) {
	const users = 200
	row := func(p99ms, ratio, steal float64) Row {
		return Row{System: "s", Users: users, P99ms: p99ms, Ratio: ratio, StealCPU: steal}
	}
	for _, tc := range []struct {
		name  string
		tries []Row // the measurements the step would take, in order
		held  bool
		taken int // measurements taken
		cools int // cool-downs before remeasurements
	}{
		{"held at once", []Row{row(20, 1, 0)}, true, 1, 0},
		{"missed, held again", []Row{row(150, 1, 0), row(40, 1, 0)}, true, 2, 0},
		{"missed twice", []Row{row(150, 1, 0), row(150, 1, 0)}, false, 2, 0},
		{"ratio missed twice", []Row{row(20, 0.9, 0), row(20, 0.95, 0)}, false, 2, 0},
		{"held within 100 ms, not 50, under steal; missed the remeasurement", []Row{row(80, 1, 0.5), row(150, 1, 0)}, true, 2, 1},
		{"held within 100 ms under steal twice; missed the third", []Row{row(80, 1, 0.5), row(70, 1, 0.5), row(150, 1, 0.5)}, true, 3, 2},
		{"missed, then held within 100 ms under steal, then missed", []Row{row(150, 1, 0), row(80, 1, 0.5), row(300, 1, 0)}, true, 3, 1},
		{"missed under steal three times", []Row{row(150, 1, 0.5), row(150, 1, 0.5), row(150, 1, 0.5)}, false, 3, 2},
		{"held within 50 ms under steal", []Row{row(30, 1, 0.5)}, true, 1, 0},
		{"broker died", []Row{{System: "s", Users: users, Error: "broker exited during the step"}}, false, 1, 0},
		// The remeasurement under steal failed (its fleet could not join, the
		// broker died): the first measurement still held the load, as
		// capacity counts it, and the ramp goes on.
		{"held within 100 ms under steal; the remeasurement failed", []Row{row(80, 1, 0.5), {System: "s", Users: users, Error: "fleet: 3 of 200 bots could not join"}}, true, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &runner{cfg: Config{MaxP99: 100 * time.Millisecond, MinRatio: 0.99}, res: &Results{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			taken, cools := 0, 0
			take := func() Row {
				if taken == len(tc.tries) {
					t.Fatalf("measured %d times, more than the %d scripted", taken+1, len(tc.tries))
				}
				taken++
				return tc.tries[taken-1]
			}
			held, err := b.measureWith(context.Background(), take, func() { cools++ })
			if err != nil {
				t.Fatal(err)
			}
			if held != tc.held || taken != tc.taken || cools != tc.cools {
				t.Errorf("held %v after %d measurements and %d cool-downs, want %v, %d, %d", held, taken, cools, tc.held, tc.taken, tc.cools)
			}
			// The ramp and the report agree on the load.
			got, _ := capacity(b.res.Rows, "s", b.cfg.MaxP99, b.cfg.MinRatio)
			if counted := got == users; counted != held {
				t.Errorf("measure says held %v, capacity counts the load as held: %v", held, counted)
			}
		})
	}
}
