package benchcc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
)

// ReadResults reads a results.jsonl file.
func ReadResults(path string) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("benchcc: open results: %w", err)
	}
	defer f.Close()
	var rs []Result
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("benchcc: parse %s: %w", path, err)
		}
		rs = append(rs, r)
	}
	return rs, sc.Err()
}

type key struct{ trace, algo string }

// Label names r's algorithm in the tables: hera run with other parameters
// is "hera [--bucket 4ms]", a row of its own.
func (r Result) Label() string {
	if r.HeraArgs != "" {
		return r.Algo + " [" + r.HeraArgs + "]"
	}
	return r.Algo
}

type agg struct {
	n                           int
	mbps, util, mean, p95, jain float64
	jainRun                     float64 // Jain over each run's whole window
	invalid                     int
}

// Summarise writes Markdown tables: per trace and algorithm, the mean over
// seeds of throughput, utilisation and queueing delay; and the target check
// of hera against bbr. Invalid runs (emulator could not keep up) are
// counted but left out of the means. Runs with an app-level stream are left
// to QoETable.
func Summarise(w io.Writer, rs []Result) {
	single := map[key]*agg{}
	multi := map[key]*agg{}
	var traces, algos []string
	for _, r := range rs {
		if r.QoE != nil {
			continue // QoETable
		}
		m := single
		if r.Flows > 1 {
			m = multi
		}
		k := key{r.Trace, r.Label()}
		a := m[k]
		if a == nil {
			a = &agg{}
			m[k] = a
		}
		if !slices.Contains(traces, r.Trace) {
			traces = append(traces, r.Trace)
		}
		if !slices.Contains(algos, r.Label()) {
			algos = append(algos, r.Label())
		}
		if !r.Valid {
			a.invalid++
			continue
		}
		a.n++
		a.mbps += r.ThroughputMbps
		a.util += r.Utilisation
		a.mean += r.MeanQDelayMs
		a.p95 += r.P95QDelayMs
		a.jain += r.JainMean
		a.jainRun += Jain(r.GoodputMbps)
	}
	sort.Strings(traces)
	for _, m := range []map[key]*agg{single, multi} {
		for _, a := range m {
			if a.n > 0 {
				f := float64(a.n)
				a.mbps, a.util, a.mean, a.p95, a.jain = a.mbps/f, a.util/f, a.mean/f, a.p95/f, a.jain/f
				a.jainRun /= f
			}
		}
	}
	if len(single) > 0 {
		fmt.Fprintln(w, "| trace | algorithm | runs | throughput (Mbit/s) | utilisation | mean queueing delay (ms) | p95 queueing delay (ms) |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
		for _, t := range traces {
			for _, al := range algos {
				a := single[key{t, al}]
				if a == nil {
					continue
				}
				inv := ""
				if a.invalid > 0 {
					inv = fmt.Sprintf(" (+%d invalid)", a.invalid)
				}
				if a.n == 0 {
					fmt.Fprintf(w, "| %s | %s | 0%s | – | – | – | – |\n", t, al, inv)
					continue
				}
				fmt.Fprintf(w, "| %s | %s | %d%s | %.1f | %.2f | %.1f | %.1f |\n", t, al, a.n, inv, a.mbps, a.util, a.mean, a.p95)
			}
		}
		fmt.Fprintln(w)
		for _, h := range algos {
			if !strings.HasPrefix(h, "hera") {
				continue
			}
			pass, total := 0, 0
			var lines []string
			for _, t := range traces {
				hh, bb := single[key{t, h}], single[key{t, "bbr"}]
				if hh == nil || bb == nil || hh.n == 0 || bb.n == 0 {
					continue
				}
				// A ratio to a zero is no number: a bbr that delivered
				// nothing leaves nothing to compare with (the trace is not
				// counted), and one that queued nothing is met by a hera
				// that queued nothing either. It printed +Inf or NaN.
				if bb.mbps <= 0 {
					lines = append(lines, fmt.Sprintf("| %s | – | – | bbr delivered nothing: no comparison |", t))
					continue
				}
				total++
				tr := hh.mbps / bb.mbps
				ok := hh.p95 <= 0.5*bb.p95 && tr >= 0.9
				if ok {
					pass++
				}
				dr := "–"
				if bb.p95 > 0 {
					dr = fmt.Sprintf("%.2f", hh.p95/bb.p95)
				}
				lines = append(lines, fmt.Sprintf("| %s | %s | %.2f | %v |", t, dr, tr, ok))
			}
			if total == 0 && len(lines) == 0 {
				continue
			}
			fmt.Fprintf(w, "Target check for %s against bbr (p95 delay ratio ≤ 0.5 and throughput ratio ≥ 0.9): %d of %d traces.\n\n", h, pass, total)
			fmt.Fprintln(w, "| trace | p95 delay ratio | throughput ratio | meets target |")
			fmt.Fprintln(w, "|---|---|---|---|")
			fmt.Fprintln(w, strings.Join(lines, "\n"))
			fmt.Fprintln(w)
		}
	}
	if len(multi) > 0 {
		fmt.Fprintln(w, "| trace | algorithm | runs | flows | total throughput (Mbit/s) | mean Jain index (1 s windows) | Jain index (whole run) | p95 queueing delay (ms) |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
		flows := map[key]int{}
		for _, r := range rs {
			if r.Flows > 1 {
				flows[key{r.Trace, r.Label()}] = r.Flows
			}
		}
		for _, t := range traces {
			for _, al := range algos {
				a := multi[key{t, al}]
				if a == nil {
					continue
				}
				inv := ""
				if a.invalid > 0 {
					inv = fmt.Sprintf(" (+%d invalid)", a.invalid)
				}
				if a.n == 0 {
					fmt.Fprintf(w, "| %s | %s | 0%s | %d | – | – | – | – |\n", t, al, inv, flows[key{t, al}])
					continue
				}
				fmt.Fprintf(w, "| %s | %s | %d%s | %d | %.1f | %.3f | %.3f | %.1f |\n", t, al, a.n, inv, flows[key{t, al}], a.mbps, a.jain, a.jainRun, a.p95)
			}
		}
	}
}

// QoETable writes the app-level stream of every run that had one.
func QoETable(w io.Writer, rs []Result) {
	n := 0
	for _, r := range rs {
		if r.QoE != nil {
			n++
		}
	}
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "| trace | algorithm | bulk flows | stream (Mbit/s, fps) | delivered (Mbit/s) | frames delivered | latency mean / p50 / p95 / p99 (ms) | frames > 100 ms or lost | link throughput, both flows (Mbit/s) | kept up |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		q := r.QoE
		if q == nil {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.0f, %d | %.1f | %d / %d | %.0f / %.0f / %.0f / %.0f | %.1f%% | %.1f | %v |\n",
			r.Trace, r.Label(), r.Flows, q.TargetMbps, q.FPS, q.RateMbps, q.FramesDelivered, q.FramesScheduled,
			q.LatMeanMs, q.LatP50Ms, q.LatP95Ms, q.LatP99Ms, q.Over100msPct, r.ThroughputMbps, r.Valid)
	}
}

// RunsTable writes every run, valid or not, with the emulator's lateness,
// so that runs the strict keep-up check rejected can still be inspected.
func RunsTable(w io.Writer, rs []Result) {
	fmt.Fprintln(w, "| trace | algorithm | flows | throughput (Mbit/s) | utilisation | mean qdelay (ms) | p95 qdelay (ms) | late ACK-path pkts | late data-path pkts | kept up | load |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		load := "–"
		if r.Load1 > 0 {
			load = fmt.Sprintf("%.1f", r.Load1)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.1f | %.2f | %.1f | %.1f | %d | %d | %v | %s |\n",
			r.Trace, r.Label(), r.Flows, r.ThroughputMbps, r.Utilisation, r.MeanQDelayMs, r.P95QDelayMs, r.UpLate, r.DownLate, r.Valid, load)
	}
}
