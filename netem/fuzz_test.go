package netem

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// FuzzParseTrace checks that any input either fails with an error or gives
// a trace whose period, rate and opportunity times are sane.
func FuzzParseTrace(f *testing.F) {
	for _, s := range []string{"1\n1\n", "0\n3\n3\n7\n", "\n5\n\n10\n", "5\n3\n", "x", "4294967296\n", "18446744073709551615\n", "1\n9223372036854775807\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tr, err := ParseTrace("fuzz", strings.NewReader(s))
		if err != nil {
			if tr != nil {
				t.Fatalf("ParseTrace(%q) returned a trace with error %v", s, err)
			}
			// An error names the trace and fits a log line, whatever the input.
			if msg := err.Error(); !strings.Contains(msg, "trace fuzz") || len(msg) > 300 {
				t.Fatalf("ParseTrace(%q): error %q", s, msg)
			}
			return
		}
		if tr.Period() <= 0 || tr.Period() > MaxTraceMs*time.Millisecond {
			t.Fatalf("ParseTrace(%q): period %v", s, tr.Period())
		}
		if tr.Opportunities() <= 0 || tr.MeanRate() <= 0 {
			t.Fatalf("ParseTrace(%q): %d opportunities, rate %v", s, tr.Opportunities(), tr.MeanRate())
		}
		// Opportunity times never decrease, across the first periods too.
		n := uint64(tr.Opportunities())
		for k := uint64(1); k < 3*n && k < 1000; k++ {
			if tr.at(k) < tr.at(k-1) {
				t.Fatalf("ParseTrace(%q): opportunity %d at %d µs, before %d at %d µs", s, k, tr.at(k), k-1, tr.at(k-1))
			}
		}
		for _, us := range []uint64{0, 1, 999, 1000, 123456} {
			k := tr.firstAtOrAfter(us)
			if tr.at(k) < us || (k > 0 && tr.at(k-1) >= us) {
				t.Fatalf("ParseTrace(%q): firstAtOrAfter(%d) = %d", s, us, k)
			}
		}
	})
}

// FuzzParseLog checks that a malformed per-packet log line is an error that
// names its line, and that a parsed record has a non-negative size.
func FuzzParseLog(f *testing.F) {
	for _, s := range []string{"0 1000 1500\n", "0 -1 1500 tail\n", "1 2\n", "a b c\n", "0 1 -5\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := parseLog("fuzz", strings.NewReader(s), func(r LogRecord) {
			if r.Bytes < 0 {
				t.Fatalf("parseLog(%q): record %+v has a negative size", s, r)
			}
			if !r.Dropped && r.Reason != "" {
				t.Fatalf("parseLog(%q): delivered record %+v has a drop reason", s, r)
			}
		})
		if err != nil && !strings.HasPrefix(err.Error(), "netem: ") {
			t.Fatalf("parseLog(%q): error %q does not say where it came from", s, err)
		}
	})
}

// FuzzGSO reads any packet off a TUN device (a virtio header and an IP
// packet, which the emulated traffic fills) and writes it back in runs of
// segments, in order, as the emulator does. A packet that is not a
// well-formed IPv4 TCP GSO packet is one segment written as read. A GSO
// packet's segments carry its payload once, in order, at most mss bytes
// each; each run is an IPv4 packet whose length field is its size, whose
// header checksum holds and whose TCP sequence number is where its payload
// starts.
func FuzzGSO(f *testing.F) {
	mk := func(payload, mss int, hdrLen byte) []byte {
		sp := gsoPacket(payload, mss, 0x18)
		sp.buf[vnetHdrLen] = 0x40 | hdrLen
		return append([]byte(nil), sp.buf[:sp.n]...)
	}
	f.Add(mk(4*1448+100, 1448, 5), []byte{2, 1, 2})
	f.Add(mk(10, 1, 5), []byte{1, 1, 1, 3, 4})
	f.Add(mk(100, 7, 15), []byte{0})
	f.Add([]byte{0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0x45}, []byte{1})
	f.Fuzz(func(t *testing.T, read []byte, cuts []byte) {
		if len(read) <= vnetHdrLen || len(read) > readBufSize {
			return // the pump skips reads without a packet
		}
		sp := &superPacket{buf: make([]byte, readBufSize), n: len(read)}
		copy(sp.buf, read)
		sp.parse()
		if sp.nseg < 1 {
			t.Fatalf("%d segments", sp.nseg)
		}
		if sp.nseg == 1 {
			if sp.segSize(0) != len(read)-vnetHdrLen || !bytes.Equal(sp.run(0, 1), read) {
				t.Fatalf("a one-segment read is not written as read")
			}
			return
		}
		e := binary.BigEndian
		ip := read[vnetHdrLen:]
		payload := ip[sp.hdrs:]
		seq := e.Uint32(ip[sp.ipHL+4:])
		total := 0
		for i := range sp.nseg {
			size := sp.segSize(i)
			if size <= sp.hdrs || size > sp.hdrs+sp.mss {
				t.Fatalf("segment %d of %d: %d bytes with %d of headers and mss %d", i, sp.nseg, size, sp.hdrs, sp.mss)
			}
			total += size - sp.hdrs
		}
		if total != len(payload) {
			t.Fatalf("segments carry %d payload bytes of %d", total, len(payload))
		}
		var got []byte
		for i := 0; i < sp.nseg; {
			j := min(sp.nseg, i+1)
			if len(cuts) > 0 {
				j, cuts = min(sp.nseg, i+1+int(cuts[0]%8)), cuts[1:]
			}
			out := sp.run(i, j)
			oip := out[vnetHdrLen:]
			if n := int(e.Uint16(oip[2:])); n != len(oip) {
				t.Fatalf("run %d-%d: IP length field %d, %d bytes", i, j, n, len(oip))
			}
			if csumFold(csumAdd(0, oip[:sp.ipHL])) != 0xffff {
				t.Fatalf("run %d-%d: bad IP header checksum", i, j)
			}
			if s := e.Uint32(oip[sp.ipHL+4:]); s != seq+uint32(len(got)) {
				t.Fatalf("run %d-%d: sequence number %d, want %d", i, j, s, seq+uint32(len(got)))
			}
			got = append(got, oip[sp.hdrs:]...)
			i = j
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("the runs carry %d payload bytes, not the packet's %d", len(got), len(payload))
		}
	})
}
