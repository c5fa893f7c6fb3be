package ubiq

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPeerAddedFitsAFrame: a peer's properties are bounded by what its
// PeerAdded message takes, not by their own JSON, which the message
// quotes a second time. Properties of quotes within the old bound (their
// JSON under MaxFrame) made a PeerAdded over twice the queue's byte bound,
// which no queue takes: every peer that joined the room after them was
// disconnected as too slow, and again on every reconnect.
func TestPeerAddedFitsAFrame(t *testing.T) {
	const maxFrame = 4096
	ts := startServer(t, nil, func(c *Config) { c.MaxFrame = maxFrame })
	p := dialPeer(t, ts.tcp)
	id := newUUID()
	p.join(JoinArgs{UUID: id})
	// Each append fits one frame (a quote takes 4 bytes in the request);
	// together their JSON is about 4,000 bytes, and their PeerAdded twice
	// that.
	for _, k := range []string{"a", "b", "c"} {
		p.request("AppendPeerProperties", PropertiesArgs{Keys: []string{k}, Values: []string{strings.Repeat(`"`, 660)}})
	}
	// Padding takes the properties' JSON to the old bound exactly.
	quotes := strings.Repeat(`"`, 660)
	pad, _ := json.Marshal(props{Keys: []string{"a", "b", "c", "d"}, Values: []string{quotes, quotes, quotes, ""}})
	p.request("AppendPeerProperties", PropertiesArgs{Keys: []string{"d"}, Values: []string{strings.Repeat("x", maxFrame-len(pad))}})
	p.barrier()
	q := dialPeer(t, ts.tcp, ClientOptions{MaxFrame: 1 << 20})
	q.join(JoinArgs{UUID: id})
	m := q.expect("PeerAdded")
	if n := len(m.frame) - HeaderSize; n > maxFrame {
		t.Fatalf("PeerAdded of %d bytes, more than the largest frame, %d", n, maxFrame)
	}
	q.barrier() // still connected
}
