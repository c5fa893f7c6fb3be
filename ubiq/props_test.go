package ubiq

import (
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// refAppend is appendAll as it was, a scan per key (set): the reference
// for what appendAll returns and leaves.
func refAppend(p *props, keys, values []string) (ck, cv []string) {
	changed := map[string]bool{}
	var order []string
	for i, k := range keys {
		if i >= len(values) {
			break
		}
		if p.set(k, values[i]) && !changed[k] {
			changed[k] = true
			order = append(order, k)
		}
	}
	for _, k := range order {
		v, _ := p.get(k)
		ck = append(ck, k)
		cv = append(cv, v)
	}
	return ck, cv
}

// refDiff is diff as it was.
func refDiff(p, old props) (ck, cv []string) {
	for i, k := range p.Keys {
		if v, ok := old.get(k); !ok || v != p.Values[i] {
			ck = append(ck, k)
			cv = append(cv, p.Values[i])
		}
	}
	for _, k := range old.Keys {
		if _, ok := p.get(k); !ok {
			ck = append(ck, k)
			cv = append(cv, "")
		}
	}
	return ck, cv
}

// splitProps reads "k=v;k=v" (a missing "=" is an empty value).
func splitProps(s string) (keys, values []string) {
	if s == "" {
		return nil, nil
	}
	for _, kv := range strings.Split(s, ";") {
		k, v, _ := strings.Cut(kv, "=")
		keys, values = append(keys, k), append(values, v)
	}
	return keys, values
}

func checkAppend(t *testing.T, start, batch string) {
	t.Helper()
	sk, sv := splitProps(start)
	bk, bv := splitProps(batch)
	got := props{Keys: append([]string(nil), sk...), Values: append([]string(nil), sv...)}
	want := got.clone()
	gk, gv := got.appendAll(bk, bv)
	wk, wv := refAppend(&want, bk, bv)
	if !reflect.DeepEqual(gk, wk) || !reflect.DeepEqual(gv, wv) || !reflect.DeepEqual(nonNil(got.Keys), nonNil(want.Keys)) || !reflect.DeepEqual(nonNil(got.Values), nonNil(want.Values)) {
		t.Fatalf("%q + %q: changed %q=%q, props %q=%q; want %q=%q, %q=%q", start, batch, gk, gv, got.Keys, got.Values, wk, wv, want.Keys, want.Values)
	}
	old := props{Keys: sk, Values: sv}
	dk, dv := got.diff(old)
	rk, rv := refDiff(got, old)
	if !reflect.DeepEqual(dk, rk) || !reflect.DeepEqual(dv, rv) {
		t.Fatalf("diff of %q + %q: %q=%q, want %q=%q", start, batch, dk, dv, rk, rv)
	}
}

// appendAll and diff index the keys instead of scanning them per key, and
// do what the scans did.
func TestPropsAppendLikeScan(t *testing.T) {
	for _, tc := range [][2]string{
		{"", ""},
		{"", "a=1"},
		{"a=1", "a=1"},
		{"a=1", "a="},
		{"a=1;b=2;c=3", "b=;a=9;d=4;b=5"},
		{"a=1;b=2", "a=;a=;a=3;a="},
		{"a=1;b=2", "x=;y=1;y=;y=2"},
		{"a=1;a=2;b=3", "a="},    // duplicates: the second comes forward
		{"a=1;a=2;b=3", "a=;a="}, // both go
		{"a=1;a=2", "a=5"},
		{"a=1;b=2;c=3", "c=;b=;a="},
		{"a=1", "b=2;c"}, // a key without "=" deletes
	} {
		checkAppend(t, tc[0], tc[1])
	}
}

func FuzzPropsAppend(f *testing.F) {
	f.Add("a=1;b=2;c=3", "b=;a=9;d=4;b=5")
	f.Add("a=1;a=2;b=3", "a=;a=;a=7")
	f.Fuzz(func(t *testing.T, start, batch string) {
		if len(start) > 512 || len(batch) > 512 {
			return
		}
		checkAppend(t, start, batch)
	})
}

// One message with 200,000 new keys, then one that deletes them all: a
// scan per key took minutes (hours at the largest frame), holding the
// peer's requests, and its room's goroutine on every node, meanwhile.
func TestPropsAppendManyKeys(t *testing.T) {
	const n = 200000
	keys, values, empty := make([]string, n), make([]string, n), make([]string, n)
	for i := range keys {
		keys[i], values[i] = "k"+strconv.Itoa(i), "v"
	}
	var p props
	if ck, _ := p.appendAll(keys, values); len(ck) != n || len(p.Keys) != n {
		t.Fatalf("%d keys changed, %d held; want %d", len(ck), len(p.Keys), n)
	}
	old := p.clone()
	if ck, cv := p.appendAll(keys, empty); len(ck) != n || len(p.Keys) != 0 || cv[0] != "" {
		t.Fatalf("deleting: %d keys changed, %d held", len(ck), len(p.Keys))
	}
	if ck, _ := p.diff(old); len(ck) != n {
		t.Fatalf("diff: %d keys, want %d", len(ck), n)
	}
}

// A peer's properties are bounded by the largest frame, as its PeerAdded
// message takes them: an append past it is refused, and the peer keeps
// what it had, so its next small append goes through. (Kept without
// bound, the appends would grow the connection's memory, and once the
// member record no longer fit in the store, no change of the peer would
// reach the room.)
func TestPeerPropertiesBounded(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) { c.MaxFrame = 4096 })
	p, q := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	id := newUUID()
	p.join(JoinArgs{UUID: id})
	q.join(JoinArgs{UUID: id})
	p.expect("PeerAdded")
	appendProp := func(k string, n int) {
		p.request("AppendPeerProperties", PropertiesArgs{Keys: []string{k}, Values: []string{strings.Repeat("x", n)}})
	}
	appendProp("big", 1500)
	appendProp("big2", 1500)
	appendProp("big3", 2500) // past 4096 bytes in all: refused
	appendProp("z", 1)
	// p's requests are handled in order: what q is told until z holds
	// every change made before it.
	want := map[string]string{"big": strings.Repeat("x", 1500), "big2": strings.Repeat("x", 1500), "z": "x"}
	if got := q.toldUntil("PeerPropertiesAppended", p.uuid, "z"); !maps.Equal(got, want) {
		t.Fatalf("q was told %s, want %s", sizes(got), sizes(want))
	}
	// A Join whose properties, with those the peer has, are too large is
	// rejected.
	r := dialPeer(t, ts.tcp)
	r.request("AppendPeerProperties", PropertiesArgs{Keys: []string{"a"}, Values: []string{strings.Repeat("y", 3000)}})
	r.request("Join", JoinArgs{UUID: id, Peer: r.info([]string{"b"}, []string{strings.Repeat("y", 2000)})})
	var rej RejectedArgs
	r.expect("Rejected").decode(t, &rej)
	if !strings.Contains(rej.Reason, "peer properties") {
		t.Fatalf("Rejected %q", rej.Reason)
	}
}

