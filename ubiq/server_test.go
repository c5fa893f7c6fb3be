package ubiq

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/xrealm/xrealm/internal/testlog"
	"github.com/xrealm/xrealm/tlscert"
)

func TestPingBeforeJoin(t *testing.T) {
	ts := startServer(t, nil, nil)
	p := dialPeer(t, ts.tcp)
	p.request("Ping", ClientArgs{ClientID: p.clientID})
	m := p.expect("Ping")
	if m.to != p.clientID {
		t.Fatalf("Ping answered to %v, want the client id %v", m.to, p.clientID)
	}
	var a struct {
		SessionID string `json:"sessionId"`
	}
	m.decode(t, &a)
	if !validUUID(a.SessionID) {
		t.Fatalf("sessionId %q", a.SessionID)
	}
}

func TestJoinByUUIDAndJoinCode(t *testing.T) {
	ts := startServer(t, nil, nil)
	a, b := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	id := newUUID()
	ra := a.join(JoinArgs{UUID: id, Name: "My Room", Peer: a.info([]string{"k"}, []string{"va"})})
	if ra.UUID != id || ra.Name != "My Room" || ra.Publish || len(ra.JoinCode) != 3 {
		t.Fatalf("SetRoom %+v", ra)
	}
	ice, _ := (&props{Keys: ra.Keys, Values: ra.Values}).get("ice-servers")
	if !strings.Contains(ice, `"uri":"stun:stun.l.google.com:19302"`) {
		t.Fatalf("ice-servers property %q", ice)
	}
	rb := b.join(JoinArgs{JoinCode: ra.JoinCode, Name: "My Room"})
	if rb.UUID != id {
		t.Fatalf("join by code %s reached room %s, want %s", ra.JoinCode, rb.UUID, id)
	}
	var added struct {
		Peer PeerInfo `json:"peer"`
	}
	a.expect("PeerAdded").decode(t, &added)
	if added.Peer.UUID != b.uuid || added.Peer.ClientID != b.clientID || added.Peer.SceneID != b.sceneID {
		t.Fatalf("A got PeerAdded %+v", added.Peer)
	}
	b.expect("PeerAdded").decode(t, &added)
	if added.Peer.UUID != a.uuid || len(added.Peer.Keys) != 1 || added.Peer.Keys[0] != "k" || added.Peer.Values[0] != "va" {
		t.Fatalf("B got PeerAdded %+v, want A with k=va", added.Peer)
	}

	// Relay: the frame arrives unchanged, and not back at its sender.
	obj := NetworkId{A: 77, B: 88}
	a.c.Send(obj, []byte("hello from a"))
	if f := b.frame(); !bytes.Equal(f.frame, NewFrame(obj, []byte("hello from a"))) {
		t.Fatalf("B got % x", f.frame)
	}
	for _, m := range a.barrier() {
		if m.typ == "" {
			t.Fatalf("A got its own frame back")
		}
	}

	// A join code that does not exist is rejected.
	c := dialPeer(t, ts.tcp)
	c.request("Join", JoinArgs{JoinCode: "!!!", Peer: c.info(nil, nil)})
	var rej RejectedArgs
	c.expect("Rejected").decode(t, &rej)
	if rej.JoinArgs.JoinCode != "!!!" || rej.Reason == "" {
		t.Fatalf("Rejected %+v", rej)
	}
	c.request("Join", JoinArgs{UUID: "not-a-uuid", Peer: c.info(nil, nil)})
	c.expect("Rejected")

	// Leaving: B disconnects and A is told.
	b.c.Close()
	var removed struct {
		UUID string `json:"uuid"`
	}
	a.expect("PeerRemoved").decode(t, &removed)
	if removed.UUID != b.uuid {
		t.Fatalf("PeerRemoved %q, want %q", removed.UUID, b.uuid)
	}
}

