package sfu

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestBadRelayRequestsAnswered: a relay offer or link request that is not
// JSON, or names no valid node, is answered at once with an error that
// says what is wrong with it and quotes the bad part. It fails if a bad
// offer is answered with no cause or quote, or a bad link request is not
// answered: its sender would wait for its timeout (15 s for a node's link
// request).
func TestBadRelayRequestsAnswered(t *testing.T) {
	c := startCluster(t, "a")
	nc := c.conn(t, "peer")
	for _, tc := range []struct {
		name, subject, msg string
		want               []string
	}{
		{"offer not JSON", "sfu.node.1.relay", `not json`, []string{"relay offer", "invalid character", `"not json"`}},
		{"offer from a bad node ID", "sfu.node.1.relay", `{"from":"a b","sdp":"v=0"}`, []string{"relay offer", `"a b"`}},
		{"link request not JSON", "sfu.node.1.link", `{"from":`, []string{"link request", "unexpected end"}},
		{"link request from a bad node ID", "sfu.node.1.link", `{"from":"x.y"}`, []string{"link request", `"x.y"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := nc.Request(tc.subject, []byte(tc.msg), 5*time.Second)
			if err != nil {
				t.Fatalf("no answer to %q on %s: %v", tc.msg, tc.subject, err)
			}
			var rep LinkOffer
			if err := json.Unmarshal(m.Data, &rep); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(rep.Error, w) {
					t.Errorf("error %q does not say %q", rep.Error, w)
				}
			}
		})
	}
}

// TestLinkRequestRefused: a node that asks the offering node to link (the
// lower ID offers) and is answered with an error fails its link with that
// error at once. It fails if the answer is not read: the asking node
// would wait 15 s for an offer that will not come, and then report a
// timeout.
func TestLinkRequestRefused(t *testing.T) {
	c := startCluster(t, "a", "b")
	n2 := c.nodes[1]
	// node 0, which would offer to node 2, refuses to link
	nc := c.conn(t, "node0")
	if _, err := nc.Subscribe("sfu.node.0.link", func(m *nats.Msg) {
		b, _ := json.Marshal(LinkOffer{Error: "sfu: link to node 2: test refuses"})
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	_, err := n2.link("0")
	if err == nil || !strings.Contains(err.Error(), "test refuses") {
		t.Fatalf("link to a node that refuses: %v, want its error", err)
	}
	t.Log(err)
}
