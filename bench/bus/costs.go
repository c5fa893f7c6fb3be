package benchbus

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Costs splits a system's CPU into what each kind of work costs, fitted by
// least squares over the steps it held:
//
//	CPU = Delivery × deliveries/s + Write × broker write calls/s + Publish × messages published/s
//
// Deliveries grow with the square of a scene's users; writes (with a
// linger, at most one per connection per linger interval) and publishes
// grow with the users. Which of the two dominates decides how capacity
// grows when the same users are spread over more scenes: spreading cuts
// the deliveries, not the per-user work.
type Costs struct {
	System string
	Steps  int // the held steps the fit used
	// Broker is the broker's CPU alone; Machine the broker's and the
	// generator's together (they share the machine's cores).
	Broker, Machine CostSplit
}

// CostSplit is one fit, in µs of CPU per unit of work.
type CostSplit struct {
	Delivery, Write, Publish float64
	// Misfit is the largest difference between a step's fitted and
	// measured CPU, relative to the measured.
	Misfit float64
}

// At is the CPU, in cores, that s predicts for a load.
func (s CostSplit) At(deliveries, writes, publishes float64) (d, w, p float64) {
	return s.Delivery * deliveries / 1e6, s.Write * writes / 1e6, s.Publish * publishes / 1e6
}

// minCostSteps is the fewest held steps a fit needs.
const minCostSteps = 6

// errCollinear: the steps do not vary the kinds of work independently.
var errCollinear = errors.New("the steps do not vary deliveries, writes and publishes independently (each write carries one delivery, or the loads are too alike)")

// publishedPerS is the rate at which a step's users published.
func publishedPerS(r Row) float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Sent) / r.Seconds
}

// fitCosts fits system's costs over the rows that held (no error, within
// maxP99 and minRatio) and whose broker write calls were counted.
func fitCosts(rows []Row, system string, maxP99 time.Duration, minRatio float64) (Costs, error) {
	c := Costs{System: system}
	var x [][3]float64
	var broker, machine []float64
	for _, r := range rows {
		if r.System != system || !r.OK(maxP99, minRatio) || r.BrokerWrites <= 0 || r.BrokerCPU <= 0 {
			continue
		}
		x = append(x, [3]float64{r.PerSec, r.BrokerWrites, publishedPerS(r)})
		broker = append(broker, r.BrokerCPU)
		machine = append(machine, r.BrokerCPU+r.GenCPU)
	}
	c.Steps = len(x)
	if len(x) < minCostSteps {
		return c, fmt.Errorf("%d held steps with counted writes, %d needed", len(x), minCostSteps)
	}
	var err error
	if c.Broker, err = leastSquares3(x, broker); err != nil {
		return c, err
	}
	c.Machine, err = leastSquares3(x, machine)
	return c, err
}

// leastSquares3 fits y ≈ x·k (y in cores) and returns k in µs per unit.
// The columns are scaled to unit length first, so that the test for
// collinearity does not depend on their units.
func leastSquares3(x [][3]float64, y []float64) (CostSplit, error) {
	var norm [3]float64
	for _, row := range x {
		for j := range 3 {
			norm[j] += row[j] * row[j]
		}
	}
	for j := range 3 {
		norm[j] = math.Sqrt(norm[j])
		if norm[j] == 0 {
			return CostSplit{}, errCollinear
		}
	}
	// The normal equations of the scaled columns: a is their Gram matrix,
	// with ones on the diagonal; its determinant is near 0 when a column is
	// nearly a combination of the others.
	var a [3][4]float64
	for i, row := range x {
		for j := range 3 {
			for k := range 3 {
				a[j][k] += row[j] / norm[j] * row[k] / norm[k]
			}
			a[j][3] += row[j] / norm[j] * y[i]
		}
	}
	det := a[0][0]*(a[1][1]*a[2][2]-a[1][2]*a[2][1]) - a[0][1]*(a[1][0]*a[2][2]-a[1][2]*a[2][0]) + a[0][2]*(a[1][0]*a[2][1]-a[1][1]*a[2][0])
	if det < 1e-4 {
		return CostSplit{}, errCollinear
	}
	// Gaussian elimination with partial pivoting.
	for col := range 3 {
		p := col
		for r := col + 1; r < 3; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		a[col], a[p] = a[p], a[col]
		for r := range 3 {
			if r == col {
				continue
			}
			f := a[r][col] / a[col][col]
			for k := col; k < 4; k++ {
				a[r][k] -= f * a[col][k]
			}
		}
	}
	var k [3]float64
	for j := range 3 {
		k[j] = a[j][3] / a[j][j] / norm[j]
	}
	s := CostSplit{Delivery: k[0] * 1e6, Write: k[1] * 1e6, Publish: k[2] * 1e6}
	for i, row := range x {
		fit := k[0]*row[0] + k[1]*row[1] + k[2]*row[2]
		if y[i] > 0 {
			s.Misfit = max(s.Misfit, math.Abs(fit-y[i])/y[i])
		}
	}
	return s, nil
}