func TestCreateRoomFromName(t *testing.T) {
	ts := startServer(t, nil, nil)
	p := dialPeer(t, ts.tcp)
	r := p.join(JoinArgs{Name: "Unit Test Room A", Publish: false})
	if !validUUID(r.UUID) || r.Name != "Unit Test Room A" || r.Publish || len(r.JoinCode) != 3 {
		t.Fatalf("SetRoom %+v", r)
	}
	// The raw args carry joincode and publish:false explicitly.
	p2 := dialPeer(t, ts.tcp)
	p2.request("Join", JoinArgs{Name: "Another", Peer: p2.info(nil, nil)})
	m := p2.expect("SetRoom")
	if !strings.Contains(m.args, `"publish":false`) || !strings.Contains(m.args, `"joincode":"`) {
		t.Fatalf("SetRoom args %s", m.args)
	}
	// Discover by join code finds it even though it is not published;
	// without a code only published rooms are listed.
	pub := dialPeer(t, ts.tcp)
	pr := pub.join(JoinArgs{Name: "Published", Publish: true})
	p.request("DiscoverRooms", DiscoverArgs{ClientID: p.clientID, JoinCode: r.JoinCode})
	var rooms RoomsArgs
	p.expect("Rooms").decode(t, &rooms)
	if len(rooms.Rooms) != 1 || rooms.Rooms[0].UUID != r.UUID || rooms.Request.JoinCode != r.JoinCode {
		t.Fatalf("Rooms %+v", rooms)
	}
	p.request("DiscoverRooms", DiscoverArgs{ClientID: p.clientID})
	p.expect("Rooms").decode(t, &rooms)
	if len(rooms.Rooms) != 1 || rooms.Rooms[0].UUID != pr.UUID {
		t.Fatalf("published rooms %+v, want only %s", rooms.Rooms, pr.UUID)
	}
}

func TestRoomPropertiesEchoAndLateJoiner(t *testing.T) {
	ts := startServer(t, nil, nil)
	id := newUUID()
	var ps []*peer
	for range 3 {
		p := dialPeer(t, ts.tcp)
		p.join(JoinArgs{UUID: id})
		ps = append(ps, p)
	}
	const key, value = "ubiq.unittests.property1", "R9Cy7IS8rDXjqPdYyuJ3"
	ps[1].request("AppendRoomProperties", PropertiesArgs{Keys: []string{key}, Values: []string{value}})
	for i, p := range ps { // the sender too
		var a PropertiesArgs
		p.expect("RoomPropertiesAppended").decode(t, &a)
		if len(a.Keys) != 1 || a.Keys[0] != key || a.Values[0] != value {
			t.Fatalf("peer %d got %+v", i, a)
		}
	}
	late := dialPeer(t, ts.tcp)
	r := late.join(JoinArgs{UUID: id})
	if v, _ := (&props{Keys: r.Keys, Values: r.Values}).get(key); v != value {
		t.Fatalf("late joiner's SetRoom has %s=%q", key, v)
	}
	if n := countType(late.barrier(), "RoomPropertiesAppended"); n != 0 {
		t.Fatalf("late joiner got %d RoomPropertiesAppended", n)
	}
	// An empty value deletes the property.
	ps[0].request("AppendRoomProperties", PropertiesArgs{Keys: []string{key}, Values: []string{""}})
	var a PropertiesArgs
	late.expect("RoomPropertiesAppended").decode(t, &a)
	if len(a.Keys) != 1 || a.Values[0] != "" {
		t.Fatalf("deletion sent as %+v", a)
	}
}

