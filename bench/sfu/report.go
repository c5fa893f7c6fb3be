package benchsfu

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// latest keeps the last result of each (setup, scenario, users).
func latest(rs []Result) map[[3]string]Result {
	m := map[[3]string]Result{}
	for _, r := range rs {
		m[[3]string{r.Setup, fmt.Sprint(r.Scenario), fmt.Sprint(r.Users)}] = r
	}
	return m
}

func axes(rs []Result, scenario int) (setups []string, users []int) {
	seenS, seenU := map[string]bool{}, map[int]bool{}
	for _, r := range rs {
		if r.Scenario != scenario {
			continue
		}
		if !seenS[r.Setup] {
			seenS[r.Setup] = true
		}
		if !seenU[r.Users] {
			seenU[r.Users] = true
			users = append(users, r.Users)
		}
	}
	for _, s := range []string{"central", "2sfu", "4sfu"} {
		if seenS[s] {
			setups = append(setups, s)
		}
	}
	sort.Ints(users)
	return setups, users
}

// Tables writes the paper-style tables in Markdown.
func Tables(w io.Writer, rs []Result) {
	m := latest(rs)
	for _, sc := range []int{1, 2} {
		setups, users := axes(rs, sc)
		if len(setups) == 0 {
			continue
		}
		metric, name := func(r Result) float64 { return r.PublishersPct }, "% of publishers received"
		if sc == 2 {
			metric, name = func(r Result) float64 { return r.PointsPct }, "% of points received"
		}
		fmt.Fprintf(w, "\n### Scenario %d: %s\n\n", sc, name)
		fmt.Fprintf(w, "| users | %s |\n|---|%s\n", strings.Join(setups, " | "), strings.Repeat("---|", len(setups)))
		for _, u := range users {
			fmt.Fprintf(w, "| %d |", u)
			for _, s := range setups {
				r, ok := m[[3]string{s, fmt.Sprint(sc), fmt.Sprint(u)}]
				switch {
				case !ok:
					fmt.Fprint(w, " – |")
				case len(r.Errors) > 0:
					fmt.Fprint(w, " failed |")
				default:
					fmt.Fprintf(w, " %.1f (frames %.0f %%) |", metric(r), r.FramesPct)
				}
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "\n#### Scenario %d: transport latency p50 / p90 / p99 (ms), loss after recovery\n\n", sc)
		table(w, m, sc, setups, users, func(r Result) string {
			switch {
			case len(r.Errors) > 0:
				return "–"
			case r.NoLatency:
				return "nothing received"
			}
			return fmt.Sprintf("%.0f / %.0f / %.0f, %.2f %%", r.P50ms, r.P90ms, r.P99ms, r.LossPct)
		})
		fmt.Fprintf(w, "\n#### Scenario %d: p99 (ms) by the receivers' site\n\n", sc)
		table(w, m, sc, setups, users, func(r Result) string {
			if len(r.P99BySite) == 0 {
				return "–"
			}
			var parts []string
			for _, site := range Sites {
				if v, ok := r.P99BySite[site]; ok {
					parts = append(parts, fmt.Sprintf("%s %.0f", site, v))
				}
			}
			return strings.Join(parts, ", ")
		})
		fmt.Fprintf(w, "\n#### Scenario %d: CPU (%% of one core) and peak RSS (MiB) per SFU; machine load\n\n", sc)
		fmt.Fprintf(w, "| users | %s | load1 / machine busy |\n|---|%s---|\n", strings.Join(setups, " | "), strings.Repeat("---|", len(setups)))
		for _, u := range users {
			fmt.Fprintf(w, "| %d |", u)
			var load []string
			for _, s := range setups {
				r, ok := m[[3]string{s, fmt.Sprint(sc), fmt.Sprint(u)}]
				if !ok || len(r.SFUs) == 0 {
					fmt.Fprint(w, " – |")
					continue
				}
				var parts []string
				for _, x := range r.SFUs {
					parts = append(parts, fmt.Sprintf("%s %.0f%%/%.0f", x.Site, x.CPU, x.RSSMiB))
				}
				fmt.Fprintf(w, " %s |", strings.Join(parts, ", "))
				load = append(load, fmt.Sprintf("%.1f/%.0f%%", r.Load1, r.MachineBusy))
			}
			fmt.Fprintf(w, " %s |\n", strings.Join(load, ", "))
		}
		fmt.Fprintf(w, "\n#### Scenario %d: where the latency builds up: machine busy / steal (max of 1 s), bots' CPU and scheduling lag p99, SFUs' packet age p99 at arrival from local publishers / over relays, SFUs' lag p99 (ms)\n\n", sc)
		table(w, m, sc, setups, users, hopCell)
		fmt.Fprintf(w, "\n#### Scenario %d: busiest shaped link direction over the window (Mbit/s sent, %% of packets dropped by its queue)\n\n", sc)
		table(w, m, sc, setups, users, func(r Result) string {
			if len(r.Links) == 0 {
				return "–"
			}
			b := busiest(r.Links)
			return fmt.Sprintf("%s→%s %.2f, %.1f %%", b.From, b.To, b.Mbps, b.DropPct)
		})
	}
}

// hopCell summarises where a run's latency built up (runs before the
// probes show "–").
func hopCell(r Result) string {
	if len(r.BotLag) == 0 && len(r.Hops) == 0 {
		return "–"
	}
	var botCPU, botLag, inLocal, inRelay, sfuLag float64
	for _, v := range r.BotsCPU {
		botCPU += v
	}
	for _, q := range r.BotLag {
		botLag = max(botLag, q.P99)
	}
	for _, h := range r.Hops {
		inLocal, inRelay, sfuLag = max(inLocal, h.InLocalP99), max(inRelay, h.InRelayP99), max(sfuLag, h.LagP99)
	}
	relay := "–"
	if inRelay > 0 {
		relay = fmt.Sprintf("%.0f", inRelay)
	}
	return fmt.Sprintf("%.0f%%/%.0f%% (%.0f%%/%.0f%%); bots %.0f%%, lag %.0f; in %.0f / %s; lag %.0f",
		r.MachineBusy, r.Steal, r.MaxBusy1s, r.MaxSteal1s, botCPU, botLag, inLocal, relay, sfuLag)
}

// table writes one Markdown table of users × setups; cell formats a run,
// and missing runs show as "–".
func table(w io.Writer, m map[[3]string]Result, sc int, setups []string, users []int, cell func(Result) string) {
	fmt.Fprintf(w, "| users | %s |\n|---|%s\n", strings.Join(setups, " | "), strings.Repeat("---|", len(setups)))
	for _, u := range users {
		fmt.Fprintf(w, "| %d |", u)
		for _, s := range setups {
			r, ok := m[[3]string{s, fmt.Sprint(sc), fmt.Sprint(u)}]
			if !ok {
				fmt.Fprint(w, " – |")
				continue
			}
			fmt.Fprintf(w, " %s |", cell(r))
		}
		fmt.Fprintln(w)
	}
}

// busiest is the link direction that dropped the largest share of its
// packets, or else sent the most.
func busiest(ls []LinkStat) LinkStat {
	b := ls[0]
	for _, l := range ls[1:] {
		if l.DropPct > b.DropPct || (l.DropPct == b.DropPct && l.Mbps > b.Mbps) {
			b = l
		}
	}
	return b
}

// Plots writes SVG line charts into dir.
func Plots(dir string, rs []Result) error {
	plots := []struct {
		file, title, ylabel string
		scenario            int
		y                   func(Result) float64
		latency             bool // a run with NoLatency has no point
	}{
		{"scenario1-publishers.svg", "Scenario 1: publishers received", "% of publishers", 1, func(r Result) float64 { return r.PublishersPct }, false},
		{"scenario2-points.svg", "Scenario 2: points received", "% of points", 2, func(r Result) float64 { return r.PointsPct }, false},
		{"scenario1-p99.svg", "Scenario 1: p99 transport latency", "ms", 1, func(r Result) float64 { return r.P99ms }, true},
		{"scenario2-p99.svg", "Scenario 2: p99 transport latency", "ms", 2, func(r Result) float64 { return r.P99ms }, true},
	}
	m := latest(rs)
	for _, p := range plots {
		setups, users := axes(rs, p.scenario)
		if len(setups) == 0 {
			continue
		}
		series := map[string][][2]float64{}
		for _, s := range setups {
			for _, u := range users {
				if r, ok := m[[3]string{s, fmt.Sprint(p.scenario), fmt.Sprint(u)}]; ok && len(r.Errors) == 0 && !(p.latency && r.NoLatency) {
					series[s] = append(series[s], [2]float64{float64(u), p.y(r)})
				}
			}
		}
		if err := replaceFile(filepath.Join(dir, p.file), []byte(svgLines(p.title, "users", p.ylabel, setups, series))); err != nil {
			return fmt.Errorf("plot %s: %w", p.file, err)
		}
	}
	return nil
}

// replaceFile writes data to path through a temporary file in the same
// directory renamed over it, so that path holds the old contents or the
// new ones, never part of them (an interrupted or failed write leaves the
// old plot).
func replaceFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644) // as os.WriteFile made it (CreateTemp: 0600)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

