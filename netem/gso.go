package netem

import (
	"encoding/binary"
)

// The emulator's TUN devices carry a virtio-net header before every packet
// (IFF_VNET_HDR) and accept TCP segmentation offload (TUNSETOFFLOAD), so the
// kernel hands over an IPv4 TCP flight of up to 64 KB in one read. The link
// still serves it as separate MTU-sized segments, each with its own queue
// slot, drop decision, log line and delivery time; the segments that leave
// together are written back in one write as a smaller GSO packet, which the
// receiving stack takes like a GRO-merged packet.

// vnetHdrLen is the size of struct virtio_net_hdr, the TUN default.
const vnetHdrLen = 10

const (
	vnetNeedsCsum = 1    // VIRTIO_NET_HDR_F_NEEDS_CSUM
	vnetGSONone   = 0    // VIRTIO_NET_HDR_GSO_NONE
	vnetGSOTCPv4  = 1    // VIRTIO_NET_HDR_GSO_TCPV4
	vnetGSOECN    = 0x80 // VIRTIO_NET_HDR_GSO_ECN
)

// maxHdrs bounds the IP and TCP header bytes of a super-packet (60 + 60).
const maxHdrs = 120

// readBufSize holds the largest GSO packet (64 KB) and its virtio header.
const readBufSize = 65536 + vnetHdrLen

type vnetHdr struct {
	flags, gsoType                         uint8
	hdrLen, gsoSize, csumStart, csumOffset uint16
}

// The header is in the host's byte order (legacy virtio on a TUN device
// without TUNSETVNETLE/BE).
func parseVnetHdr(b []byte) vnetHdr {
	e := binary.NativeEndian
	return vnetHdr{flags: b[0], gsoType: b[1], hdrLen: e.Uint16(b[2:]), gsoSize: e.Uint16(b[4:]),
		csumStart: e.Uint16(b[6:]), csumOffset: e.Uint16(b[8:])}
}

func (h vnetHdr) put(b []byte) {
	e := binary.NativeEndian
	b[0], b[1] = h.flags, h.gsoType
	e.PutUint16(b[2:], h.hdrLen)
	e.PutUint16(b[4:], h.gsoSize)
	e.PutUint16(b[6:], h.csumStart)
	e.PutUint16(b[8:], h.csumOffset)
}

// superPacket is one read from a TUN device: a virtio-net header followed by
// one IP packet, which for an IPv4 TCP GSO packet the link serves as nseg
// segments of at most mss payload bytes each.
type superPacket struct {
	buf  []byte // read buffer; buf[:n] was read
	n    int
	vh   vnetHdr
	ipHL int // IPv4 header length (GSO only)
	hdrs int // IP + TCP header length (GSO only)
	mss  int
	nseg int
	refs int // segments still queued or in flight
	// tmpl is the virtio header and the IP and TCP headers as read: the
	// template for each written run (the originals in buf get overwritten).
	tmpl [vnetHdrLen + maxHdrs]byte
}

// parse decides how many segments the read holds: one, unless it is a
// well-formed IPv4 TCP GSO packet.
func (sp *superPacket) parse() {
	sp.nseg, sp.hdrs, sp.ipHL, sp.mss = 1, 0, 0, 0
	sp.vh = parseVnetHdr(sp.buf)
	if sp.vh.gsoType&^vnetGSOECN != vnetGSOTCPv4 || sp.vh.gsoSize == 0 {
		return
	}
	ip := sp.buf[vnetHdrLen:sp.n]
	if len(ip) < 40 || ip[0]>>4 != 4 || ip[9] != 6 {
		return
	}
	ipHL := int(ip[0]&0x0f) * 4
	if ipHL < 20 || len(ip) < ipHL+20 {
		return
	}
	tcpHL := int(ip[ipHL+12]>>4) * 4
	hdrs := ipHL + tcpHL
	if tcpHL < 20 || hdrs > maxHdrs || len(ip) <= hdrs {
		return
	}
	sp.ipHL, sp.hdrs, sp.mss = ipHL, hdrs, int(sp.vh.gsoSize)
	sp.nseg = (len(ip) - hdrs + sp.mss - 1) / sp.mss
	copy(sp.tmpl[:], sp.buf[:vnetHdrLen+hdrs])
}

// segSize is the wire size of segment i.
func (sp *superPacket) segSize(i int) int {
	if sp.nseg == 1 {
		return sp.n - vnetHdrLen
	}
	payload := sp.n - vnetHdrLen - sp.hdrs
	return sp.hdrs + min(sp.mss, payload-i*sp.mss)
}

// run returns the bytes to write for segments [i, j) (virtio header
// included). For a GSO packet it builds the headers of that run in place,
// just before the run's payload; runs must be taken in increasing order,
// since the bytes before a run's payload belong to segments already sent.
func (sp *superPacket) run(i, j int) []byte {
	if sp.nseg == 1 {
		return sp.buf[:sp.n]
	}
	payload := sp.n - vnetHdrLen - sp.hdrs
	off, end := i*sp.mss, min(j*sp.mss, payload)
	dataAt := vnetHdrLen + sp.hdrs + off
	out := sp.buf[dataAt-vnetHdrLen-sp.hdrs : vnetHdrLen+sp.hdrs+end]
	copy(out, sp.tmpl[:vnetHdrLen+sp.hdrs])
	vh := vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSONone, hdrLen: uint16(sp.hdrs),
		csumStart: uint16(sp.ipHL), csumOffset: 16}
	if j-i > 1 {
		vh.gsoType, vh.gsoSize = sp.vh.gsoType, uint16(sp.mss)
	}
	vh.put(out)
	ip := out[vnetHdrLen:]
	e := binary.BigEndian
	tot := sp.hdrs + end - off
	e.PutUint16(ip[2:], uint16(tot))
	e.PutUint16(ip[4:], e.Uint16(ip[4:])+uint16(i)) // the IDs GSO would have given
	ip[10], ip[11] = 0, 0
	e.PutUint16(ip[10:], ^csumFold(csumAdd(0, ip[:sp.ipHL])))
	tcp := ip[sp.ipHL:]
	e.PutUint32(tcp[4:], e.Uint32(tcp[4:])+uint32(off))
	if i > 0 {
		tcp[13] &^= 0x80 // CWR only on the first segment
	}
	if j < sp.nseg {
		tcp[13] &^= 0x09 // FIN and PSH only on the last
	}
	// Partial checksum: the pseudo-header sum, which the receiver (or a
	// segmenting device) completes over csumStart onwards.
	s := csumAdd(0, ip[12:20])
	s += 6 + uint32(tot-sp.ipHL)
	e.PutUint16(tcp[16:], csumFold(s))
	return out
}

func csumAdd(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func csumFold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