func TestPeerProperties(t *testing.T) {
	ts := startServer(t, nil, nil)
	id := newUUID()
	const key = "ubiq.unittests.property1"
	a, b := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	// Set before Join, then merged with the Join's own properties.
	a.request("AppendPeerProperties", PropertiesArgs{Keys: []string{key}, Values: []string{"Mw4oumCWHIaM2gwC7WyJ"}})
	a.join(JoinArgs{UUID: id, Peer: a.info([]string{"other"}, []string{"x"})})
	b.join(JoinArgs{UUID: id})
	var added struct {
		Peer PeerInfo `json:"peer"`
	}
	b.expect("PeerAdded").decode(t, &added)
	got := props{Keys: added.Peer.Keys, Values: added.Peer.Values}
	if v, _ := got.get(key); v != "Mw4oumCWHIaM2gwC7WyJ" {
		t.Fatalf("PeerAdded of A has %v / %v", added.Peer.Keys, added.Peer.Values)
	}
	if v, _ := got.get("other"); v != "x" {
		t.Fatalf("Join's own properties lost: %v", added.Peer)
	}
	a.expect("PeerAdded").decode(t, &added)
	if len(added.Peer.Keys) != 0 {
		t.Fatalf("B has properties %v", added.Peer.Keys)
	}
	b.request("AppendPeerProperties", PropertiesArgs{Keys: []string{key}, Values: []string{"klPteFvLrmR6MOhgn1TM"}})
	var upd PeerPropertiesArgs
	a.expect("PeerPropertiesAppended").decode(t, &upd)
	if upd.UUID != b.uuid || upd.Keys[0] != key || upd.Values[0] != "klPteFvLrmR6MOhgn1TM" {
		t.Fatalf("PeerPropertiesAppended %+v", upd)
	}
	// No echo to the sender.
	if n := countType(b.barrier(), "PeerPropertiesAppended"); n != 0 {
		t.Fatalf("sender got %d PeerPropertiesAppended", n)
	}
}

// A member's uuid names its member key, so a Join that does not move the
// peer (one for the room it is in, or one that is refused) changes nothing:
// renaming the member in place would make the next property append write
// a second member key, both of which would stay in the room for good when
// the peer left. A Join that moves it to another room takes its new uuid
// there, and its old key goes.
func TestJoinThatDoesNotMoveKeepsIdentity(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) { c.RemoveGrace = -1 })
	room, other := newUUID(), newUUID()
	w, a := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	w.join(JoinArgs{UUID: room})
	a.join(JoinArgs{UUID: room})
	w.expect("PeerAdded")
	first := a.uuid
	for _, j := range []JoinArgs{
		{UUID: room, Peer: PeerInfo{UUID: newUUID(), ClientID: a.clientID, Keys: []string{"k"}, Values: []string{"join"}}},
		{UUID: "not-a-uuid", Peer: PeerInfo{UUID: newUUID(), ClientID: a.clientID}},
		{JoinCode: "!!!", Peer: PeerInfo{UUID: newUUID(), ClientID: a.clientID}},
	} {
		a.request("Join", j)
	}
	a.expect("Rejected")
	a.expect("Rejected")
	if n := countType(a.barrier(), "SetRoom"); n != 0 {
		t.Fatalf("%d SetRoom for Joins that did not move the peer", n)
	}
	a.request("AppendPeerProperties", PropertiesArgs{Keys: []string{"k"}, Values: []string{"append"}})
	var upd PeerPropertiesArgs
	w.expect("PeerPropertiesAppended").decode(t, &upd)
	if upd.UUID != first || len(upd.Keys) != 1 || upd.Values[0] != "append" {
		t.Fatalf("PeerPropertiesAppended %+v, want k=append of %s", upd, first)
	}
	if got := w.barrier(); countType(got, "PeerAdded")+countType(got, "PeerRemoved") != 0 {
		t.Fatalf("the watcher saw members come or go: %+v", got)
	}
	if n := countMembers(ts, room); n != 2 {
		t.Fatalf("%d member keys in the room, want 2", n)
	}
	// Moving to another room with a new uuid.
	a.uuid = newUUID()
	a.join(JoinArgs{UUID: other})
	var removed struct {
		UUID string `json:"uuid"`
	}
	w.expect("PeerRemoved").decode(t, &removed)
	if removed.UUID != first {
		t.Fatalf("PeerRemoved %s, want %s", removed.UUID, first)
	}
	eventually(t, "one member key in the old room", func() bool { return countMembers(ts, room) == 1 })
	if c := connOf(ts, a.uuid); c == nil {
		t.Fatalf("no connection is named %s after the move", a.uuid)
	}
	a.c.Close()
	eventually(t, "the new room emptied", func() bool { return countMembers(ts, other) == 0 })
	if n := countMembers(ts, room); n != 1 {
		t.Fatalf("%d member keys in the old room after the peer left, want the watcher's", n)
	}
}

