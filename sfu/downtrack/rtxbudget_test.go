package downtrack

import (
	"fmt"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu/buffer"
)

// TestRetransmitBudget: a subscriber's down tracks share one
// RetransmitBudget; NACKs beyond it are not answered and are counted as
// limited, and the budget refills at its rate, up to a second's worth.
// Without the budget every NACK of a packet in the buffer is answered, and
// a subscriber that NACKs everything makes the node resend without bound.
func TestRetransmitBudget(t *testing.T) {
	const size = 100 // bytes a retransmission takes: 88 of payload and the RTP header
	payload := string(make([]byte, size-12))
	now := time.Unix(1000, 0)
	budget := NewRetransmitBudget(10*size, func() time.Time { return now }) // 10 packets a second
	type track struct {
		d   *DownTrack
		w   *fakeWriter
		buf *buffer.Buffer
	}
	var tracks []track
	for i := range 2 {
		buf, _ := buffer.New(64)
		d, err := New(Config{ID: fmt.Sprint("v", i), StreamID: "s", Codec: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, Buffer: buf, Retransmits: budget})
		if err != nil {
			t.Fatal(err)
		}
		w := &fakeWriter{}
		if _, err := d.Bind(fakeCtx{w: w}); err != nil {
			t.Fatal(err)
		}
		for seq := range uint16(40) {
			source(t, buf, seq, payload, d)
		}
		w.out = nil
		tracks = append(tracks, track{d, w, buf})
	}
	nackAll := func(d *DownTrack) {
		var seqs []uint16
		for seq := range uint16(40) {
			seqs = append(seqs, seq)
		}
		d.HandleRTCP([]rtcp.Packet{&rtcp.TransportLayerNack{Nacks: rtcp.NackPairsFromSequenceNumbers(seqs)}})
	}
	sent := func() int { return len(tracks[0].w.out) + len(tracks[1].w.out) }
	steps := []struct {
		name    string
		advance time.Duration
		track   int
		want    int // packets retransmitted so far, both tracks
	}{
		{"first burst: the full budget", 0, 0, 10},
		{"other track, same instant: none left", 0, 1, 10},
		{"half a second later: half refilled", 500 * time.Millisecond, 1, 15},
		{"ten seconds later: a second's worth, not ten", 10 * time.Second, 0, 25},
	}
	for _, st := range steps {
		now = now.Add(st.advance)
		nackAll(tracks[st.track].d)
		if got := sent(); got != st.want {
			t.Fatalf("%s: %d packets retransmitted in all, want %d", st.name, got, st.want)
		}
	}
	var limited, rtx uint64
	for _, tr := range tracks {
		s := tr.d.Stats()
		limited += s.LimitedNACKs
		rtx += s.Retransmits
	}
	if rtx != 25 || limited != 4*40-25 {
		t.Fatalf("retransmits %d, limited NACKs %d; want 25 and %d", rtx, limited, 4*40-25)
	}
}

// TestRetransmitBudgetBeforeFetch: with the subscriber's budget empty, a
// NACK of a packet missing from a relayed source's buffer is not asked
// from upstream (Source.OnMiss) and counts as limited. It fails if the
// budget is checked only once the packet is found: the node then asks the
// origin over the relay link for a packet it drops as limited.
func TestRetransmitBudgetBeforeFetch(t *testing.T) {
	now := time.Unix(1000, 0)
	budget := NewRetransmitBudget(100, func() time.Time { return now })
	buf, _ := buffer.New(64)
	d, err := New(Config{ID: "v", StreamID: "s", Codec: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, Buffer: buf, Retransmits: budget})
	if err != nil {
		t.Fatal(err)
	}
	var asked []uint16
	if err := d.SetSource(Source{Codec: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, Buffer: buf,
		OnMiss: func(seq uint16, _ *DownTrack) { asked = append(asked, seq) }}); err != nil {
		t.Fatal(err)
	}
	w := &fakeWriter{}
	if _, err := d.Bind(fakeCtx{w: w}); err != nil {
		t.Fatal(err)
	}
	payload := string(make([]byte, 88)) // 100 bytes with the header: the whole budget
	for seq := range uint16(10) {
		if seq == 5 {
			// sent to the subscriber but not in the buffer: lost on the relay link
			pkt := rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq}, Payload: []byte(payload)}
			if err := d.WriteRTP(&pkt.Header, pkt.Payload); err != nil {
				t.Fatal(err)
			}
			continue
		}
		source(t, buf, seq, payload, d)
	}
	w.out = nil
	nack := func(seq uint16) {
		d.HandleRTCP([]rtcp.Packet{&rtcp.TransportLayerNack{Nacks: rtcp.NackPairsFromSequenceNumbers([]uint16{seq})}})
	}
	nack(3) // takes the whole budget
	if len(w.out) != 1 {
		t.Fatalf("first NACK: %d retransmissions, want 1", len(w.out))
	}
	nack(5) // missing: would be fetched, but there is no room
	if len(asked) != 0 {
		t.Fatalf("with the budget empty, packets %v were asked from upstream", asked)
	}
	if s := d.Stats(); s.LimitedNACKs != 1 || s.Fetches != 0 {
		t.Fatalf("limited NACKs %d, fetches %d; want 1 and 0", s.LimitedNACKs, s.Fetches)
	}
	now = now.Add(time.Second)
	nack(5) // room again: fetched
	if len(asked) != 1 || asked[0] != 5 {
		t.Fatalf("with room again, asked upstream for %v, want [5]", asked)
	}
}