var colours = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd"}

// svgLines draws one line per series.
func svgLines(title, xlabel, ylabel string, names []string, series map[string][][2]float64) string {
	const W, H, L, R, T, B = 560.0, 340.0, 60.0, 110.0, 30.0, 45.0
	xmax, ymax := 1.0, 1.0
	for _, pts := range series {
		for _, p := range pts {
			xmax, ymax = math.Max(xmax, p[0]), math.Max(ymax, p[1])
		}
	}
	ymax = niceCeil(ymax * 1.05)
	if strings.HasPrefix(ylabel, "%") {
		ymax = 100
	}
	x := func(v float64) float64 { return L + v/xmax*(W-L-R) }
	y := func(v float64) float64 { return H - B - v/ymax*(H-T-B) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`, W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="18" font-size="14">%s</text>`, L, html.EscapeString(title))
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`, L, H-B, W-R, H-B)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`, L, T, L, H-B)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">%g</text>`, L, y(v), W-R, y(v), L-5, y(v)+4, math.Round(v*10)/10)
	}
	// Every series' x values are labelled, once: setups may have run
	// different user counts.
	var xs []float64
	for _, pts := range series {
		for _, p := range pts {
			xs = append(xs, p[0])
		}
	}
	sort.Float64s(xs)
	for i, v := range xs {
		if i == 0 || v != xs[i-1] {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%g</text>`, x(v), H-B+16, v)
		}
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`, (L+W-R)/2, H-8, html.EscapeString(xlabel))
	fmt.Fprintf(&b, `<text transform="translate(14,%.0f) rotate(-90)" text-anchor="middle">%s</text>`, (T+H-B)/2, html.EscapeString(ylabel))
	for i, name := range names {
		c := colours[i%len(colours)]
		var pts []string
		for _, p := range series[name] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1])))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, x(p[0]), y(p[1]), c)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), c)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`, W-R+10, T+16+float64(i)*16, c, html.EscapeString(name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