func TestBlobs(t *testing.T) {
	ts := startServer(t, nil, nil)
	p := dialPeer(t, ts.tcp)
	p.join(JoinArgs{UUID: newUUID()})
	p.request("SetBlob", SetBlobArgs{UUID: "blob-1", Blob: "some data"})
	p.request("GetBlob", GetBlobArgs{ClientID: p.clientID, UUID: "blob-1"})
	var b BlobArgs
	p.expect("Blob").decode(t, &b)
	if b.UUID != "blob-1" || b.Blob != "some data" {
		t.Fatalf("Blob %+v", b)
	}
	p.request("GetBlob", GetBlobArgs{ClientID: p.clientID, UUID: "missing"})
	p.expect("Blob").decode(t, &b)
	if b.Blob != "" {
		t.Fatalf("missing blob = %q", b.Blob)
	}
}

// A room's blobs are bounded (Config.MaxRoomBlobBytes): a SetBlob that
// would take them past the bound is refused and logged, a smaller value
// gives bytes back, empty blobs under new names count too, and the count
// goes with the room.
func TestRoomBlobsBounded(t *testing.T) {
	var log testlog.Buffer
	ts := startServer(t, nil, func(c *Config) { c.MaxRoomBlobBytes = 4096; c.Logger = log.Logger() })
	room := newUUID()
	p := dialPeer(t, ts.tcp)
	p.join(JoinArgs{UUID: room})
	get := func(id string) string {
		t.Helper()
		p.request("GetBlob", GetBlobArgs{ClientID: p.clientID, UUID: id})
		var b BlobArgs
		p.expect("Blob").decode(t, &b)
		return b.Blob
	}
	cost := func(id string, n int) int64 { return blobCost(blobKey(room, id), n) }
	used := func() int64 {
		t.Helper()
		e, err := ts.s.store.kv.Get(context.Background(), blobBytesKey(room))
		if err != nil {
			t.Fatalf("the room's blob count: %v", err)
		}
		n, _ := strconv.ParseInt(string(e.Value()), 10, 64)
		return n
	}
	big := strings.Repeat("x", 1000)
	p.request("SetBlob", SetBlobArgs{UUID: "a", Blob: big})
	if got := get("a"); got != big {
		t.Fatalf("blob a = %d bytes, want 1000", len(got))
	}
	p.request("SetBlob", SetBlobArgs{UUID: "b", Blob: strings.Repeat("y", 3000)})
	if got := get("b"); got != "" {
		t.Fatalf("a blob past the room's limit was stored (%d bytes)", len(got))
	}
	if n := log.Count("Ubiq SetBlob refused", "exceed the limit of 4096"); n != 1 {
		t.Fatalf("%d log lines of the refusal:\n%s", n, log.String())
	}
	if got, want := used(), cost("a", 1000); got != want {
		t.Fatalf("the room's blobs count %d bytes, want %d", got, want)
	}
	// A smaller value gives bytes back, and then the big one fits.
	p.request("SetBlob", SetBlobArgs{UUID: "a", Blob: "small"})
	p.request("SetBlob", SetBlobArgs{UUID: "b", Blob: strings.Repeat("y", 3000)})
	if got := get("b"); len(got) != 3000 || get("a") != "small" {
		t.Fatalf("blob b = %d bytes, a = %q after a shrank", len(got), get("a"))
	}
	total := cost("a", 5) + cost("b", 3000)
	if got := used(); got != total {
		t.Fatalf("the room's blobs count %d bytes, want %d", got, total)
	}
	// Empty blobs under ever new names run out too.
	stored := 0
	for i := range 20 {
		id := fmt.Sprintf("e%02d", i)
		p.request("SetBlob", SetBlobArgs{UUID: id, Blob: ""})
		if total+cost(id, 0) <= 4096 {
			total += cost(id, 0)
			stored++
		}
	}
	p.barrier() // requests are handled in order: the SetBlobs are done
	if got := used(); got != total || stored == 20 {
		t.Fatalf("the room's blobs count %d bytes, want %d (%d of 20 empty blobs stored)", got, total, stored)
	}
	// The count goes with the room.
	p.c.Close()
	eventually(t, "the blob count removed with the room", func() bool {
		_, err := ts.s.store.kv.Get(context.Background(), blobBytesKey(room))
		return err != nil
	})
}

