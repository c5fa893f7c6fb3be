package sfu

import (
	"maps"
	"math"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu/allocator"
)

// Subscribers that reach the node from one remote IP address share the
// path to it (a site, an office, a household behind one NAT). Their
// estimators each see one flow, and their sum overshoots a shared
// bottleneck, so the node budgets each such group as a whole
// (allocator.SharedLink) and splits the group's budget among its members
// by their demand; a member's allocator then spends min(own estimate,
// its share).
//
// A subscriber on the node's own host (the remote address is loopback or
// one of the host's addresses: browser tabs on a developer's machine, the
// bench's clients at an SFU's site) is in no group: no network path lies
// between them, only the host's CPU, whose scheduling delays the signals
// would take for a queue (bench/sfu/NOTES.md, 2026-11-24). Each such
// subscriber is budgeted by its own estimator alone.

// linkGroup is the state of one remote address's subscribers.
type linkGroup struct {
	ctl  *allocator.SharedLink
	seen time.Time
	// mu guards load, the bit rate the members forward of each publisher
	// (by client id): summed from the members every interval and kept
	// current by each member's reconcile (a leaf lock: under p.mu)
	mu   sync.Mutex
	load map[string]float64
	// queueing delays not yet used: a quiet group gathers
	// minTailSamples over several intervals
	carry delayHist
}

// peerLink is a peer's counters at the previous interval and its RTT floor.
type peerLink struct {
	at               time.Time
	bytes, pkts, rtx uint64
	floor            time.Duration // least RTT seen, forgotten slowly
	floorAt          time.Time     // when the floor was last moved up
	remote           string
	onHost           bool    // the client is on the node's host: in no group
	share            float64 // bit/s; 0 = not limited
	qdelay           time.Duration
	loss             float64            // packets lost ÷ sent over the last interval, by TWCC feedback (qprobe.go)
	ownCarry         delayHist          // queueing delays not yet used, while in no group
	tail             time.Duration      // the group's p95 per-packet queueing delay (qprobe.go); < 0 unknown
	group            *linkGroup         // nil: in no group
	fwd              map[string]float64 // bit/s forwarded per publisher by the last allocation
	demand           float64            // bit/s the allocator would forward unconstrained
	othersSent       float64            // bit/s the node sent the group's other members last interval
}

// rttFreshDefault is how old an RTT sample may be to count at the default
// report interval (Config.rttFresh).
const rttFreshDefault = 3 * time.Second

