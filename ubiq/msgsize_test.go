package ubiq

import (
	"encoding/json"
	"maps"
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
// at most MaxNameLen bytes), and so is a room's name. Unbounded, SetRoom,
// which quotes them a second time, would go past what a joiner's queue
// takes (the joiner disconnected as too slow), and once the record was
// near the store's largest value no claim would fit, so nobody could join
// the room.
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
	// a fits; b, c and d, each with a, would not; z does.
	want := map[string]string{"a": quotes, "z": "1"}
	if got := p.toldUntil("RoomPropertiesAppended", "", "z"); !maps.Equal(got, want) {
		t.Fatalf("p was told %s, want %s", sizes(got), sizes(want))
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

// TestRoomsAnswerFitsAFrame: the answer to DiscoverRooms lists as many of
// the published rooms as fit the largest frame. It listed them all: a few
// rooms with large properties (each within its bound) made an answer of
// several frames, past what the asker's queue takes (it was disconnected
// as too slow) or its client reads, so that nobody could discover rooms.
func TestRoomsAnswerFitsAFrame(t *testing.T) {
	const maxFrame = 4096
	ts := startServer(t, nil, func(c *Config) { c.MaxFrame = maxFrame })
	rooms := map[string]bool{}
	for range 4 {
		p := dialPeer(t, ts.tcp)
		rooms[p.join(JoinArgs{Publish: true}).UUID] = true
		p.request("AppendRoomProperties", PropertiesArgs{Keys: []string{"a"}, Values: []string{strings.Repeat(`"`, 200)}})
		p.expect("RoomPropertiesAppended")
	}
	q := dialPeer(t, ts.tcp, ClientOptions{MaxFrame: 1 << 20})
	q.request("DiscoverRooms", DiscoverArgs{ClientID: q.clientID})
	m := q.expect("Rooms")
	if n := len(m.frame) - HeaderSize; n > maxFrame {
		t.Fatalf("Rooms of %d bytes, more than the largest frame, %d", n, maxFrame)
	}
	var a RoomsArgs
	m.decode(t, &a)
	if len(a.Rooms) < 2 || len(a.Rooms) >= 4 {
		t.Fatalf("Rooms lists %d rooms, want 2 or 3 of the 4", len(a.Rooms))
	}
	for _, r := range a.Rooms {
		if !rooms[r.UUID] {
			t.Fatalf("Rooms lists room %s, not one of the test's", r.UUID)
		}
	}
}

// TestEncodeRooms: encodeRooms lists the most rooms that fit its limit,
// in order, whatever their characters take quoted twice.
func TestEncodeRooms(t *testing.T) {
	rooms := []RoomInfo{
		{UUID: newUUID(), Name: "plain", Keys: []string{"k"}, Values: []string{"v"}},
		{UUID: newUUID(), Name: `"quoted" <html> & \ ` + "\x01\u2028", Keys: []string{}, Values: []string{}},
		{UUID: newUUID(), Name: strings.Repeat("<", 100), Keys: []string{`"`}, Values: []string{"\n"}},
	}
	a := DiscoverArgs{JoinCode: "a<\""}
	full := len(EncodeRequest("Rooms", RoomsArgs{Rooms: rooms, Version: roomsVersion, Request: a}))
	for _, limit := range []int{0, 1, 100, 200, 300, 400, 500, 1000, 1500, full - 1, full} {
		msg, n := encodeRooms(rooms, a, limit)
		var r Request
		var args RoomsArgs
		if err := json.Unmarshal(msg, &r); err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		if err := json.Unmarshal([]byte(r.Args), &args); err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		if len(args.Rooms) != n {
			t.Fatalf("limit %d: %d rooms, reported %d", limit, len(args.Rooms), n)
		}
		if limit <= 0 {
			if n != len(rooms) {
				t.Fatalf("no limit: %d rooms, want %d", n, len(rooms))
			}
			continue
		}
		if n > 0 && len(msg) > limit {
			t.Fatalf("limit %d: message of %d bytes", limit, len(msg))
		}
		if n < len(rooms) {
			if more := EncodeRequest("Rooms", RoomsArgs{Rooms: rooms[:n+1], Version: roomsVersion, Request: a}); len(more) <= limit {
				t.Fatalf("limit %d: %d rooms listed, but %d fit (%d bytes)", limit, n, n+1, len(more))
			}
		}
	}
}

// rawRequest sends a server message whose args are v's JSON written
// without HTML escaping, in either layer: a '<' takes one byte of the
// frame, and seven in an answer that quotes it twice.
func rawRequest(t *testing.T, p *peer, typ string, v any) {
	t.Helper()
	enc := func(v any) string {
		var b strings.Builder
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(false)
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
	if err := p.c.Send(ServerID, []byte(enc(Request{Type: typ, Args: enc(v)}))); err != nil {
		t.Fatal(err)
	}
}

// TestEchoingAnswersFitAFrame: the answers that quote a request back
// (Rejected its JoinArgs, Rooms its DiscoverArgs, Blob the GetBlob's
// uuid) are no larger than the
// largest frame, whatever the request held: what does not fit is cut
// (the peer's properties first, then the strings). Quoted whole, where a
// '<' sent as one byte takes seven, a request within a frame would make an
// answer of several, past what the asker's queue takes (it would be
// disconnected as too slow) or its client reads.
func TestEchoingAnswersFitAFrame(t *testing.T) {
	const maxFrame = 4096
	ts := startServer(t, nil, func(c *Config) { c.MaxFrame = maxFrame })
	long := strings.Repeat("<", 3000)
	tests := []struct {
		name   string
		send   func(p *peer)
		answer string
		check  func(t *testing.T, m msg)
	}{
		{"Rejected, a long name", func(p *peer) {
			rawRequest(t, p, "Join", JoinArgs{Name: long, Peer: p.info(nil, nil)})
		}, "Rejected", func(t *testing.T, m msg) {
			var a RejectedArgs
			m.decode(t, &a)
			if !strings.Contains(a.Reason, "room name of 3000 bytes") || !strings.HasPrefix(long, a.JoinArgs.Name) {
				t.Fatalf("Rejected %q, name %q", a.Reason, a.JoinArgs.Name)
			}
		}},
		{"Rejected, long properties", func(p *peer) {
			rawRequest(t, p, "Join", JoinArgs{UUID: "not a uuid", Peer: p.info([]string{"k"}, []string{long})})
		}, "Rejected", func(t *testing.T, m msg) {
			var a RejectedArgs
			m.decode(t, &a)
			if !strings.HasPrefix(a.Reason, "Could not join") || a.JoinArgs.UUID != "not a uuid" || len(a.JoinArgs.Peer.Keys) != len(a.JoinArgs.Peer.Values) {
				t.Fatalf("Rejected %q, %+v", a.Reason, a.JoinArgs)
			}
		}},
		{"Rejected, a long join code", func(p *peer) {
			rawRequest(t, p, "Join", JoinArgs{JoinCode: long, Peer: p.info(nil, nil)})
		}, "Rejected", func(t *testing.T, m msg) {
			var a RejectedArgs
			m.decode(t, &a)
			if !strings.HasPrefix(a.Reason, "Could not join room with code <") || !strings.HasPrefix(long, a.JoinArgs.JoinCode) {
				t.Fatalf("Rejected %q, code %q", a.Reason, a.JoinArgs.JoinCode)
			}
		}},
		{"Blob, a long uuid", func(p *peer) {
			rawRequest(t, p, "GetBlob", GetBlobArgs{ClientID: p.clientID, UUID: long})
		}, "Blob", func(t *testing.T, m msg) {
			var a BlobArgs
			m.decode(t, &a)
			if a.Blob != "" || !strings.HasPrefix(long, a.UUID) {
				t.Fatalf("Blob %+v", a)
			}
		}},
		{"Blob, a long uuid in a room", func(p *peer) {
			p.join(JoinArgs{UUID: newUUID()})
			rawRequest(t, p, "GetBlob", GetBlobArgs{ClientID: p.clientID, UUID: long})
		}, "Blob", func(t *testing.T, m msg) {
			var a BlobArgs
			m.decode(t, &a)
			if a.Blob != "" || !strings.HasPrefix(long, a.UUID) {
				t.Fatalf("Blob %+v", a)
			}
		}},
		{"Rooms, a long join code", func(p *peer) {
			rawRequest(t, p, "DiscoverRooms", DiscoverArgs{ClientID: p.clientID, JoinCode: long})
		}, "Rooms", func(t *testing.T, m msg) {
			var a RoomsArgs
			m.decode(t, &a)
			if len(a.Rooms) != 0 || !strings.HasPrefix(long, a.Request.JoinCode) {
				t.Fatalf("Rooms %+v", a)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := dialPeer(t, ts.tcp, ClientOptions{MaxFrame: 1 << 20})
			tc.send(p)
			m := p.expect(tc.answer)
			if n := len(m.frame) - HeaderSize; n > maxFrame {
				t.Fatalf("%s of %d bytes, more than the largest frame, %d", tc.answer, n, maxFrame)
			}
			tc.check(t, m)
			p.barrier() // still connected
		})
	}
}

// TestEncodeRejected: encodeRejected keeps a Rejected message within its
// limit whatever the Join held, cutting strings at character boundaries,
// and leaves one that fits as it was.
func TestEncodeRejected(t *testing.T) {
	odd := `"quoted" <html> & \ ` + "\x01\u2028\xff" + "é"
	big := JoinArgs{UUID: strings.Repeat(odd, 40), JoinCode: "abc", Name: strings.Repeat("é<", 300),
		Peer: PeerInfo{UUID: strings.Repeat(odd, 10), Keys: []string{"k", "l"}, Values: []string{strings.Repeat(odd, 50), "v"}}}
	small := JoinArgs{UUID: newUUID(), Peer: PeerInfo{UUID: "p", Keys: []string{"k"}, Values: []string{"v"}}}
	reason := "Could not join: " + odd
	for _, limit := range []int{0, 300, 500, 1000, 2000, 4000, 8000, 1 << 20} {
		for _, a := range []JoinArgs{big, small} {
			msg := encodeRejected(reason, a, limit)
			var r Request
			var got RejectedArgs
			if err := json.Unmarshal(msg, &r); err != nil {
				t.Fatalf("limit %d: %v", limit, err)
			}
			if err := json.Unmarshal([]byte(r.Args), &got); err != nil {
				t.Fatalf("limit %d: %v", limit, err)
			}
			full := EncodeRequest("Rejected", RejectedArgs{Reason: reason, JoinArgs: a})
			switch {
			case limit <= 0 || len(full) <= limit:
				if string(msg) != string(full) {
					t.Fatalf("limit %d: a message that fits was changed", limit)
				}
			case len(msg) > limit:
				t.Fatalf("limit %d: message of %d bytes", limit, len(msg))
			}
			for _, s := range [][2]string{{got.Reason, reason}, {got.JoinArgs.UUID, a.UUID}, {got.JoinArgs.Name, a.Name}, {got.JoinArgs.Peer.UUID, a.Peer.UUID}} {
				if !strings.HasPrefix(strings.ToValidUTF8(s[1], "\uFFFD"), s[0]) { // json decodes an invalid byte so
					t.Fatalf("limit %d: %q is not a prefix of %q", limit, s[0], s[1])
				}
			}
		}
	}
}