func TestMalformedHeaderClosesOnlyThatConnection(t *testing.T) {
	ts := startServer(t, nil, nil)
	bystander := dialPeer(t, ts.tcp)
	bystander.join(JoinArgs{UUID: newUUID()})
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"negative length", append(binary.LittleEndian.AppendUint32(nil, uint32(0xa4000004)), make([]byte, 6)...)},
		{"zero length", binary.LittleEndian.AppendUint32(nil, 0)},
		{"length 11", append(binary.LittleEndian.AppendUint32(nil, 11), make([]byte, 11)...)},
		{"huge length", binary.LittleEndian.AppendUint32(nil, 1<<30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", ts.tcp)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write(tc.in)
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := nc.Read(make([]byte, 1)); err == nil {
				t.Fatalf("connection still open (read %d bytes)", n)
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("server did not close the connection")
			}
			// Others are unaffected and new connections work.
			bystander.barrier()
			p := dialPeer(t, ts.tcp)
			p.barrier()
		})
	}
}

func TestWebSocket(t *testing.T) {
	dir := t.TempDir()
	tlsConf, err := tlscert.Load("", "", dir, []string{"localhost", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, nil, func(c *Config) { c.TLS = tlsConf })
	id := newUUID()
	ws := dialPeer(t, ts.ws)
	wss := dialPeer(t, ts.wss, ClientOptions{TLS: insecureTLS()})
	tcp := dialPeer(t, ts.tcp)
	ws.barrier()
	wss.barrier()
	for _, p := range []*peer{ws, wss, tcp} {
		p.join(JoinArgs{UUID: id})
	}
	// Frames cross transports in both directions; the writer batches, but
	// each WebSocket message must still hold one whole frame (the client
	// checks with ParseFrame).
	for i := range 50 {
		tcp.c.Send(NetworkId{A: 5, B: uint32(i)}, []byte("to websockets"))
	}
	for _, p := range []*peer{ws, wss} {
		for i := range 50 {
			if f := p.frame(); IDOf(f.frame).B != uint32(i) {
				t.Fatalf("frame %d has id %v", i, IDOf(f.frame))
			}
		}
	}
	ws.c.Send(NetworkId{A: 6, B: 6}, []byte("from a websocket"))
	if f := tcp.frame(); !bytes.Equal(f.frame[HeaderSize:], []byte("from a websocket")) {
		t.Fatalf("tcp got %q", f.frame[HeaderSize:])
	}
	// A message that is not exactly one frame closes that connection.
	bad := dialPeer(t, ts.ws)
	bad.barrier()
	f := NewFrame(ServerID, []byte(`{"type":"Ping","args":"{}"}`))
	bad.c.WriteRaw(append(f, f...))
	select {
	case <-bad.c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("WebSocket with two frames in a message stayed open")
	}
	ws.barrier()
}

// A WebSocket message that is not exactly one whole frame closes that
// connection only, is counted as malformed, and is logged with what was
// wrong with it: a message too short for the length field, a length field
// out of bounds (refused before the payload is read), a message that ends
// inside its frame or goes on past it.
func TestMalformedWebSocketMessages(t *testing.T) {
	var log testlog.Buffer
	ts := startServer(t, nil, func(c *Config) { c.MaxFrame = 1024; c.Logger = log.Logger() })
	bystander := dialPeer(t, ts.ws)
	bystander.join(JoinArgs{UUID: newUUID()})
	hdr := func(n int32) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(n)) }
	ping := NewFrame(ServerID, []byte(`{"type":"Ping","args":"{}"}`))
	full := NewFrame(NetworkId{A: 5, B: 5}, make([]byte, 1024)) // the largest frame
	for i, tc := range []struct {
		name string
		msg  []byte
		want string // in the log line
	}{
		{"empty", []byte{}, "message of 0 bytes is too short to hold a frame's length field"},
		{"two bytes", []byte{1, 2}, "message of 2 bytes is too short to hold a frame's length field"},
		{"length 11", append(hdr(11), make([]byte, 11)...), "frame length 11 is below the minimum 12"},
		{"length over the limit", append(hdr(1024+9), make([]byte, 16)...), "frame length 1033 exceeds the limit 1032"},
		{"ends inside its frame", ping[:len(ping)-1], fmt.Sprintf("message of %d bytes holds a frame of length %d", len(ping)-1, len(ping)-4)},
		{"two frames", append(append([]byte{}, ping...), ping...), fmt.Sprintf("message of more than %d bytes holds a frame of length %d", len(ping), len(ping)-4)},
		{"past the largest frame", append(append([]byte{}, full...), 0), fmt.Sprintf("message of more than %d bytes holds a frame of length 1032", len(full))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := dialPeer(t, ts.ws)
			bad.barrier()
			bad.c.WriteRaw(tc.msg)
			select {
			case <-bad.c.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the connection stayed open")
			}
			eventually(t, "the malformed message counted", func() bool {
				return strings.Contains(collect(t, ts.s), fmt.Sprintf("xrealm_ubiq_malformed_total %d\n", i+1))
			})
			if log.Count("malformed frame", tc.want) != 1 {
				t.Fatalf("no log line with %q in:\n%s", tc.want, log.String())
			}
			bystander.barrier()
		})
	}
	// Text messages are skipped, whatever they hold.
	p := dialPeer(t, ts.ws)
	p.barrier()
	ws := p.c.ws
	if err := ws.WriteMessage(websocket.TextMessage, []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	p.barrier()
}

