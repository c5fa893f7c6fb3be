package netem

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// seqpacketPair returns a connected pair of non-blocking SOCK_SEQPACKET
// sockets, which keep message boundaries as a TUN device does.
func seqpacketPair(t *testing.T) (a, b int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// smallPacket is a read as the TUN device gives it: a virtio header with no
// offload and an IP packet of n bytes (not parsed beyond the header).
func smallPacket(i, n int) []byte {
	b := make([]byte, vnetHdrLen+n)
	ip := b[vnetHdrLen:]
	ip[0] = 0x45
	ip[9] = 17 // UDP: never segmented
	for j := 20; j < n; j++ {
		ip[j] = byte(i + j)
	}
	return b
}

// TestPumpSmallPacketsDoNotHoldReadBuffers queues many small packets behind
// a link that serves nothing for a while (as a slow trace with an unbounded
// or byte-limited queue does) and checks how much memory the queue holds,
// then that every packet leaves unchanged. It fails if each queued packet
// keeps its 64 KB read buffer: 2000 packets of 100 bytes then hold 131 MB.
func TestPumpSmallPacketsDoNotHoldReadBuffers(t *testing.T) {
	tr, err := ParseTrace("late", strings.NewReader("1000\n1000\n1000\n1000\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLink(LinkConfig{Trace: tr})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := seqpacketPair(t)
	outR, outW := seqpacketPair(t)
	p := &pump{name: "test", in: inR, out: outW, link: l, start: time.Now(), stop: new(atomic.Bool), log: slog.Default()}
	emit := func(pk *Packet, at uint64) { p.pending = append(p.pending, departure{pk, at}) }

	const n, size = 2000, 100
	var sent [][]byte
	for i := 0; i < n; {
		// The socket buffer holds a few hundred messages; read in batches.
		for k := 0; k < 100 && i < n; k, i = k+1, i+1 {
			b := smallPacket(i, size)
			if _, err := unix.Write(inW, b); err != nil {
				t.Fatalf("write packet %d: %v", i, err)
			}
			sent = append(sent, b)
		}
		if !p.readAll(emit) {
			t.Fatal("readAll failed")
		}
	}
	if got := l.QueueLen(); got != n {
		t.Fatalf("%d packets queued, want %d (the trace serves none before 1 s)", got, n)
	}
	held := map[*superPacket]bool{}
	var bytesHeld int
	for _, pk := range l.q[l.qh:] {
		if !held[pk.sp] {
			held[pk.sp] = true
			bytesHeld += cap(pk.sp.buf)
		}
	}
	if limit := n * smallBufSize; bytesHeld > limit {
		t.Fatalf("%d queued packets of %d bytes hold %d bytes of buffers, want at most %d", n, size, bytesHeld, limit)
	}

	// Serve everything (4 opportunities of 15 packets each a second, from
	// 1 s on) and check that every packet comes out unchanged, in order.
	buf := make([]byte, readBufSize)
	got := 0
	for now := uint64(0); l.QueueLen() > 0 || len(p.pending) > 0; now += 1000 {
		l.Advance(now, emit)
		p.release(now)
		for {
			m, err := unix.Read(outR, buf)
			if err == unix.EAGAIN {
				break
			}
			if err != nil {
				t.Fatalf("read packet %d: %v", got, err)
			}
			if got >= n || !bytes.Equal(buf[:m], sent[got]) {
				t.Fatalf("packet %d came out as %d bytes %x", got, m, buf[:min(m, 32)])
			}
			got++
		}
		if now > 60_000_000 {
			t.Fatalf("queue not drained: %d queued, %d pending", l.QueueLen(), len(p.pending))
		}
	}
	if got != n {
		t.Fatalf("%d of %d packets came out", got, n)
	}
	if got := len(p.freeSmall); got > maxFreeSmall {
		t.Fatalf("%d free small buffers kept, want at most %d", got, maxFreeSmall)
	}
}

// TestPumpReportCountsOnlyWrittenPackets stops a pump while a packet is in
// its fixed delay: the report must not count it as delivered (it was never
// written; "1 delivered, 0 writes" on xrealm netem ... -- true) but as in
// flight, and the keep-up check must judge only the written packets.
func TestPumpReportCountsOnlyWrittenPackets(t *testing.T) {
	l, err := NewLink(LinkConfig{Trace: constantTrace(t, 1), Delay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := seqpacketPair(t)
	outR, outW := seqpacketPair(t)
	p := &pump{name: "test", in: inR, out: outW, link: l, start: time.Now(), stop: new(atomic.Bool), log: slog.Default()}
	emit := func(pk *Packet, at uint64) { p.pending = append(p.pending, departure{pk, at}) }
	// Four packets of 1500 bytes: each takes a whole opportunity.
	for i := range 4 {
		if _, err := unix.Write(inW, smallPacket(i, 1500)); err != nil {
			t.Fatal(err)
		}
	}
	if !p.readAll(emit) {
		t.Fatal("readAll failed")
	}
	// Serve opportunities (one a millisecond) until three packets have left
	// the queue, then let the first two through the 50 ms delay: the third
	// is still in it and the fourth still queued.
	for now := l.q[len(l.q)-1].Enq; len(p.pending) < 3; now += 1000 {
		l.Advance(now, emit)
	}
	p.release(p.pending[1].at)
	buf := make([]byte, readBufSize)
	written := 0
	for {
		if _, err := unix.Read(outR, buf); err != nil {
			break
		}
		written++
	}
	r := p.report(0)
	t.Logf("report %+v", r)
	if r.Arrived != 4 || r.Delivered != 2 || r.InFlight != 1 || r.Queued != 1 || r.Writes != 2 || written != 2 {
		t.Errorf("arrived %d, delivered %d, in flight %d, queued %d, writes %d, %d read at the far end; want 4, 2, 1, 1, 2, 2",
			r.Arrived, r.Delivered, r.InFlight, r.Queued, r.Writes, written)
	}
	if r.DeliveredBytes != 3000 {
		t.Errorf("delivered bytes %d, want 3000 (two packets of 1500)", r.DeliveredBytes)
	}
	if sum := r.Delivered + r.InFlight + r.Queued + r.TailDrops + r.LossDrops; sum != r.Arrived {
		t.Errorf("delivered+in flight+queued+drops = %d, arrived %d", sum, r.Arrived)
	}
}

func TestKeptUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    DirectionReport
		ok   bool
	}{
		{"nothing", DirectionReport{}, true},
		{"one in flight, none written", DirectionReport{InFlight: 1}, true},
		{"on time", DirectionReport{LinkStats: LinkStats{Delivered: 1000}, Late: 10}, true},
		{"too many late", DirectionReport{LinkStats: LinkStats{Delivered: 1000}, Late: 11}, false},
		{"kernel drops", DirectionReport{LinkStats: LinkStats{Delivered: 1000}, KernelDrops: 1}, false},
		// The kernel dropped what the emulator never read: none written.
		{"kernel drops, none written", DirectionReport{KernelDrops: 5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []Report{{Up: tc.d}, {Down: tc.d}} {
				err := r.KeptUp()
				if (err == nil) != tc.ok {
					t.Errorf("%+v: KeptUp() = %v, want ok %v", r, err, tc.ok)
				}
			}
		})
	}
}
