package benchbus

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Machine describes where the benchmark ran.
type Machine struct {
	CPU       string  `json:"cpu"`
	Cores     int     `json:"cores"`
	MemoryGiB float64 `json:"memory_gib"`
	Kernel    string  `json:"kernel"`
	Go        string  `json:"go"`
	Mosquitto string  `json:"mosquitto"`
	ArenaPy   string  `json:"arena_py"`
	Commit    string  `json:"commit"`
	Load1     float64 `json:"load1_at_start"`
}

func describeMachine(cfg Config) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Load1: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		fmt.Sscanf(string(b), "MemTotal: %f kB", &kb)
		m.MemoryGiB = math.Round(kb/(1<<20)*10) / 10
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if cfg.Mosquitto != "" {
		m.Mosquitto = versionOf(cfg.Mosquitto, "-h")
	}
	if cfg.Python != "" {
		m.ArenaPy = versionOf(cfg.Python, "-c", "import importlib.metadata as m; print('arena-py', m.version('arena-py'))")
	}
	m.Commit = commitOf(cfg.XrealmCmd, cfg.XrealmEnv)
	return m
}

// commitOf is the commit the measured xrealm binary was built from, as it
// says (xrealm version --short); for a binary without a VCS stamp, the
// working directory's commit, marked as such (it need not be the one the
// binary was built from).
func commitOf(xrealm, env []string) string {
	if len(xrealm) > 0 {
		args := append(append([]string(nil), xrealm[1:]...), "version", "--short")
		cmd := exec.Command(xrealm[0], args...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.Output(); err == nil {
			if c := strings.TrimSpace(string(out)); c != "" && c != "unknown" && !strings.ContainsAny(c, " \n") {
				return c
			}
		}
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		return strings.TrimSpace(string(out)) + " (the working directory's; the binary has no VCS stamp)"
	}
	return ""
}

// Write writes RESULTS.md, results.json and the plots into dir.
func Write(dir string, r *Results) error {
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), j, 0o644); err != nil {
		return err
	}
	plots, err := writePlots(dir, r)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "RESULTS.md"), []byte(Markdown(r, plots)), 0o644)
}

// ReadResults reads a results.json written by Write.
func ReadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

func rowsOf(r *Results, experiment string, scenes int) []Row {
	var out []Row
	for _, row := range r.Rows {
		if row.Experiment == experiment && (scenes == 0 || row.Scenes == scenes) {
			out = append(out, row)
		}
	}
	return out
}

func systemsOf(rows []Row) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.System] {
			seen[r.System] = true
			out = append(out, r.System)
		}
	}
	return out
}

// capacity returns the most users a system held with every step up to it
// within p99 ≤ maxP99 and the ratio ≥ minRatio; capped is true when even
// the largest step measured held (the capacity is at least that).
func capacity(rows []Row, system string, maxP99 time.Duration, minRatio float64) (users int, capped bool) {
	var rs []Row
	for _, r := range rows {
		if r.System == system {
			rs = append(rs, r)
		}
	}
	// A load is held if any of its measurements (a miss is measured
	// twice on a shared machine) met the limits.
	held := map[int]bool{}
	var ns []int
	for _, r := range rs {
		if _, seen := held[r.Users]; !seen {
			ns = append(ns, r.Users)
		}
		held[r.Users] = held[r.Users] || r.OK(maxP99, minRatio)
	}
	sort.Ints(ns)
	for i, n := range ns {
		if !held[n] {
			return users, false
		}
		users = n
		if i == len(ns)-1 {
			capped = true
		}
	}
	return users, capped
}

func fmtCap(n int, capped bool) string {
	if n == 0 {
		return "0 (none held)"
	}
	if capped {
		return fmt.Sprintf("≥ %d", n)
	}
	return fmt.Sprint(n)
}

// bestAt summarises a system's measurements at users: the mean
// deliveries per broker CPU-second and the lowest p99 of its repeats (a
// load is held if any measurement held it), from the efficiency
// experiment, else from the ramp.
func bestAt(eff, ramp []Row, system string, users int) (Row, bool) {
	var rs []Row
	for _, set := range [][]Row{eff, ramp} {
		for _, r := range set {
			if r.System == system && r.Users == users && r.Error == "" {
				rs = append(rs, r)
			}
		}
		if len(rs) > 0 {
			break
		}
	}
	if len(rs) == 0 {
		return Row{}, false
	}
	best := rs[0]
	var sum float64
	for _, r := range rs {
		sum += r.PerCPUSec
		if r.P99ms < best.P99ms {
			best = r
		}
	}
	best.PerCPUSec = sum / float64(len(rs))
	return best, true
}