func TestSilentPeerDropped(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) { c.PeerTimeout = 1500 * time.Millisecond })
	id := newUUID()
	quiet, talker := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	quiet.join(JoinArgs{UUID: id})
	talker.join(JoinArgs{UUID: id})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				talker.c.Request("Ping", ClientArgs{ClientID: talker.clientID})
			}
		}
	}()
	var removed struct {
		UUID string `json:"uuid"`
	}
	talker.expect("PeerRemoved").decode(t, &removed)
	if removed.UUID != quiet.uuid {
		t.Fatalf("removed %s", removed.UUID)
	}
	select {
	case <-quiet.c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("silent peer's connection stayed open")
	}
	if talker.c.Err() != nil {
		t.Fatal("pinging peer was dropped")
	}
}

func TestEmptyRoomRemoved(t *testing.T) {
	ts := startServer(t, nil, nil)
	p := dialPeer(t, ts.tcp)
	r := p.join(JoinArgs{Name: "temporary"})
	p.c.Close()
	ctx := context.Background()
	eventually(t, "the empty room to be removed", func() bool {
		_, _, err := ts.s.store.getRoom(ctx, r.UUID)
		return err != nil
	})
	q := dialPeer(t, ts.tcp)
	q.request("Join", JoinArgs{JoinCode: r.JoinCode, Peer: q.info(nil, nil)})
	q.expect("Rejected")
}

func TestMetricsPerConnection(t *testing.T) {
	ts := startServer(t, nil, nil)
	p := dialPeer(t, ts.tcp)
	p.join(JoinArgs{UUID: newUUID()})
	out := collect(t, ts.s)
	if !strings.Contains(out, `xrealm_ubiq_connection_dropped_total{peer="`+p.uuid+`"`) {
		t.Fatalf("no per-connection drop counter for %s in:\n%s", p.uuid, out)
	}
}

