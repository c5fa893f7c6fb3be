package mqtt

import (
	"strings"
	"testing"
)

func TestPassDeliversToInteractingClientsFirst(t *testing.T) {
	const scene = "realm/s/ns/lobby/#"
	conns := make([]*conn, 6)
	for i := range conns {
		conns[i] = &conn{clientID: string(rune('a' + i))}
	}
	// c and e clicked recently, a long ago; the others only watch.
	conns[0].actedAt.Store(100)
	conns[2].actedAt.Store(5000)
	conns[4].actedAt.Store(9000)
	all := &group{filter: scene}
	for _, c := range conns {
		all.snap = append(all.snap, member{c: c})
	}
	// f also has a second, overlapping subscription: one copy only.
	objects := &group{filter: "realm/s/ns/lobby/o/#", snap: []member{{c: conns[5]}, {c: conns[2]}}}
	groups := []*group{all, objects}

	for _, tc := range []struct {
		name   string
		topic  string
		urgent bool
		want   string
	}{
		{"urgent: interacting clients first", "realm/s/ns/lobby/o/cube", true, "ceabdf"},
		{"pose: subscription order", "realm/s/ns/lobby/u/bob_1/head", false, "abcdef"},
		{"other scene: nobody", "realm/s/ns/hall/o/cube", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			p := pass{m: newOutMsg(tc.topic, nil), seq: uint64(len(tc.name)), urgent: tc.urgent,
				to: func(mb member) bool { got = append(got, mb.c.clientID); return true }}
			if tc.urgent {
				p.run(groups, 1000) // acted after 1000: c and e
			}
			p.run(groups, 0)
			if s := strings.Join(got, ""); s != tc.want {
				t.Errorf("delivered to %q, want %q", s, tc.want)
			}
			if p.n != len(tc.want) {
				t.Errorf("n = %d, want %d", p.n, len(tc.want))
			}
		})
	}
}
