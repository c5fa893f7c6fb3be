package ubiq

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// toldUntil reads property notifications of type typ until one names the
// key last, and returns what they told: the latest value of each key
// named, "" for a deleted one. For PeerPropertiesAppended it takes those
// of the peer uuid and keeps the others in p.seen, as expect does;
// RoomPropertiesAppended names no peer, and uuid is "".
//
// A room's watch reads each key's latest value from the store, so one that
// lags on a loaded machine tells several back-to-back appends in one
// notification. Tests of what appends leave wait for the notification
// that names their last key, alone or with others, and check the values
// told until then, not one notification per append.
func (p *peer) toldUntil(typ, uuid, last string) map[string]string {
	p.t.Helper()
	told := map[string]string{}
	for {
		m := p.expect(typ)
		var a PeerPropertiesArgs
		m.decode(p.t, &a)
		if a.UUID != uuid {
			p.seen = append(p.seen, m)
			continue
		}
		if len(a.Keys) != len(a.Values) {
			p.t.Fatalf("%s of %d keys and %d values: %s", typ, len(a.Keys), len(a.Values), m.args)
		}
		for i, k := range a.Keys {
			told[k] = a.Values[i]
		}
		if slices.Contains(a.Keys, last) {
			return told
		}
	}
}

// sizes describes properties by the length of each value, in key order,
// for failure messages about properties too large to quote.
func sizes(told map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(told)) {
		fmt.Fprintf(&b, "%s=%d bytes ", k, len(told[k]))
	}
	return strings.TrimSpace(b.String())
}

// TestToldUntil: the wait for the notification that names the last key
// takes the appends told one by one or merged, keeps the latest value of
// each key, and leaves other peers' notifications to the test.
func TestToldUntil(t *testing.T) {
	note := func(uuid string, kv ...string) msg {
		a := PeerPropertiesArgs{UUID: uuid}
		for i := 0; i < len(kv); i += 2 {
			a.Keys, a.Values = append(a.Keys, kv[i]), append(a.Values, kv[i+1])
		}
		args, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		return msg{typ: "PeerPropertiesAppended", args: string(args)}
	}
	want := map[string]string{"a": "2", "b": "", "z": "1"}
	for _, tc := range []struct {
		name string
		in   []msg
		seen int // left in p.seen
	}{
		{"one per append", []msg{note("u", "a", "1"), note("u", "b", "1"), note("u", "a", "2"), note("u", "b", ""), note("u", "z", "1")}, 0},
		{"merged", []msg{note("u", "a", "1", "b", "1"), note("u", "a", "2", "b", "", "z", "1")}, 0},
		{"all in one", []msg{note("u", "a", "2", "b", "", "z", "1")}, 0},
		{"another peer's between", []msg{note("u", "a", "2", "b", ""), note("v", "z", "9"), note("u", "z", "1")}, 1},
		{"after the last key", []msg{note("u", "a", "2", "b", "", "z", "1"), note("u", "a", "3")}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &peer{t: t, uuid: "u", in: make(chan msg, len(tc.in))}
			for _, m := range tc.in {
				p.in <- m
			}
			if got := p.toldUntil("PeerPropertiesAppended", "u", "z"); !maps.Equal(got, want) {
				t.Errorf("told %v, want %v", got, want)
			}
			if len(p.seen) != tc.seen {
				t.Errorf("%d notifications left in seen, want %d", len(p.seen), tc.seen)
			}
		})
	}
}
