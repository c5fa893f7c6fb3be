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

// TestRoomPropertiesBounded: a room's properties are bounded by what its
// SetRoom message takes, half the largest frame (the rest is for its name,
// at most MaxNameLen bytes), and so is a room's name. Before, appends
// grew them without bound: SetRoom, which quotes them a second time, went
// past what a joiner's queue takes (the joiner was disconnected as too
// slow), and once the record was near the store's largest value no claim
// fit, so nobody could join the room.
func TestRoomPropertiesBounded(t *testing.T) {
	const maxFrame = 4096
	ts := startServer(t, nil, func(c *Config) { c.MaxFrame = maxFrame })
	p := dialPeer(t, ts.tcp)
	id := newUUID()
	p.join(JoinArgs{UUID: id})
	quotes := strings.Repeat(`"`, 300) // 1,200 bytes in SetRoom
	for _, k := range []string{"a", "b", "c", "d"} {
		p.request("AppendRoomProperties", PropertiesArgs{Keys: []string{k}, Values: []string{quotes}})
	}
	p.request("AppendRoomProperties", PropertiesArgs{Keys: []string{"z"}, Values: []string{"1"}})
	for _, want := range []string{"a", "z"} {
		var a PropertiesArgs
		p.expect("RoomPropertiesAppended").decode(t, &a)
		if len(a.Keys) != 1 || a.Keys[0] != want {
			t.Fatalf("RoomPropertiesAppended %q, want [%s]", a.Keys, want)
		}
	}
	q := dialPeer(t, ts.tcp, ClientOptions{MaxFrame: 1 << 20})
	q.request("Join", JoinArgs{UUID: id, Peer: q.info(nil, nil)})
	m := q.expect("SetRoom")
	if n := len(m.frame) - HeaderSize; n > maxFrame/2 {
		t.Fatalf("SetRoom of %d bytes, more than half the largest frame, %d", n, maxFrame)
	}
	// A Join with a name longer than MaxNameLen is rejected.
	r := dialPeer(t, ts.tcp, ClientOptions{MaxFrame: 1 << 20})
	r.request("Join", JoinArgs{Name: strings.Repeat("n", MaxNameLen+1), Peer: r.info(nil, nil)})
	var rej RejectedArgs
	r.expect("Rejected").decode(t, &rej)
	if !strings.Contains(rej.Reason, "room name of 1025 bytes") {
		t.Fatalf("Rejected %q", rej.Reason)
	}
}

// TestBlobAnswerFitsAFrame: a blob whose GetBlob answer would be larger
// than the largest frame is refused. The answer quotes the blob again,
// and a '<' that a peer sends as one byte is 7 in it ("\\u003c"): a blob
// that fit a SetBlob frame made an answer of several frames, past what
// its asker's queue takes or its client reads.
func TestBlobAnswerFitsAFrame(t *testing.T) {
	const maxFrame = 4096
	ts := startServer(t, nil, func(c *Config) { c.MaxFrame = maxFrame })
	p := dialPeer(t, ts.tcp)
	q := dialPeer(t, ts.tcp, ClientOptions{MaxFrame: 1 << 20})
	id := newUUID()
	p.join(JoinArgs{UUID: id})
	q.join(JoinArgs{UUID: id})
	for _, c := range []struct{ name, blob string }{
		{"big", strings.Repeat("<", 3000)},
		{"small", strings.Repeat("<", 100)},
	} {
		// As a client that does not escape '<' sends it.
		req := `{"type":"SetBlob","args":"{\"uuid\":\"` + c.name + `\",\"blob\":\"` + c.blob + `\"}"}`
		if err := p.c.Send(ServerID, []byte(req)); err != nil {
			t.Fatal(err)
		}
		p.barrier()
		q.request("GetBlob", GetBlobArgs{ClientID: q.clientID, UUID: c.name})
		m := q.expect("Blob")
		if n := len(m.frame) - HeaderSize; n > maxFrame {
			t.Fatalf("blob %s: answer of %d bytes, more than the largest frame, %d", c.name, n, maxFrame)
		}
		var b BlobArgs
		m.decode(t, &b)
		if want := map[string]string{"big": "", "small": c.blob}[c.name]; b.Blob != want {
			t.Fatalf("blob %s: got %d bytes, want %d", c.name, len(b.Blob), len(want))
		}
	}
}
