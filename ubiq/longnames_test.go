package ubiq

import (
	"errors"
	"strings"
	"testing"
)

// A peer's uuid and a blob's uuid, chosen by the peer, become parts of
// key-value keys, whose subjects a NATS connection carries on one protocol
// line of at most 4 KiB: before, one Join or GetBlob with a 6,000-byte
// uuid made the server close the Ubiq server's bus connection for good
// (and xrealm serve then fails the node). Names over their bound are
// refused without asking the bus; the connection stays up, and the
// longest name allowed still works.
func TestLongNamesKeepTheBusConnection(t *testing.T) {
	ts := startServer(t, nil, nil)
	long := strings.Repeat("a", 6000)
	p := dialPeer(t, ts.tcp)
	info := p.info(nil, nil)
	info.UUID = long
	p.request("Join", JoinArgs{UUID: newUUID(), Peer: info})
	var rej RejectedArgs
	p.expect("Rejected").decode(t, &rej)
	if !strings.Contains(rej.Reason, "peer uuid of 6000 bytes") {
		t.Errorf("Rejected %q, want the reason", rej.Reason)
	}
	p.join(JoinArgs{UUID: newUUID()})
	p.request("SetBlob", SetBlobArgs{UUID: long, Blob: "x"})
	p.request("GetBlob", GetBlobArgs{ClientID: p.clientID, UUID: long})
	var b BlobArgs
	p.expect("Blob").decode(t, &b)
	if b.Blob != "" {
		t.Errorf("GetBlob of a name too long: %q", b.Blob)
	}
	if !ts.nc.IsConnected() {
		t.Fatalf("the Ubiq server's bus connection closed: %v", ts.nc.LastError())
	}

	// At the bound (escaped, as no plain key token: the longest key).
	most := strings.Repeat("é", MaxNameLen/2)
	p.request("SetBlob", SetBlobArgs{UUID: most, Blob: "y"})
	p.request("GetBlob", GetBlobArgs{ClientID: p.clientID, UUID: most})
	p.expect("Blob").decode(t, &b)
	if b.Blob != "y" {
		t.Errorf("blob with a name of %d bytes: %q, want y", len(most), b.Blob)
	}
	q := dialPeer(t, ts.tcp)
	qi := q.info(nil, nil)
	qi.UUID = strings.Repeat("é", MaxPeerUUIDLen/2) // the longest peer uuid, escaped
	q.join(JoinArgs{UUID: newUUID(), Peer: qi})
	if !ts.nc.IsConnected() {
		t.Fatalf("the Ubiq server's bus connection closed: %v", ts.nc.LastError())
	}
	var ne *NameError
	if err := checkName("blob uuid", most+"a", MaxNameLen); !errors.As(err, &ne) {
		t.Errorf("a name one byte over: %v", err)
	}
}
