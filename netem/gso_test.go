package netem

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// gsoPacket builds a read as the kernel delivers it: a virtio header and an
// IPv4 TCP packet with payload bytes 0, 1, 2, ... and the given flags.
func gsoPacket(payload, mss int, flags byte) *superPacket {
	sp := &superPacket{buf: make([]byte, readBufSize)}
	vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4, hdrLen: 52, gsoSize: uint16(mss), csumStart: 20, csumOffset: 16}.put(sp.buf)
	ip := sp.buf[vnetHdrLen:]
	e := binary.BigEndian
	ip[0] = 0x45
	e.PutUint16(ip[2:], uint16(52+payload))
	e.PutUint16(ip[4:], 100) // ID
	ip[8], ip[9] = 64, 6
	copy(ip[12:], []byte{10, 64, 0, 1, 10, 64, 0, 2})
	tcp := ip[20:]
	e.PutUint32(tcp[4:], 1000) // seq
	tcp[12] = 8 << 4           // 32-byte header (timestamps)
	tcp[13] = flags
	for i := range payload {
		ip[52+i] = byte(i)
	}
	sp.n = vnetHdrLen + 52 + payload
	sp.parse()
	return sp
}

func TestGSOSegments(t *testing.T) {
	const mss = 1448
	sp := gsoPacket(4*mss+100, mss, 0x18|0x01|0x80) // ACK PSH FIN CWR
	if sp.nseg != 5 {
		t.Fatalf("nseg = %d, want 5", sp.nseg)
	}
	for i, want := range []int{1500, 1500, 1500, 1500, 152} {
		if got := sp.segSize(i); got != want {
			t.Errorf("segSize(%d) = %d, want %d", i, got, want)
		}
	}
	tests := []struct {
		i, j      int
		gso       bool
		flags     byte
		seq, id   uint32
		payloadAt int
		payload   int
	}{
		{0, 2, true, 0x18 | 0x80&^0x08, 1000, 100, 0, 2 * mss},
		{2, 3, false, 0x10, 1000 + 2*mss, 102, 2 * mss, mss},
		{3, 5, true, 0x18 | 0x01, 1000 + 3*mss, 103, 3 * mss, mss + 100},
	}
	for _, tc := range tests {
		b := sp.run(tc.i, tc.j)
		vh := parseVnetHdr(b)
		if (vh.gsoType == vnetGSOTCPv4) != tc.gso || vh.flags != vnetNeedsCsum || vh.csumStart != 20 || vh.csumOffset != 16 {
			t.Errorf("run %d-%d: virtio header %+v", tc.i, tc.j, vh)
		}
		if tc.gso && vh.gsoSize != mss {
			t.Errorf("run %d-%d: gso size %d", tc.i, tc.j, vh.gsoSize)
		}
		ip := b[vnetHdrLen:]
		e := binary.BigEndian
		if got := int(e.Uint16(ip[2:])); got != 52+tc.payload || len(ip) != got {
			t.Errorf("run %d-%d: IP length %d, bytes %d, want %d", tc.i, tc.j, got, len(ip), 52+tc.payload)
		}
		if csumFold(csumAdd(0, ip[:20])) != 0xffff {
			t.Errorf("run %d-%d: bad IP header checksum", tc.i, tc.j)
		}
		if got := uint32(e.Uint16(ip[4:])); got != tc.id {
			t.Errorf("run %d-%d: IP ID %d, want %d", tc.i, tc.j, got, tc.id)
		}
		tcp := ip[20:]
		if got := e.Uint32(tcp[4:]); got != tc.seq {
			t.Errorf("run %d-%d: seq %d, want %d", tc.i, tc.j, got, tc.seq)
		}
		wantFlags := tc.flags
		if tc.i == 0 {
			wantFlags = 0x10 | 0x80 // the first run keeps CWR and loses PSH and FIN
		}
		if tcp[13] != wantFlags {
			t.Errorf("run %d-%d: flags %#x, want %#x", tc.i, tc.j, tcp[13], wantFlags)
		}
		want := make([]byte, tc.payload)
		for k := range want {
			want[k] = byte(tc.payloadAt + k)
		}
		if !bytes.Equal(ip[52:], want) {
			t.Errorf("run %d-%d: payload differs", tc.i, tc.j)
		}
	}
}

func TestGSONonTCPIsOnePacket(t *testing.T) {
	sp := &superPacket{buf: make([]byte, readBufSize), n: vnetHdrLen + 84}
	sp.buf[vnetHdrLen] = 0x45
	sp.buf[vnetHdrLen+9] = 1 // ICMP
	sp.parse()
	if sp.nseg != 1 || sp.segSize(0) != 84 || len(sp.run(0, 1)) != vnetHdrLen+84 {
		t.Errorf("nseg %d size %d run %d, want one 84-byte packet written as read", sp.nseg, sp.segSize(0), len(sp.run(0, 1)))
	}
}