func TestObservedOnlyRoomRemoved(t *testing.T) {
	ts := startServer(t, nil, nil)
	o := dialPeer(t, ts.tcp)
	id := newUUID()
	o.request("SetObserved", SetObservedArgs{ClientID: o.clientID, Rooms: []string{id}})
	o.expect("Observed")
	ctx := context.Background()
	if _, _, err := ts.s.store.getRoom(ctx, id); err != nil {
		t.Fatalf("observed room was not created on demand: %v", err)
	}
	o.request("SetObserved", SetObservedArgs{ClientID: o.clientID, Rooms: []string{}})
	o.expect("Observed")
	eventually(t, "the unobserved room to be removed", func() bool {
		_, _, err := ts.s.store.getRoom(ctx, id)
		return err != nil
	})
}

// A peer that reconnects (its uuid on a new connection) before its old
// connection ends keeps its membership when the old one goes: the old
// connection deletes its member key only if nobody wrote it since.
func TestReconnectWithSameUUIDKeepsMembership(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) { c.RemoveGrace = -1 })
	room := newUUID()
	w := dialPeer(t, ts.tcp)
	w.join(JoinArgs{UUID: room})
	old := dialPeer(t, ts.tcp)
	old.join(JoinArgs{UUID: room})
	w.expect("PeerAdded")
	re := dialPeer(t, ts.tcp)
	re.uuid = old.uuid
	re.join(JoinArgs{UUID: room})
	w.barrier()
	old.c.Close()
	eventually(t, "the old connection gone", func() bool { return ts.s.Connections() == 2 })
	if n := countType(w.barrier(), "PeerRemoved"); n != 0 {
		t.Fatalf("the watcher was told %d times that the reconnected peer left", n)
	}
	late := dialPeer(t, ts.tcp)
	late.join(JoinArgs{UUID: room})
	eventually(t, "three member keys", func() bool { return countMembers(ts, room) == 3 })
	// PeerAdded follows SetRoom once the room has published its audience,
	// and a Ping's answer may overtake it: wait for both, then for none
	// more.
	told := map[string]bool{}
	for range 2 {
		var added struct {
			Peer PeerInfo `json:"peer"`
		}
		late.expect("PeerAdded").decode(t, &added)
		told[added.Peer.UUID] = true
	}
	if !told[w.uuid] || !told[old.uuid] {
		t.Fatalf("a late joiner was told of %v, want the watcher and the reconnected peer", told)
	}
	if n := countType(late.barrier(), "PeerAdded"); n != 0 {
		t.Fatalf("a late joiner was told of %d more peers", n)
	}
	re.c.Send(NetworkId{A: 5, B: 5}, []byte("hello"))
	if f := late.frame(); string(f.frame[HeaderSize:]) != "hello" {
		t.Fatalf("late joiner got %q", f.frame[HeaderSize:])
	}
}

// Malformed messages to the server (not JSON, an unknown type, arguments of
// the wrong shape, bad room ids) are ignored with a log line; the peer stays
// connected and its next requests are answered.
func TestMalformedRequestsKeepTheConnection(t *testing.T) {
	ts := startServer(t, nil, nil)
	p := dialPeer(t, ts.tcp)
	p.join(JoinArgs{UUID: newUUID()})
	for _, m := range [][]byte{
		[]byte(`not json`),
		[]byte(`{"type":"Join","args":"{\"uuid\":5}"}`),
		[]byte(`{"type":"Join","args":"not json"}`),
		[]byte(`{"type":"AppendPeerProperties","args":"{\"keys\":\"x\"}"}`),
		[]byte(`{"type":"AppendPeerProperties","args":"{\"keys\":[\"xrealm.position\"],\"values\":[\"[1,2\"]}"}`),
		[]byte(`{"type":"SetObserved","args":"{\"rooms\":[\"not-a-uuid\",\"\"]}"}`),
		[]byte(`{"type":"Explode","args":"{}"}`),
		[]byte(`{"type":5}`),
	} { // (a frame too short to hold a message is a framing error: TestMalformedHeaderClosesOnlyThatConnection)
		if err := p.c.Send(ServerID, m); err != nil {
			t.Fatalf("send %q: %v", m, err)
		}
	}
	p.barrier() // answered: the connection is open and its requests are served
	if ts.s.Connections() != 1 {
		t.Fatalf("%d connections, want the peer's", ts.s.Connections())
	}
}
