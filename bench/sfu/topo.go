// Package benchsfu reproduces the distributed-SFU paper's evaluation on one
// machine: four sites joined through a central node plus direct links
// Site 3–Site 1 and Site 4–Site 2, emulated with network namespaces, veth
// pairs, HTB rate limits and netem delays; SFU nodes and volumetric bots
// (package bots) run as processes inside the namespaces.
package benchsfu

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// Prefix names every namespace the bench creates, so that it never touches
// another user's namespaces.
const Prefix = "xrsfu"

// Link is one emulated link between two namespaces, shaped in both
// directions.
type Link struct {
	A, B  string // site names: "c", "s1".."s4"
	Rate  float64
	Delay time.Duration // one way
}

// Topology is the paper's testbed: sites s1..s4 hang off the central node
// c, with direct links s3–s1 and s4–s2.
type Topology struct {
	Links []Link
	// Queue is the queueing delay each shaped link can hold at its rate
	// before it drops (the netem queue limit is derived from it).
	Queue time.Duration
}

// Sites of the testbed.
var Sites = []string{"s1", "s2", "s3", "s4"}

// NS is the namespace of a site.
func NS(site string) string { return Prefix + "-" + site }

// Addr is the address of a site: its SFU and bots bind to it. The central
// node's is on its loopback and routed from every link.
func Addr(site string) string {
	if site == "c" {
		return "10.77.0.1"
	}
	return "10.77." + site[1:] + ".2"
}

func linkNet(a, b string) (string, string) {
	switch {
	case a == "c":
		return "10.77." + b[1:] + ".1", "10.77." + b[1:] + ".2"
	case b == "c":
		x, y := linkNet(b, a)
		return y, x
	}
	lo, hi := a[1:], b[1:]
	if lo > hi {
		lo, hi = hi, lo
	}
	p := "10.77.1" + lo + hi + "."
	if a[1:] == lo {
		return p + "1", p + "2"
	}
	return p + "2", p + "1"
}

func ifName(from, to string) string { return "xr" + from + "-" + to }