// points returns one point per user count of a system's rows: for a load
// measured twice, the lower value when lower is better (latency, as a
// load counts as held if either measurement held it), else the mean.
func points(rows []Row, keep func(Row) bool, f func(Row) float64, lowerBetter bool) series {
	var s series
	idx := map[int]int{}
	n := map[int]int{}
	for _, r := range rows {
		if r.Error != "" || !keep(r) {
			continue
		}
		v := f(r)
		i, ok := idx[r.Users]
		if !ok {
			idx[r.Users] = len(s.X)
			s.X = append(s.X, float64(r.Users))
			s.Y = append(s.Y, v)
			n[r.Users] = 1
			continue
		}
		if lowerBetter {
			s.Y[i] = math.Min(s.Y[i], v)
		} else {
			s.Y[i] = (s.Y[i]*float64(n[r.Users]) + v) / float64(n[r.Users]+1)
		}
		n[r.Users]++
	}
	return s
}

// fileSafe turns a system name into a file name part:
// "xrealm --write-linger=2ms" becomes "xrealm-write-linger-2ms".
func fileSafe(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	return b.String()
}

func writePlots(dir string, r *Results) ([]string, error) {
	var files []string
	ramp := rowsOf(r, "ramp", 1)
	if len(ramp) > 0 {
		mk := func(file, title, ylabel string, logY bool, hline float64, hl string, f func(Row) float64, lowerBetter bool) error {
			c := chart{Title: title, XLabel: "users in one scene (10 Hz poses each)", YLabel: ylabel, LogY: logY, HLine: hline, HLineLabel: hl}
			for _, sys := range systemsOf(ramp) {
				s := points(ramp, func(row Row) bool { return row.System == sys }, f, lowerBetter)
				s.Name = sys
				c.Series = append(c.Series, s)
			}
			files = append(files, file)
			return c.write(filepath.Join(dir, file))
		}
		if err := mk("ramp-latency.svg", "One-way latency p99 vs users", "p99 latency, ms (log)", true, 100, "100 ms limit", func(r Row) float64 { return r.P99ms }, true); err != nil {
			return nil, err
		}
		if err := mk("ramp-latency-p50.svg", "One-way latency p50 vs users", "p50 latency, ms (log)", true, 0, "", func(r Row) float64 { return r.P50ms }, true); err != nil {
			return nil, err
		}
		if err := mk("ramp-deliveries.svg", "Deliveries per second vs users", "deliveries/s", false, 0, "", func(r Row) float64 { return r.PerSec }, false); err != nil {
			return nil, err
		}
		if err := mk("ramp-cpu.svg", "Broker CPU vs users", "broker CPU, cores", false, 0, "", func(r Row) float64 { return r.BrokerCPU }, false); err != nil {
			return nil, err
		}
		if err := mk("ramp-efficiency.svg", "Deliveries per broker CPU-second vs users", "deliveries / broker CPU-s", false, 0, "", func(r Row) float64 { return r.PerCPUSec }, false); err != nil {
			return nil, err
		}
	}
	iso := rowsOf(r, "isolation", 0)
	for _, sys := range systemsOf(iso) {
		c := chart{Title: "Scene isolation, " + sys + ": p99 latency vs users", XLabel: "users (spread evenly over the scenes)", YLabel: "p99 latency, ms (log)", LogY: true, HLine: 100, HLineLabel: "100 ms limit"}
		var scenes []int
		seen := map[int]bool{}
		for _, row := range iso {
			if row.System == sys && !seen[row.Scenes] {
				seen[row.Scenes] = true
				scenes = append(scenes, row.Scenes)
			}
		}
		sort.Ints(scenes)
		for _, sc := range scenes {
			s := points(iso, func(row Row) bool { return row.System == sys && row.Scenes == sc }, func(r Row) float64 { return r.P99ms }, true)
			s.Name = fmt.Sprintf("%d scene(s)", sc)
			c.Series = append(c.Series, s)
		}
		file := "isolation-latency-" + fileSafe(sys) + ".svg"
		files = append(files, file)
		if err := c.write(filepath.Join(dir, file)); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// Markdown renders the results.
func Markdown(r *Results, plots []string) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	maxP99, _ := time.ParseDuration(r.Config.MaxP99)
	minRatio := r.Config.MinRatio
	p("# Scene-bus benchmark: xrealm and Mosquitto, side by side\n\n")
	p("Generated by `xrealm bench bus` on %s (%s); rerunning the command below regenerates this file, `results.json` and the plots. Findings and profiles are in [NOTES.md](NOTES.md).\n\n",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Round(time.Second))
	p("## Command\n\n```\n%s\n```\n\n", r.Command)
	m := r.Machine
	p("## Machine\n\n")
	p("| | |\n|---|---|\n| CPU | %s, %d cores |\n| memory | %.1f GiB |\n| kernel | %s |\n| Go | %s |\n| Mosquitto | %s |\n| arena-py | %s |\n| xrealm commit | %s |\n| load average (1 min) at start | %.2f |\n\n",
		m.CPU, m.Cores, m.MemoryGiB, m.Kernel, m.Go, orNone(m.Mosquitto), orNone(m.ArenaPy), orNone(m.Commit), m.Load1)
	var other, steal, n float64
	for _, row := range r.Rows {
		if row.Error == "" {
			other += row.OtherCPU
			steal += row.StealCPU
			n++
		}
	}
	if n > 0 {
		p("The machine is shared with other work: during the steps the rest of the machine used %.2f cores on average (column *other CPU, cores*), and the hypervisor took %.2f cores on average from this virtual machine (column *steal, cores*). The generator runs on the same %d cores as the broker. Compare the systems by the ratios of numbers measured side by side at each step (they alternate step by step) and by deliveries per broker CPU-second, which stays comparable when the machine is saturated.\n\n", other/n, steal/n, m.Cores)
	}
	p("Workload: every user publishes an ARENA camera pose of %d bytes at %g Hz on `realm/s/{ns}/{scene}/u/{client}/{camera}` and subscribes to `realm/s/{ns}/{scene}/+/+/+` as a browser does, so it receives every pose of its scene, its own included. Behaviour `%s`%s. Each step: %s warm-up, %s measured (poses *due* in the window), %s drain. Latency is one-way, sender to receiver on the same host clock, in HDR histograms, from the time a pose was due: a sender that is late counts its lateness, and a pose it was too late for and skipped counts as due and not delivered. A ramp stops for a system at the first step with p99 > %s or delivery ratio < %.0f%%; because the machine is shared, a step that misses is measured once more (marked *again*), a step that misses p99 ≤ 50 ms or the ramp's limit while the hypervisor took %.1f cores or more (column *steal*: the VM's stolen CPU) is measured again after the steal has calmed (at most twice), and the load counts as held if any measurement met the limits. The isolation ramps of the different scene counts are interleaved step by step, alternating which goes first.\n\n",
		r.Config.Size, r.Config.Rate, r.Config.Behaviour, traceNote(r.Config.Trace), r.Config.Warmup, r.Config.Step, r.Config.Drain, r.Config.MaxP99, 100*minRatio, stealHigh)

	targets(&b, r, maxP99, minRatio)

	ramp := rowsOf(r, "ramp", 1)
	if len(ramp) > 0 {
		p("## Broker load: N users in one scene\n\n")
		for _, sys := range systemsOf(ramp) {
			c, capped := capacity(ramp, sys, maxP99, minRatio)
			c50, capped50 := capacity(ramp, sys, targetP99, minRatio)
			p("- **%s**: capacity %s users at p99 ≤ %s, %s users at p99 ≤ 50 ms.\n", sys, fmtCap(c, capped), r.Config.MaxP99, fmtCap(c50, capped50))
		}
		p("\n")
		rowTable(&b, ramp, false)
		for _, f := range plots {
			if strings.HasPrefix(f, "ramp-") {
				p("![%s](%s)\n", f, f)
			}
		}
		p("\n")
	}
	if eff := rowsOf(r, "efficiency", 1); len(eff) > 0 {
		p("## Efficiency: every system at %d users in one scene\n\n", eff[0].Users)
		p("Measured whether or not a system's ramp got this far, alternating the order between repeats.\n\n")
		rowTable(&b, eff, false)
	}
	iso := rowsOf(r, "isolation", 0)
	if len(iso) > 0 {
		p("## Scene isolation: users spread over several scenes\n\n")
		scenes := sortedDistinct(iso, rowScenes)
		syss := systemsOf(iso)
		p("Capacity (users held with every step up to them within the p99 limit and a ratio ≥ %.0f%%):\n\n| scenes |", 100*minRatio)
		limits := []time.Duration{targetP99, maxP99}
		for _, s := range syss {
			for _, lim := range limits {
				p(" %s, p99 ≤ %s |", s, lim)
			}
		}
		p("\n|---|")
		for range syss {
			for range limits {
				p("---|")
			}
		}
		p("\n")
		for _, sc := range scenes {
			p("| %d |", sc)
			for _, s := range syss {
				for _, lim := range limits {
					c, capped := capacity(rowsOf(r, "isolation", sc), s, lim, minRatio)
					p(" %s |", fmtCap(c, capped))
				}
			}
			p("\n")
		}
		p("\n")
		rowTable(&b, iso, true)
		for _, f := range plots {
			if strings.HasPrefix(f, "isolation-") {
				p("![%s](%s)\n", f, f)
			}
		}
		p("\n")
	}
	costsMarkdown(&b, r, maxP99, minRatio)
	sec := rowsOf(r, "security", 0)
	if len(sec) > 0 {
		p("## Security overhead: xrealm with tokens and ACLs vs `--insecure`\n\n")
		p("Same steps, alternating which runs first. *join* is the time from dialling to the SUBACK of the scene subscription (token request, CONNECT with token verification, SUBSCRIBE with its ACL check); *broker µs/delivery* is the publish-and-fan-out cost.\n\n")
		p("| users | system | deliveries/s | ratio | p50 ms | p99 ms | broker CPU, cores | broker µs/delivery | deliveries/broker CPU-s | join mean ms | join p99 ms | other CPU, cores |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, row := range sec {
			p("| %d | %s | %.0f | %.4f | %.2f | %.2f | %.2f | %.2f | %.0f | %.2f | %.2f | %.2f |%s\n", row.Users, row.System, row.PerSec, row.Ratio, row.P50ms, row.P99ms, row.BrokerCPU, row.BrokerUs, row.PerCPUSec, row.JoinMeanMs, row.JoinP99ms, row.OtherCPU, errCell(row))
		}
		p("\n")
		us := sortedDistinct(sec, func(r Row) int { return r.Users })
		p("Each repetition starts both servers afresh and measures them back to back. *Raw cost* is the mean over the repetitions of 1 − secure/insecure deliveries per broker CPU-second. *Normalised cost* divides each window's broker CPU by the generator's CPU in the same window before comparing: the generator does the same work for both servers, and on this shared VM the CPU one delivery costs drifts between windows by ±15 %% for the broker and the generator alike, so the ratio keeps the broker's own difference and cancels the machine's. Intervals are the means' 95%% confidence intervals (Student's t over the repetitions). *Throughput cost* compares deliveries/s.\n\n")
		p("| users | repetitions | secure deliveries/CPU-s | insecure deliveries/CPU-s | raw cost | 95%% interval | normalised cost | 95%% interval | secure deliveries/s | insecure deliveries/s | throughput cost |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, u := range us {
			s, i := meanOf(sec, "xrealm", u), meanOf(sec, "xrealm-insecure", u)
			c, cn := enforcementCost(sec, u)
			p("| %d | %d | %.0f | %.0f | %+.1f%% | %s | %+.1f%% | %s | %.0f | %.0f | %+.2f%% |\n", u, c.N, s.PerCPUSec, i.PerCPUSec,
				100*c.Mean, c.interval(), 100*cn.Mean, cn.interval(), s.PerSec, i.PerSec, 100*(1-s.PerSec/i.PerSec))
		}
		p("\n")
	}
	if len(r.Interaction) > 0 {
		p("## Interaction latency: click to update\n\n")
		p("A clicking client publishes a `clientEvent` (mousedown) on an object; an agent subscribed to the scene answers each click by updating the object (a new colour, persisted); the clicker times from its click to receiving the update. One click at a time, 100 ms apart. The background users publish and receive poses in the same scene, from their own process (`xrealm bots`), and the clicker receives them too, as a browser would. xrealm writes a click or an edit at once to the clients that are interacting (here the clicker and the agent) and within 2 ms, with their waiting poses, to the busy ones that only watch ([docs/protocol.md](../../docs/protocol.md#write-timing)).\n\n")
		p("The last three columns split the path, medians on the same host clock: *echo* is the clicker's own click coming back to it from the broker (out and back through the broker), *to agent* the click reaching the agent, *from agent* the agent's answer reaching the clicker (Go agent only).\n\n")
		p("| system | agent | background users | clicks answered | p50 ms | p90 ms | p99 ms | max ms | echo p50 ms | to agent p50 ms | from agent p50 ms | error |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, it := range r.Interaction {
			p("| %s | %s | %d | %d/%d | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %s |\n", it.System, it.Agent, it.Background, it.Answered, it.Clicks, it.P50ms, it.P90ms, it.P99ms, it.MaxMs,
				optMs(it.EchoP50ms), optMs(it.ToAgentP50ms), optMs(it.FromAgentP50ms), it.Error)
		}
		p("\n")
	}
	gen := rowsOf(r, "generator", 0)
	if len(gen) > 0 {
		p("## The generator\n\n")
		p("The bots' own MQTT client against a generator built on the Eclipse Paho Go client (default options), same broker, same load. *generator µs/delivery* is the generator process's CPU per message received.\n\n")
		p("| generator | system | users | deliveries/s | ratio | p50 ms | p99 ms | generator CPU, cores | generator µs/delivery | broker µs/delivery |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, row := range gen {
			p("| %s | %s | %d | %.0f | %.4f | %.2f | %.2f | %.2f | %.2f | %.2f |%s\n", row.Generator, row.System, row.Users, row.PerSec, row.Ratio, row.P50ms, row.P99ms, row.GenCPU, row.GenUsPer, row.BrokerUs, errCell(row))
		}
		p("\n")
	}
	if len(r.Notes) > 0 {
		p("## Run notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	return b.String()
}

// sortedDistinct lists the distinct values of f over rows, in increasing
// order.
func sortedDistinct(rows []Row, f func(Row) int) []int {
	out := make([]int, 0, len(rows))
	for _, r := range rows {
		out = append(out, f(r))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// rowScenes is a row's scene count, for sortedDistinct.
func rowScenes(r Row) int { return r.Scenes }

func orNone(s string) string {
	if s == "" {
		return "(not used)"
	}
	return s
}

func errCell(r Row) string {
	if r.Error == "" {
		return ""
	}
	return " error: " + strings.ReplaceAll(r.Error, "|", "/")
}

// cost is a paired estimate: the mean of per-repetition costs and its 95%
// confidence interval.
type cost struct {
	Mean, Lo, Hi float64
	N            int
}

// enforcementCost pairs the secure and the insecure security row of each
// repetition at users (one repetition measures both, back to back: the
// security experiment appends its rows a pair at a time, in either order)
// and returns two paired estimates of what enforcement costs the broker
// per delivery:
//
//   - raw: the mean of 1 − secure/insecure deliveries per broker CPU-second;
//   - normalised: the same with each window's broker CPU divided by the
//     generator's CPU in that window. The generator does the same work for
//     both servers, so the ratio cancels what the shared machine does to
//     both processes at once (on this VM the CPU that one delivery costs
//     drifts by ±15 % between windows, for the broker and the generator
//     alike).
//
// A repetition with a failed step is left out whole.
func enforcementCost(rows []Row, users int) (raw, normalised cost) {
	var run []Row
	for _, r := range rows {
		if r.Users == users && (r.System == "xrealm" || r.System == "xrealm-insecure") {
			run = append(run, r)
		}
	}
	var sec, ins []Row
	for k := 0; k+1 < len(run); k += 2 {
		a, b := run[k], run[k+1]
		if a.System == b.System {
			continue
		}
		if a.System != "xrealm" {
			a, b = b, a
		}
		if a.PerCPUSec <= 0 || a.Error != "" || b.PerCPUSec <= 0 || b.Error != "" {
			continue
		}
		sec, ins = append(sec, a), append(ins, b)
	}
	n := len(sec)
	if n == 0 {
		return cost{}, cost{}
	}
	var d, dn []float64
	for k := 0; k < n; k++ {
		d = append(d, 1-sec[k].PerCPUSec/ins[k].PerCPUSec)
		if sec[k].GenCPU > 0 && ins[k].GenCPU > 0 && ins[k].BrokerCPU > 0 {
			// Broker CPU per delivery over generator CPU per delivery.
			dn = append(dn, (sec[k].BrokerCPU/sec[k].GenCPU)/(ins[k].BrokerCPU/ins[k].GenCPU)-1)
		}
	}
	raw = meanInterval(d)
	if len(dn) > 0 {
		normalised = meanInterval(dn)
	}
	return raw, normalised
}

// interval formats c's 95% interval as percentages, or "–" when it has
// fewer than two values (no interval: Lo and Hi are the mean).
func (c cost) interval() string {
	if c.N < 2 {
		return "–"
	}
	return fmt.Sprintf("%+.1f%% to %+.1f%%", 100*c.Lo, 100*c.Hi)
}

// meanInterval returns the mean of xs and its two-sided 95% confidence
// interval from Student's t distribution (the mean alone for one value).
func meanInterval(xs []float64) cost {
	n := len(xs)
	c := cost{N: n}
	for _, x := range xs {
		c.Mean += x
	}
	c.Mean /= float64(n)
	c.Lo, c.Hi = c.Mean, c.Mean
	if n < 2 {
		return c
	}
	var ss float64
	for _, x := range xs {
		ss += (x - c.Mean) * (x - c.Mean)
	}
	half := studentT95(n-1) * math.Sqrt(ss/float64(n-1)/float64(n))
	c.Lo, c.Hi = c.Mean-half, c.Mean+half
	return c
}

// studentT95 is the two-sided 95% quantile of Student's t distribution
// with df degrees of freedom.
func studentT95(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086}
	switch {
	case df < 1:
		return math.Inf(1)
	case df <= len(table):
		return table[df-1]
	case df <= 30:
		return 2.05
	default:
		return 1.96
	}
}

func meanOf(rows []Row, system string, users int) Row {
	var m Row
	n := 0.0
	for _, r := range rows {
		if r.System == system && r.Users == users && r.Error == "" {
			m.PerCPUSec += r.PerCPUSec
			m.PerSec += r.PerSec
			n++
		}
	}
	if n > 0 {
		m.PerCPUSec /= n
		m.PerSec /= n
	}
	return m
}

func rowTable(b *strings.Builder, rows []Row, withScenes bool) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	if withScenes {
		p("| scenes ")
	}
	p("| users | system | deliveries/s | ratio | p50 ms | p90 ms | p99 ms | max ms | MB/s | broker CPU, cores | broker RSS MB | deliveries/broker CPU-s | broker writes/s | generator CPU, cores | other CPU, cores | steal, cores | load1 |\n")
	if withScenes {
		p("|---")
		// Interleaved ramps are easier to read one scene count at a time.
		rows = slices.Clone(rows)
		sort.SliceStable(rows, func(i, j int) bool { return rows[i].Scenes < rows[j].Scenes })
	}
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if withScenes {
			p("| %d ", r.Scenes)
		}
		sys := r.System
		if r.Retry {
			sys += " (again)"
		}
		writes := "–"
		if r.BrokerWrites > 0 {
			writes = strconv.FormatFloat(r.BrokerWrites, 'f', 0, 64)
		}
		p("| %d | %s | %.0f | %.4f | %.2f | %.2f | %.2f | %.1f | %.2f | %.2f | %.0f | %.0f | %s | %.2f | %.2f | %.2f | %.2f |%s\n",
			r.Users, sys, r.PerSec, r.Ratio, r.P50ms, r.P90ms, r.P99ms, r.MaxMs, r.BytesPerS/1e6, r.BrokerCPU, r.BrokerRSS, r.PerCPUSec, writes, r.GenCPU, r.OtherCPU, r.StealCPU, r.Load1, errCell(r))
	}
	p("\n")
}

// targets writes the targets against what was measured.
func targets(b *strings.Builder, r *Results, maxP99 time.Duration, minRatio float64) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	type line struct{ target, need, got, verdict string }
	var lines []line
	verdict := func(ok, known bool) string {
		switch {
		case !known:
			return "not measured"
		case ok:
			return "**met**"
		}
		return "**missed**"
	}
	ramp := rowsOf(r, "ramp", 1)
	mosq100, mosqCapped := capacity(ramp, "mosquitto", maxP99, minRatio)
	x50, xCapped := capacity(ramp, "xrealm", targetP99, minRatio)
	haveRamp := len(ramp) > 0 && mosq100 > 0 && x50 > 0
	lines = append(lines, line{"Capacity, one scene", "xrealm users at p99 ≤ 50 ms ≥ 1.5 × Mosquitto's users (p99 ≤ " + r.Config.MaxP99 + ")",
		unlessMissing(haveRamp, fmt.Sprintf("xrealm %s vs Mosquitto %s: %.2f×", fmtCap(x50, xCapped), fmtCap(mosq100, mosqCapped), float64(x50)/math.Max(1, float64(mosq100)))),
		verdict(capacityRatio(x50, xCapped, mosq100, mosqCapped, 1.5, haveRamp))})
	eff := rowsOf(r, "efficiency", 1)
	effUsers := 120
	if len(eff) > 0 {
		effUsers = eff[0].Users
	}
	xr, okx := bestAt(eff, ramp, "xrealm", effUsers)
	mr, okm := bestAt(eff, ramp, "mosquitto", effUsers)
	// A broker CPU of 0 (a window shorter than the kernel's CPU ticks
	// could see) has no deliveries per CPU-second: the ratio against it
	// read 8000× and the target as met.
	effKnown := okx && okm && xr.PerCPUSec > 0 && mr.PerCPUSec > 0
	lines = append(lines, line{fmt.Sprintf("Efficiency at %d users", effUsers), "xrealm deliveries per broker CPU-s ≥ 1.5 × Mosquitto's",
		unlessMissing(effKnown, fmt.Sprintf("xrealm %.0f vs Mosquitto %.0f: %.2f×", xr.PerCPUSec, mr.PerCPUSec, xr.PerCPUSec/math.Max(1, mr.PerCPUSec))),
		verdict(xr.PerCPUSec >= 1.5*mr.PerCPUSec, effKnown)})
	lines = append(lines, line{fmt.Sprintf("Latency at %d users", effUsers), "xrealm p99 ≤ 20 ms",
		unlessMissing(okx, fmt.Sprintf("p99 %.1f ms (p50 %.2f ms; Mosquitto %s)", xr.P99ms, xr.P50ms, unlessMissing(okm, fmt.Sprintf("p99 %.1f ms, p50 %.2f ms", mr.P99ms, mr.P50ms)))), verdict(xr.P99ms <= 20, okx)})
	// Capacity as the capacity target defines it for xrealm (p99 ≤ 50 ms),
	// with 5 scenes and with 1; the ramp's own limit is shown beside it.
	iso1, c1 := capacity(rowsOf(r, "isolation", 1), "xrealm", targetP99, minRatio)
	iso5, c5 := capacity(rowsOf(r, "isolation", 5), "xrealm", targetP99, minRatio)
	wide1, w1 := capacity(rowsOf(r, "isolation", 1), "xrealm", maxP99, minRatio)
	wide5, w5 := capacity(rowsOf(r, "isolation", 5), "xrealm", maxP99, minRatio)
	isoKnown := len(systemRows(rowsOf(r, "isolation", 1), "xrealm")) > 0 && len(systemRows(rowsOf(r, "isolation", 5), "xrealm")) > 0
	lines = append(lines, line{"Isolation", "xrealm capacity (p99 ≤ 50 ms, as for the capacity target) with 5 scenes ≥ 2 × with 1 scene",
		unlessMissing(isoKnown, fmt.Sprintf("%s vs %s users: %.2f× (at p99 ≤ %s: %s vs %s, %.2f×)", fmtCap(iso5, c5), fmtCap(iso1, c1), float64(iso5)/math.Max(1, float64(iso1)),
			r.Config.MaxP99, fmtCap(wide5, w5), fmtCap(wide1, w1), float64(wide5)/math.Max(1, float64(wide1)))),
		verdict(capacityRatio(iso5, c5, iso1, c1, 2, iso1 > 0 && iso5 > 0))})
	sec := rowsOf(r, "security", 0)
	if len(sec) > 0 {
		var worst, worstRaw cost
		worstU := 0
		for _, row := range sec {
			if c, cn := enforcementCost(sec, row.Users); cn.N > 0 && (worstU == 0 || cn.Mean > worst.Mean) {
				worst, worstRaw, worstU = cn, c, row.Users
			}
		}
		lines = append(lines, line{"ACL", "enforcement costs ≤ 5% throughput (broker CPU per delivery, normalised by the generator's)",
			fmt.Sprintf("worst %+.1f%% at %d users (95%% interval %s, %d fresh pairs; raw deliveries per broker CPU-s %+.1f%%, interval %s)",
				100*worst.Mean, worstU, worst.interval(), worst.N, 100*worstRaw.Mean, worstRaw.interval()),
			verdict(worst.Mean <= 0.05, worstU > 0)})
	} else {
		lines = append(lines, line{"ACL", "enforcement costs ≤ 5% throughput", "–", verdict(false, false)})
	}
	var click *Interaction
	for i, it := range r.Interaction {
		if it.System == "xrealm" && it.Background == 100 && strings.HasPrefix(it.Agent, "go") && it.Answered > 0 {
			click = &r.Interaction[i]
		}
	}
	if click != nil {
		lines = append(lines, line{"Interaction", "median click-to-update ≤ 2 ms with 100 background users", fmt.Sprintf("%.2f ms (Go agent; p99 %.2f ms)", click.P50ms, click.P99ms), verdict(click.P50ms <= 2, true)})
	} else {
		lines = append(lines, line{"Interaction", "median click-to-update ≤ 2 ms with 100 background users", "–", verdict(false, false)})
	}
	gen := rowsOf(r, "generator", 0)
	var bu, pu float64
	for _, row := range gen {
		if row.Generator == "bots" {
			bu = row.GenUsPer
		} else if row.Generator == "paho" {
			pu = row.GenUsPer
		}
	}
	lines = append(lines, line{"Lean generator", "generator CPU per delivery ≤ ½ of a paho-based client's",
		unlessMissing(bu > 0 && pu > 0, fmt.Sprintf("%.2f µs vs paho %.2f µs: %.2f×", bu, pu, bu/math.Max(1e-9, pu))), verdict(bu <= pu/2, bu > 0 && pu > 0)})
	// Capacity, tail latency and small differences need the CPU: when other
	// work took a large share of the machine, their verdicts say so.
	var other, n float64
	for _, row := range r.Rows {
		if row.Error == "" {
			other += row.OtherCPU
			n++
		}
	}
	saturated := n > 0 && other/n > 0.5
	p("## Targets (issue 3)\n\n| target | required | measured | verdict |\n|---|---|---|---|\n")
	for _, l := range lines {
		v := l.verdict
		if saturated && v == "**missed**" && l.target != "Lean generator" && !strings.HasPrefix(l.target, "Efficiency") {
			v += fmt.Sprintf(" (inconclusive: other work used %.1f of %d cores)", other/n, r.Machine.Cores)
		}
		p("| %s | %s | %s | %s |\n", l.target, l.need, l.got, v)
	}
	p("\n")
}

// capacityRatio judges num ≥ factor × den for two capacities, each of
// which may be a lower bound (capped: its ramp ended while it still held).
// A ratio met is known unless den is a lower bound (more would lower it);
// a ratio missed is known unless num is one (more would raise it). measured
// false: the comparison was not made.
func capacityRatio(num int, numCapped bool, den int, denCapped bool, factor float64, measured bool) (met, known bool) {
	met = float64(num) >= factor*float64(den)
	if met {
		return true, measured && !denCapped
	}
	return false, measured && !numCapped
}

// systemRows returns the rows of system.
func systemRows(rows []Row, system string) []Row {
	var out []Row
	for _, r := range rows {
		if r.System == system {
			out = append(out, r)
		}
	}
	return out
}

// unlessMissing is measured, or "–" where what it compares was not
// measured (its zeros would read as measurements).
func unlessMissing(known bool, measured string) string {
	if !known {
		return "–"
	}
	return measured
}

// optMs formats a latency that may not have been measured.
func optMs(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// traceNote names the replayed pose trace, if any, after the behaviour.
func traceNote(trace string) string {
	if trace == "" {
		return ""
	}
	return " of the pose trace `" + trace + "`"
}
