package sfu

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/transport/v4/vnet"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/sfu/allocator"
)

// TestSharedPathGroups: subscribers are grouped by the remote address of
// their ICE pair. Two clients from 10.9.0.2 form one group, one from
// 10.9.0.3 another, and a client on the node's own address (a client on
// the SFU's host) is in none; the node keeps one budget per group, and
// measures each member's round-trip time from its receiver reports.
func TestSharedPathGroups(t *testing.T) {
	// a virtual network (pion vnet): the node at 10.9.0.1, clients at
	// three addresses
	wan, err := vnet.NewRouter(&vnet.RouterConfig{CIDR: "10.9.0.0/24", LoggerFactory: logging.NewDefaultLoggerFactory()})
	if err != nil {
		t.Fatal(err)
	}
	nets := map[string]*vnet.Net{}
	for _, ip := range []string{"10.9.0.1", "10.9.0.2", "10.9.0.3"} {
		vn, err := vnet.NewNet(&vnet.NetConfig{StaticIPs: []string{ip}})
		if err != nil {
			t.Fatal(err)
		}
		if err := wan.AddNet(vn); err != nil {
			t.Fatal(err)
		}
		nets[ip] = vn
	}
	if err := wan.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = wan.Stop() }()

	b, err := bus.Start(bus.Config{DataDir: t.TempDir(), Name: "sfu-test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	c := &cluster{b: b}
	n, err := Start(context.Background(), Config{NC: c.conn(t, "node1"), ID: "1", Site: "a", Manager: true, ICEAddresses: []string{"10.9.0.1"}, Net: nets["10.9.0.1"],
		Registerer: prometheus.NewRegistry(), Heartbeat: 200 * time.Millisecond, AllocateEvery: 100 * time.Millisecond, ReportInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitFor(t, "the node known to the manager", func() bool { return len(n.mgr.Nodes()) == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub, err := Dial(ctx, ClientConfig{NC: c.conn(t, "pub"), Session: "g", Client: "pub", Site: "a", ICEAddresses: []string{"10.9.0.1"}, Net: nets["10.9.0.1"],
		Publish: []PublishTrack{{ID: "pc0", Mime: MimeTypePointCloud}}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	go publishFrames(ctx, pub.Tracks["pc0"], 1, 0, 1000)
	subs := []struct {
		client, ip, group string // group "": none
	}{
		{"x1", "10.9.0.2", "10.9.0.2"},
		{"x2", "10.9.0.2", "10.9.0.2"},
		{"y1", "10.9.0.3", "10.9.0.3"},
		{"h1", "10.9.0.1", ""}, // on the node's host
	}
	rcvs := map[string]*receiver{}
	for _, s := range subs {
		rcvs[s.client] = newReceiver()
		cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, s.client), Session: "g", Client: s.client, Site: "a", ICEAddresses: []string{s.ip}, Net: nets[s.ip],
			VideoSlots: 1, OnTrack: rcvs[s.client].onTrack, ReportInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatalf("%s from %s: %v", s.client, s.ip, err)
		}
		defer cl.Close()
	}
	for _, s := range subs {
		waitFor(t, s.client+" to receive frames", func() bool { return rcvs[s.client].count(1) >= 3 })
		n.mu.Lock()
		p := n.peers["g/"+s.client]
		n.mu.Unlock()
		if p == nil {
			t.Fatalf("no peer g/%s on the node", s.client)
		}
		if got := p.remoteIP(); got != s.group {
			t.Errorf("%s from %s: path group %q, want %q", s.client, s.ip, got, s.group)
		}
		// the client reads its receivers' RTCP, so its receiver reports
		// carry the node's sender reports back: the node measures RTT
		waitFor(t, s.client+"'s round-trip time at the node", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, sl := range p.slots {
				if _, at := sl.dt.LastRTT(); !at.IsZero() {
					return true
				}
			}
			return false
		})
		// and the queue probe reads the client's TWCC feedback: the
		// group's tail queueing delay becomes known
		if s.group != "" {
			waitFor(t, s.client+"'s queueing delays from TWCC feedback", func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.link.tail > 0 // the upper edge of a bin: known
			})
		}
	}
	waitFor(t, "one budget per remote address, none for the node's own", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		_, two := n.groups["10.9.0.2"]
		_, three := n.groups["10.9.0.3"]
		return len(n.groups) == 2 && two && three
	})
}

// TestPathCosts: members of a group forward publishers one after the other
// in a round; each sees what the others already take (not its own share)
// as the publisher's cost, so their upgrades spread.
func TestPathCosts(t *testing.T) {
	g := &linkGroup{}
	peers := []*peer{{}, {}, {}}
	for _, p := range peers {
		p.link.group = g
	}
	demands := func() []allocator.Demand {
		return []allocator.Demand{{ID: "a", Interest: 1}, {ID: "b", Interest: 1}}
	}
	for _, tc := range []struct {
		p            int
		fwd          map[string]float64
		costA, costB float64
	}{
		{0, map[string]float64{"a": 80}, 0, 0},                 // nothing forwarded yet: no cost
		{1, map[string]float64{"b": 80}, 2, 0},                 // a is taken by peer 0
		{2, map[string]float64{"a": 15, "b": 15}, 1, 1},        // both equally
		{0, map[string]float64{"a": 80}, 15.0 / 55, 95.0 / 55}, // its own 80 of a does not count
	} {
		p := peers[tc.p]
		d := demands()
		p.pathCosts(d)
		if d[0].Cost != tc.costA || d[1].Cost != tc.costB {
			t.Errorf("peer %d: costs %v, %v; want %v, %v", tc.p, d[0].Cost, d[1].Cost, tc.costA, tc.costB)
		}
		p.setForwarded(tc.fwd)
	}
	if g.load["a"] != 95 || g.load["b"] != 95 {
		t.Errorf("group load %v, want a 95, b 95", g.load)
	}
}