// runCmd runs a command and names it in the error.
func runCmd(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func nsExec(ctx context.Context, ns string, args ...string) error {
	return runCmd(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
}

// Teardown deletes every namespace of the bench (which removes their
// links). It is safe to call when none exists.
func Teardown() error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("ip netns list: %w", err)
	}
	var errs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], Prefix+"-") {
			continue
		}
		if err := runCmd(context.Background(), "ip", "netns", "del", f[0]); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("teardown: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Setup creates the namespaces, links, addresses, routes and shaping
// (HTB: this machine's kernel has no netem, so propagation delay is added
// by the senders, see DelayRoutes).
// Call Teardown when done, also on failure.
func (t Topology) Setup(ctx context.Context) error {
	all := append([]string{"c"}, Sites...)
	for _, s := range all {
		if err := runCmd(ctx, "ip", "netns", "add", NS(s)); err != nil {
			return err
		}
		if err := nsExec(ctx, NS(s), "ip", "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	if err := nsExec(ctx, NS("c"), "ip", "addr", "add", Addr("c")+"/32", "dev", "lo"); err != nil {
		return err
	}
	if err := nsExec(ctx, NS("c"), "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		return err
	}
	for _, l := range t.Links {
		a, b := ifName(l.A, l.B), ifName(l.B, l.A)
		if err := runCmd(ctx, "ip", "link", "add", a, "netns", NS(l.A), "type", "veth", "peer", "name", b, "netns", NS(l.B)); err != nil {
			return err
		}
		ipA, ipB := linkNet(l.A, l.B)
		prefix := "/30"
		if l.A == "c" || l.B == "c" {
			prefix = "/24"
		}
		for _, e := range []struct{ site, dev, ip string }{{l.A, a, ipA}, {l.B, b, ipB}} {
			ns := NS(e.site)
			if err := nsExec(ctx, ns, "ip", "addr", "add", e.ip+prefix, "dev", e.dev); err != nil {
				return err
			}
			if err := nsExec(ctx, ns, "ip", "link", "set", e.dev, "up"); err != nil {
				return err
			}
			if err := t.shape(ctx, ns, e.dev, l); err != nil {
				return err
			}
		}
		// Routes: sites reach everything through c by default, and each
		// other's address over a direct link.
		switch {
		case l.A == "c":
			if err := nsExec(ctx, NS(l.B), "ip", "route", "add", "default", "via", ipA, "src", Addr(l.B)); err != nil {
				return err
			}
		default:
			if err := nsExec(ctx, NS(l.A), "ip", "route", "add", Addr(l.B)+"/32", "via", ipB, "src", Addr(l.A)); err != nil {
				return err
			}
			if err := nsExec(ctx, NS(l.B), "ip", "route", "add", Addr(l.A)+"/32", "via", ipA, "src", Addr(l.B)); err != nil {
				return err
			}
		}
	}
	return nil
}

// shape limits dev's egress to the link's rate (HTB) with a drop-tail
// queue of t.Queue at that rate.
func (t Topology) shape(ctx context.Context, ns, dev string, l Link) error {
	rate := fmt.Sprintf("%dbit", int64(l.Rate))
	limit := int(t.Queue.Seconds()*l.Rate/(8*1200)) + 4
	steps := [][]string{
		{"tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"},
		{"tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate},
		{"tc", "qdisc", "add", "dev", dev, "parent", "1:10", "handle", "10:", "pfifo", "limit", fmt.Sprint(limit)},
	}
	for _, s := range steps {
		if err := nsExec(ctx, ns, s...); err != nil {
			return err
		}
	}
	return nil
}

// PathDelay is the one-way propagation delay from site a to site b along
// the route the kernel takes: the direct link where there is one, else
// through c.
func (t Topology) PathDelay(a, b string) time.Duration {
	if a == b {
		return 0
	}
	link := func(x, y string) (time.Duration, bool) {
		for _, l := range t.Links {
			if (l.A == x && l.B == y) || (l.A == y && l.B == x) {
				return l.Delay, true
			}
		}
		return 0, false
	}
	if d, ok := link(a, b); ok {
		return d
	}
	da, _ := link(a, "c")
	db, _ := link("c", b)
	return da + db
}

// DelayRoutes is the --egress-delays value for processes at site from:
// every other site's address with its path delay.
func (t Topology) DelayRoutes(from string) string {
	var parts []string
	for _, s := range append([]string{"c"}, Sites...) {
		if d := t.PathDelay(from, s); d > 0 {
			parts = append(parts, fmt.Sprintf("%s/32=%s", Addr(s), d))
		}
	}
	return strings.Join(parts, ",")
}

// LinkStat is one shaped link direction over the measurement window: what
// its HTB qdisc sent and what its drop-tail queue dropped.
type LinkStat struct {
	From  string  `json:"from"`
	To    string  `json:"to"`
	Mbps  float64 `json:"mbps"`
	Drops uint64  `json:"drops"`
	// DropPct is drops over packets offered (sent + dropped).
	DropPct float64 `json:"drop_pct"`
	// MaxBacklogMs is the largest queue sampled once a second in the
	// window, as time to drain at the link's rate.
	MaxBacklogMs float64 `json:"max_backlog_ms,omitempty"`
}

type qdiscCount struct{ bytes, pkts, drops, backlog uint64 }

// linkCounters reads the HTB root counters of every shaped link direction,
// keyed by "from>to".
func (t Topology) linkCounters(ctx context.Context) map[string]qdiscCount {
	out := map[string]qdiscCount{}
	for _, l := range t.Links {
		for _, d := range [][2]string{{l.A, l.B}, {l.B, l.A}} {
			b, err := exec.CommandContext(ctx, "ip", "netns", "exec", NS(d[0]), "tc", "-s", "qdisc", "show", "dev", ifName(d[0], d[1])).Output()
			if err != nil {
				continue
			}
			if c, ok := parseQdiscSent(string(b)); ok {
				out[d[0]+">"+d[1]] = c
			}
		}
	}
	return out
}

// parseQdiscSent parses the first "Sent B bytes P pkt (dropped D, ..." of
// tc -s qdisc output (the root qdisc).
func parseQdiscSent(s string) (qdiscCount, bool) {
	i := strings.Index(s, "Sent ")
	if i < 0 {
		return qdiscCount{}, false
	}
	var c qdiscCount
	if _, err := fmt.Sscanf(s[i:], "Sent %d bytes %d pkt (dropped %d,", &c.bytes, &c.pkts, &c.drops); err != nil {
		return qdiscCount{}, false
	}
	if j := strings.Index(s[i:], "backlog "); j >= 0 {
		_, _ = fmt.Sscanf(s[i+j:], "backlog %db", &c.backlog)
	}
	return c, true
}

// linkStats is the difference of two linkCounters over window; maxBacklog
// is the largest backlog sampled per link direction (bytes) and rate the
// links' rate.
func linkStats(before, after map[string]qdiscCount, maxBacklog map[string]uint64, rate float64, window time.Duration) []LinkStat {
	var out []LinkStat
	for k, a := range after {
		b := before[k]
		from, to, _ := strings.Cut(k, ">")
		st := LinkStat{From: from, To: to, Mbps: float64(a.bytes-b.bytes) * 8 / window.Seconds() / 1e6, Drops: a.drops - b.drops}
		if rate > 0 {
			st.MaxBacklogMs = float64(maxBacklog[k]) * 8 / rate * 1e3
		}
		if off := (a.pkts - b.pkts) + st.Drops; off > 0 {
			st.DropPct = 100 * float64(st.Drops) / float64(off)
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].From+out[i].To < out[j].From+out[j].To })
	return out
}