// costsMarkdown writes the section on where each system's CPU goes: the
// fitted costs, and what they make of the loads at the isolation
// capacities (p99 ≤ 50 ms, as the isolation target counts them).
func costsMarkdown(b *strings.Builder, r *Results, maxP99 time.Duration, minRatio float64) {
	var rows []Row
	for _, row := range r.Rows {
		switch row.Experiment {
		case "ramp", "efficiency", "isolation":
			rows = append(rows, row)
		}
	}
	syss := systemsOf(rows)
	if len(syss) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Where the CPU goes\n\n")
	p("Fitted by least squares over each system's held steps (ramp, efficiency and isolation): CPU = *a* × deliveries/s + *b* × broker write calls/s + *c* × messages published/s, for the broker alone and for the broker and the generator together (the machine's two processes). Write calls are counted by the kernel (`/proc/{pid}/io`). Deliveries grow with the square of a scene's users, writes and publishes with the users: spreading the same users over more scenes cuts the first kind of work only, so the more of the CPU goes to per-user work, the less capacity grows with scenes. *Misfit* is the largest difference between a step's fitted and measured CPU.\n\n")
	p("| system | steps | broker µs/delivery | broker µs/write | broker µs/publish | misfit | broker + generator µs/delivery | µs/write | µs/publish | misfit |\n|---|---|---|---|---|---|---|---|---|---|\n")
	fits := map[string]Costs{}
	for _, sys := range syss {
		c, err := fitCosts(rows, sys, maxP99, minRatio)
		if err != nil {
			p("| %s | %d | %s |||||||\n", sys, c.Steps, err)
			continue
		}
		fits[sys] = c
		p("| %s | %d | %.3f | %.2f | %.2f | %.0f%% | %.3f | %.2f | %.2f | %.0f%% |\n", sys, c.Steps,
			c.Broker.Delivery, c.Broker.Write, c.Broker.Publish, 100*c.Broker.Misfit,
			c.Machine.Delivery, c.Machine.Write, c.Machine.Publish, 100*c.Machine.Misfit)
	}
	p("\n")
	iso := rowsOf(r, "isolation", 0)
	var lines []string
	for _, sys := range syss {
		c, ok := fits[sys]
		if !ok {
			continue
		}
		for _, sc := range sceneCounts(iso) {
			users, _ := capacity(rowsOf(r, "isolation", sc), sys, 50*time.Millisecond, minRatio)
			row, ok := heldRow(rowsOf(r, "isolation", sc), sys, users, maxP99, minRatio)
			if !ok {
				continue
			}
			pub := publishedPerS(row)
			d, w, pb := c.Machine.At(row.PerSec, row.BrokerWrites, pub)
			sum := d + w + pb
			if sum <= 0 {
				continue
			}
			lines = append(lines, fmt.Sprintf("| %s | %d | %d | %.0f | %.0f | %.0f | %.0f%% | %.0f%% | %.0f%% | %.2f | %.2f |\n", sys, sc, users,
				row.PerSec, row.BrokerWrites, pub, 100*d/sum, 100*w/sum, 100*pb/sum, sum, row.BrokerCPU+row.GenCPU))
		}
	}
	if len(lines) > 0 {
		p("At each isolation capacity (p99 ≤ 50 ms), the step's load and the broker's and generator's fitted CPU by kind of work:\n\n")
		p("| system | scenes | users | deliveries/s | broker writes/s | published/s | deliveries | writes | publishes | fitted cores | measured cores |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, l := range lines {
			p("%s", l)
		}
		p("\n")
	}
}

// sceneCounts lists the scene counts of rows, in increasing order.
func sceneCounts(rows []Row) []int {
	seen := map[int]bool{}
	var out []int
	for _, r := range rows {
		if !seen[r.Scenes] {
			seen[r.Scenes] = true
			out = append(out, r.Scenes)
		}
	}
	slices.Sort(out)
	return out
}

// heldRow returns a measurement of system at users that met the limits.
func heldRow(rows []Row, system string, users int, maxP99 time.Duration, minRatio float64) (Row, bool) {
	for _, r := range rows {
		if r.System == system && r.Users == users && r.OK(maxP99, minRatio) && r.BrokerWrites > 0 {
			return r, true
		}
	}
	return Row{}, false
}
