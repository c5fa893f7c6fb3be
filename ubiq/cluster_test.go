package ubiq

import (
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/xrealm/xrealm/bus"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestCrossNodeRoom runs two clustered buses on loopback with a Ubiq
// server on each: peers on different nodes share rooms.
func TestCrossNodeRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start-up")
	}
	addrs := []string{freePort(t), freePort(t)}
	natsAddrs := []string{freePort(t), freePort(t)}
	buses := make([]*bus.Bus, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range buses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buses[i], errs[i] = bus.Start(bus.Config{
				// Routing waits for a client listener: give each node one.
				DataDir: t.TempDir(), Name: fmt.Sprintf("n%d", i+1), Insecure: true, MaxPayload: 8 << 20, NATSAddr: natsAddrs[i],
				ClusterName: "ubiq-test", ClusterAddr: addrs[i], Routes: []string{"nats-route://" + addrs[1-i]},
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(buses[i].Shutdown)
	}
	s1 := startServer(t, buses[0], func(c *Config) { c.Bucket = "ubiq-cluster" })
	s2 := startServer(t, buses[1], func(c *Config) { c.Bucket = "ubiq-cluster" })

	a, b := dialPeer(t, s1.tcp), dialPeer(t, s2.ws)
	id := newUUID()
	r := a.join(JoinArgs{UUID: id, Name: "shared"})
	rb := b.join(JoinArgs{JoinCode: r.JoinCode})
	if rb.UUID != id || rb.Name != "shared" {
		t.Fatalf("node 2 joined %+v, want %s", rb, id)
	}
	var added struct {
		Peer PeerInfo `json:"peer"`
	}
	a.expect("PeerAdded").decode(t, &added)
	if added.Peer.UUID != b.uuid {
		t.Fatalf("node 1 peer saw %s", added.Peer.UUID)
	}
	b.expect("PeerAdded").decode(t, &added)
	if added.Peer.UUID != a.uuid {
		t.Fatalf("node 2 peer saw %s", added.Peer.UUID)
	}
	// Frames both ways.
	a.c.Send(NetworkId{A: 1, B: 2}, []byte("from node 1"))
	if f := b.frame(); string(f.frame[HeaderSize:]) != "from node 1" {
		t.Fatalf("node 2 got %q", f.frame[HeaderSize:])
	}
	b.c.Send(NetworkId{A: 3, B: 4}, []byte("from node 2"))
	if f := a.frame(); string(f.frame[HeaderSize:]) != "from node 2" {
		t.Fatalf("node 1 got %q", f.frame[HeaderSize:])
	}
	// Properties: room properties reach both (echo included), peer
	// properties reach the other node.
	b.request("AppendRoomProperties", PropertiesArgs{Keys: []string{"colour"}, Values: []string{"blue"}})
	a.expect("RoomPropertiesAppended")
	b.expect("RoomPropertiesAppended")
	a.request("AppendPeerProperties", PropertiesArgs{Keys: []string{"name"}, Values: []string{"ann"}})
	var upd PeerPropertiesArgs
	b.expect("PeerPropertiesAppended").decode(t, &upd)
	if upd.UUID != a.uuid || upd.Values[0] != "ann" {
		t.Fatalf("PeerPropertiesAppended %+v", upd)
	}
	// A late joiner on node 2 gets everything in SetRoom and PeerAdded.
	c := dialPeer(t, s2.tcp)
	rc := c.join(JoinArgs{UUID: id})
	if v, _ := (&props{Keys: rc.Keys, Values: rc.Values}).get("colour"); v != "blue" {
		t.Fatalf("late joiner's room properties %v=%v", rc.Keys, rc.Values)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		c.expect("PeerAdded").decode(t, &added)
		seen[added.Peer.UUID] = true
	}
	// Leaving on node 1 is seen on node 2.
	a.c.Close()
	var removed struct {
		UUID string `json:"uuid"`
	}
	b.expect("PeerRemoved").decode(t, &removed)
	if removed.UUID != a.uuid {
		t.Fatalf("PeerRemoved %s", removed.UUID)
	}
}
