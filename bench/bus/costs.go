package benchbus

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Costs splits a system's CPU into what each kind of work costs, fitted by
// least squares over the steps it held:
//
//	CPU = Idle + Delivery × deliveries/s + Write × broker write calls/s + Publish × messages published/s
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

// CostSplit is one fit: µs of CPU per unit of work, and cores for Idle,
// what the processes use whatever the load (timers, the garbage collector,
// the runtime's housekeeping).
type CostSplit struct {
	Idle                     float64
	Delivery, Write, Publish float64
	// Misfit is the largest difference, in cores, between a step's fitted
	// and measured CPU.
	Misfit float64
}

// At is the CPU, in cores, that s predicts for each kind of work in a load.
func (s CostSplit) At(deliveries, writes, publishes float64) (d, w, p float64) {
	return s.Delivery * deliveries / 1e6, s.Write * writes / 1e6, s.Publish * publishes / 1e6
}

// minCostSteps is the fewest held steps a fit needs.
const minCostSteps = 8

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
	var x [][]float64
	var broker, machine []float64
	for _, r := range rows {
		if r.System != system || !r.OK(maxP99, minRatio) || r.BrokerWrites <= 0 || r.BrokerCPU <= 0 {
			continue
		}
		x = append(x, []float64{1, r.PerSec, r.BrokerWrites, publishedPerS(r)})
		broker = append(broker, r.BrokerCPU)
		machine = append(machine, r.BrokerCPU+r.GenCPU)
	}
	c.Steps = len(x)
	if len(x) < minCostSteps {
		return c, fmt.Errorf("%d held steps with counted writes, %d needed", len(x), minCostSteps)
	}
	var err error
	if c.Broker, err = fitSplit(x, broker); err != nil {
		return c, err
	}
	c.Machine, err = fitSplit(x, machine)
	return c, err
}

// fitSplit fits y (cores) to the columns idle, deliveries, writes,
// publishes of x.
func fitSplit(x [][]float64, y []float64) (CostSplit, error) {
	k, err := leastSquares(x, y)
	if err != nil {
		return CostSplit{}, err
	}
	s := CostSplit{Idle: k[0], Delivery: k[1] * 1e6, Write: k[2] * 1e6, Publish: k[3] * 1e6}
	for i, row := range x {
		fit := 0.0
		for j := range row {
			fit += k[j] * row[j]
		}
		s.Misfit = max(s.Misfit, math.Abs(fit-y[i]))
	}
	return s, nil
}

// leastSquares returns the k that minimises |x·k − y|. The columns are
// scaled to unit length first, so that the test for collinearity does not
// depend on their units: the scaled columns' Gram matrix has ones on its
// diagonal, and its determinant is near 0 when a column is nearly a
// combination of the others.
func leastSquares(x [][]float64, y []float64) ([]float64, error) {
	n := len(x[0])
	norm := make([]float64, n)
	for _, row := range x {
		for j, v := range row {
			norm[j] += v * v
		}
	}
	for j := range norm {
		norm[j] = math.Sqrt(norm[j])
		if norm[j] == 0 {
			return nil, errCollinear
		}
	}
	// The normal equations, augmented with the right-hand side.
	a := make([][]float64, n)
	for j := range a {
		a[j] = make([]float64, n+1)
	}
	for i, row := range x {
		for j := range n {
			for k := range n {
				a[j][k] += row[j] / norm[j] * row[k] / norm[k]
			}
			a[j][n] += row[j] / norm[j] * y[i]
		}
	}
	// Gauss-Jordan elimination with partial pivoting; the product of the
	// pivots is the determinant (up to sign).
	det := 1.0
	for col := range n {
		p := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		a[col], a[p] = a[p], a[col]
		det *= a[col][col]
		if math.Abs(det) < 1e-6 {
			return nil, errCollinear
		}
		for r := range n {
			if r == col {
				continue
			}
			f := a[r][col] / a[col][col]
			for k := col; k <= n; k++ {
				a[r][k] -= f * a[col][k]
			}
		}
	}
	k := make([]float64, n)
	for j := range n {
		k[j] = a[j][n] / a[j][j] / norm[j]
	}
	return k, nil
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
	p("Fitted by least squares over each system's held steps (ramp, efficiency and isolation): CPU = *idle* + *a* × deliveries/s + *b* × broker write calls/s + *c* × messages published/s, for the broker alone and for the broker and the generator together (the machine's two processes). Write calls are counted by the kernel (`/proc/{pid}/io`). Deliveries grow with the square of a scene's users, writes and publishes with the users: spreading the same users over more scenes cuts the first kind of work only, so the more of the CPU goes to per-user work, the less capacity grows with scenes. *Misfit* is the largest difference between a step's fitted and measured CPU, in cores.\n\n")
	p("| system | steps | broker idle cores | µs/delivery | µs/write | µs/publish | misfit | broker + generator idle cores | µs/delivery | µs/write | µs/publish | misfit |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	fits := map[string]Costs{}
	for _, sys := range syss {
		c, err := fitCosts(rows, sys, maxP99, minRatio)
		if err != nil {
			p("| %s | %d | %s |||||||||\n", sys, c.Steps, err)
			continue
		}
		fits[sys] = c
		p("| %s | %d | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f |\n", sys, c.Steps,
			c.Broker.Idle, c.Broker.Delivery, c.Broker.Write, c.Broker.Publish, c.Broker.Misfit,
			c.Machine.Idle, c.Machine.Delivery, c.Machine.Write, c.Machine.Publish, c.Machine.Misfit)
	}
	p("\n")
	iso := rowsOf(r, "isolation", 0)
	var lines []string
	for _, sys := range syss {
		c, ok := fits[sys]
		if !ok {
			continue
		}
		for _, sc := range sortedDistinct(iso, rowScenes) {
			users, _ := capacity(rowsOf(r, "isolation", sc), sys, targetP99, minRatio)
			row, ok := heldRow(rowsOf(r, "isolation", sc), sys, users, targetP99, minRatio)
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
				row.PerSec, row.BrokerWrites, pub, 100*d/sum, 100*w/sum, 100*pb/sum, c.Machine.Idle+sum, row.BrokerCPU+row.GenCPU))
		}
	}
	if len(lines) > 0 {
		p("At each isolation capacity (p99 ≤ 50 ms), the step's load, how the broker's and generator's fitted CPU for it divides among the kinds of work (idle left out), and the fitted CPU with idle against the measured:\n\n")
		p("| system | scenes | users | deliveries/s | broker writes/s | published/s | deliveries | writes | publishes | fitted cores | measured cores |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, l := range lines {
			p("%s", l)
		}
		p("\n")
	}
}

// targetP99 is the p99 limit at which issue 3's capacity and isolation
// targets count users.
const targetP99 = 50 * time.Millisecond

// heldRow returns a measurement of system at users that met the limits.
func heldRow(rows []Row, system string, users int, maxP99 time.Duration, minRatio float64) (Row, bool) {
	for _, r := range rows {
		if r.System == system && r.Users == users && r.OK(maxP99, minRatio) && r.BrokerWrites > 0 {
			return r, true
		}
	}
	return Row{}, false
}