// A peer that sends the server many bad messages does not flood the logs:
// its connection logs a burst of lines, then few, and a later line says
// how many went unlogged. (A line at INFO for each message would come to
// up to the inbound budget's 2,000 a second per connection.)
func TestBadRequestsLogBounded(t *testing.T) {
	logs := &logBuffer{}
	ts := startServer(t, nil, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	p := dialPeer(t, ts.tcp)
	const bad = 200
	for range bad {
		if err := p.c.Send(ServerID, []byte("not json")); err != nil {
			t.Fatal(err)
		}
	}
	p.barrier() // every message before the Ping was handled
	n := strings.Count(logs.String(), "Ubiq server message is not JSON")
	if n < 1 || n >= bad/2 {
		t.Fatalf("%d lines logged for %d bad messages, want at least 1 and far fewer than %d:\n%s", n, bad, bad, logs.String())
	}
}

// TestRoomLogsBounded: the lines a room logs about what its members set
// (CoalesceKey entries that are not NetworkIds, an InterestKey that is not
// valid) are bounded per room, as a peer's requests are: a member that
// changed such a property with every request made every node log a line
// for each.
func TestRoomLogsBounded(t *testing.T) {
	logs := &logBuffer{}
	ts := startServer(t, nil, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	p, q := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	id := newUUID()
	p.join(JoinArgs{UUID: id})
	q.join(JoinArgs{UUID: id})
	p.expect("PeerAdded")
	const bad = 5 * peerLogBurst // a burst of lines, then far fewer than one per change
	for i := range bad {
		p.request("AppendPeerProperties", PropertiesArgs{Keys: []string{CoalesceKey}, Values: []string{fmt.Sprint("bad", i)}})
		p.request("AppendRoomProperties", PropertiesArgs{Keys: []string{InterestKey}, Values: []string{fmt.Sprint("bad", i)}})
	}
	p.request("AppendPeerProperties", PropertiesArgs{Keys: []string{"done"}, Values: []string{"1"}})
	// Once q is told of "done", the room has handled every change before
	// it: p's requests are handled in order.
	q.toldUntil("PeerPropertiesAppended", p.uuid, "done")
	for _, line := range []string{"entries that are not NetworkIds ignored", "Ubiq room interest ignored"} {
		if n := strings.Count(logs.String(), line); n < 1 || n >= bad/2 {
			t.Errorf("%d lines %q logged for %d bad properties, want at least 1 and far fewer", n, line, bad)
		}
	}
}