// shareLinks updates the groups' budgets and the peers' shares; called
// from the node loop every AllocateEvery, before the peers reallocate.
func (n *Node) shareLinks(now time.Time, peers []*peer) {
	type member struct {
		p      *peer
		sent   float64 // bit/s
		pkts   uint64
		rtx    uint64
		qdelay time.Duration // < 0 unknown
		hist   delayHist     // per-packet queueing delays (TWCC)
		demand float64
		fwd    map[string]float64
	}
	groups := map[string][]member{}
	for _, p := range peers {
		// a peer in no group (on the node's host, or before ICE has
		// connected) still gets its own loss and tail (ownCarry), which
		// its probes read (peer.reconcile)
		remote := p.remoteIP()
		var bytes, pkts, rtx uint64
		var rtts []time.Duration
		p.mu.Lock()
		for _, s := range p.slots {
			st := s.dt.Stats()
			bytes += st.Bytes
			pkts += st.Packets
			rtx += st.Retransmits
			if rtt, at := s.dt.LastRTT(); !at.IsZero() && now.Sub(at) < n.cfg.rttFresh() {
				rtts = append(rtts, rtt)
			}
		}
		pl := &p.link
		m := member{p: p, qdelay: -1, demand: pl.demand, fwd: maps.Clone(pl.fwd)}
		if q := p.probe.Load(); q != nil {
			m.hist = q.take()
			// no feedback this interval: no loss seen, not the last
			// interval's, which would keep a probe's 95 % and hold
			// the next probe as congested for good
			pl.loss = 0
			if recv, lost := q.takeLoss(); recv+lost > 0 {
				pl.loss = float64(lost) / float64(recv+lost)
			}
		}
		if !pl.at.IsZero() && now.After(pl.at) {
			dt := now.Sub(pl.at).Seconds()
			m.sent = float64(bytes-pl.bytes) * 8 / dt
			m.pkts, m.rtx = pkts-pl.pkts, rtx-pl.rtx
		}
		pl.at, pl.bytes, pl.pkts, pl.rtx, pl.remote = now, bytes, pkts, rtx, remote
		if len(rtts) > 0 {
			sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
			rtt := rtts[len(rtts)/2]
			if pl.floor == 0 || rtt < pl.floor {
				pl.floor = rtt
			} else if now.Sub(pl.floorAt) > 10*time.Second {
				// forget a floor that no longer holds (a route change)
				pl.floor += (rtt - pl.floor) / 8
				pl.floorAt = now
			}
			m.qdelay = rtt - pl.floor
			pl.qdelay = m.qdelay
		}
		if remote == "" {
			pl.ownCarry.merge(&m.hist)
			if pl.ownCarry.count() >= minTailSamples {
				pl.tail = pl.ownCarry.quantile(tailQuantile)
				pl.ownCarry = delayHist{}
			}
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		groups[remote] = append(groups[remote], m)
	}
	// what each member gets; set under p.mu after n.mu is released
	// (reconcile locks p.mu before n.mu)
	type update struct {
		p      *peer
		g      *linkGroup // nil: shared links off
		tail   time.Duration
		bps    float64
		share  bool
		others float64 // what the group's other members were sent, bit/s
	}
	var updates []update
	n.mu.Lock()
	for remote, ms := range groups {
		g := n.groups[remote]
		if g == nil {
			g = &linkGroup{ctl: allocator.NewSharedLink()}
			n.groups[remote] = g
		}
		g.seen = now
		load := map[string]float64{}
		for _, m := range ms {
			for c, r := range m.fwd {
				load[c] += r
			}
		}
		g.mu.Lock()
		g.load = load
		g.mu.Unlock()
		var s allocator.LinkSample
		var pkts, rtx uint64
		var qd []time.Duration
		var hist delayHist
		demands := make([]float64, len(ms))
		for i, m := range ms {
			hist.merge(&m.hist)
			s.Sent += m.sent
			pkts += m.pkts
			rtx += m.rtx
			if m.qdelay >= 0 {
				qd = append(qd, m.qdelay)
			}
			demands[i] = m.demand
		}
		if pkts > 0 {
			s.Loss = float64(rtx) / float64(pkts)
		}
		s.QueueDelay = -1
		if len(qd) > 0 {
			sort.Slice(qd, func(i, j int) bool { return qd[i] < qd[j] })
			s.QueueDelay = qd[len(qd)/2]
		}
		s.TailDelay = -1
		g.carry.merge(&hist)
		if g.carry.count() >= minTailSamples {
			s.TailDelay = g.carry.quantile(tailQuantile)
			g.carry = delayHist{}
		}
		if n.cfg.NoSharedLinks {
			for _, m := range ms {
				updates = append(updates, update{p: m.p, tail: s.TailDelay})
			}
			continue
		}
		for i, bps := range allocator.Split(g.ctl.Update(now, s), demands) {
			updates = append(updates, update{p: ms[i].p, g: g, tail: s.TailDelay, bps: bps, share: true, others: max(s.Sent-ms[i].sent, 0)})
		}
	}
	for remote, g := range n.groups {
		if now.Sub(g.seen) > time.Minute {
			delete(n.groups, remote)
		}
	}
	n.mu.Unlock()
	for _, u := range updates {
		u.p.mu.Lock()
		if u.tail >= 0 {
			u.p.link.tail = u.tail
		}
		if u.share {
			u.p.link.share = u.bps
		}
		u.p.link.othersSent = u.others
		u.p.link.group = u.g
		u.p.mu.Unlock()
	}
}

// pathCosts sets, for a subscriber in a shared-path group, each
// publisher's cost (allocator.Demand.Cost): what the group's other
// members forward of it, relative to the mean over the publishers; p.mu
// must be held.
func (p *peer) pathCosts(demands []allocator.Demand) {
	g := p.link.group
	if g == nil || len(demands) < 2 {
		return
	}
	others := make([]float64, len(demands))
	var sum float64
	g.mu.Lock()
	for i, d := range demands {
		others[i] = max(g.load[d.ID]-p.link.fwd[d.ID], 0)
		sum += others[i]
	}
	g.mu.Unlock()
	if sum <= 0 {
		return
	}
	mean := sum / float64(len(demands))
	for i := range demands {
		demands[i].Cost = others[i] / mean
	}
}

// setForwarded records what the last allocation forwards of each publisher
// and keeps the group's load current, so that the next member's
// allocation in the same round sees it; p.mu must be held.
func (p *peer) setForwarded(fwd map[string]float64) {
	if g := p.link.group; g != nil {
		g.mu.Lock()
		if g.load == nil {
			g.load = map[string]float64{}
		}
		for c, r := range p.link.fwd {
			g.load[c] -= r
		}
		for c, r := range fwd {
			g.load[c] += r
		}
		g.mu.Unlock()
	}
	p.link.fwd = fwd
}

// The group's tail delay is the 95th percentile of its members' per-packet
// queueing delays over an interval, or over as many as it takes to count
// minTailSamples.
const (
	tailQuantile   = 0.95
	minTailSamples = 20
)

// remoteIP is the IP address of the peer's selected ICE candidate pair's
// remote side, "" while none is selected or when the client is on the
// node's host.
func (p *peer) remoteIP() string {
	p.mu.Lock()
	if p.link.remote != "" || p.link.onHost || p.pc == nil {
		r := p.link.remote
		p.mu.Unlock()
		return r
	}
	pc := p.pc
	p.mu.Unlock()
	var ice *webrtc.ICETransport
	for _, s := range pc.GetSenders() {
		if t := s.Transport(); t != nil {
			ice = t.ICETransport()
			break
		}
	}
	if ice == nil {
		if sc := pc.SCTP(); sc != nil && sc.Transport() != nil {
			ice = sc.Transport().ICETransport()
		}
	}
	if ice == nil {
		return ""
	}
	// Only once ICE is connected: pion's GetSelectedCandidatePair reads
	// the transport's gatherer without the lock that ICETransport.Start
	// writes it under (a data race while the transport starts).
	if st := ice.State(); st != webrtc.ICETransportStateConnected && st != webrtc.ICETransportStateCompleted {
		return ""
	}
	cp, err := ice.GetSelectedCandidatePair()
	if err != nil || cp == nil || cp.Remote == nil || cp.Local == nil {
		return ""
	}
	if p.n.onHost(cp.Remote.Address) {
		p.mu.Lock()
		p.link.onHost = true
		p.mu.Unlock()
		return ""
	}
	return cp.Remote.Address
}

// onHost reports whether addr is a loopback address or one of the
// addresses of the node's host (of Config.Net when set).
func (n *Node) onHost(addr string) bool {
	ip := net.ParseIP(addr)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	var addrs []net.Addr
	if n.cfg.Net == nil {
		addrs, _ = net.InterfaceAddrs()
	} else {
		ifs, _ := n.cfg.Net.Interfaces()
		for _, i := range ifs {
			a, _ := i.Addrs()
			addrs = append(addrs, a...)
		}
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
			return true
		}
		if ipa, ok := a.(*net.IPAddr); ok && ipa.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// linkShare is the peer's share of its group's budget, +Inf when not
// limited; p.mu must be held.
func (p *peer) linkShare() float64 {
	if p.link.share <= 0 || math.IsInf(p.link.share, 1) {
		return math.Inf(1)
	}
	return p.link.share
}
