package sfu

import (
	"sync"
	"testing"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
)

func rrs(n int) []rtcp.Packet {
	out := make([]rtcp.Packet, n)
	for i := range out {
		out[i] = &rtcp.ReceiverReport{SSRC: 1000 + uint32(i), Reports: []rtcp.ReceptionReport{{SSRC: uint32(i + 1), LastSenderReport: uint32(i), Delay: 7}}}
	}
	return out
}

func srs(n int) []rtcp.Packet {
	out := make([]rtcp.Packet, n)
	for i := range out {
		out[i] = &rtcp.SenderReport{SSRC: uint32(i + 1), NTPTime: uint64(i), PacketCount: 3}
	}
	return out
}

func TestCompoundReports(t *testing.T) {
	for _, tc := range []struct {
		name              string
		in                []rtcp.Packet
		compounds, blocks int
		srs               int
	}{
		{"one RR", rrs(1), 1, 1, 0},
		{"31 RRs in one RR", rrs(31), 1, 31, 0},
		{"63 RRs in two compounds", rrs(63), 2, 63, 0},
		{"63 SRs stacked", srs(63), 2, 0, 63},
		{"SRs and RRs", append(srs(20), rrs(40)...), 2, 40, 20},
		{"nothing", nil, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := CompoundReports(tc.in, BatchBytes)
			if len(out) != tc.compounds {
				t.Fatalf("%d compounds, want %d", len(out), tc.compounds)
			}
			seen := map[uint32]bool{}
			nsr := 0
			for _, c := range out {
				raw, err := rtcp.Marshal(c)
				if err != nil {
					t.Fatal(err)
				}
				if len(raw) > BatchBytes {
					t.Errorf("compound of %d bytes", len(raw))
				}
				back, err := rtcp.Unmarshal(raw)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range back {
					switch p := p.(type) {
					case *rtcp.ReceiverReport:
						if len(p.Reports) > maxReportBlocks {
							t.Errorf("RR with %d blocks", len(p.Reports))
						}
						for _, r := range p.Reports {
							if seen[r.SSRC] || r.LastSenderReport != r.SSRC-1 || r.Delay != 7 {
								t.Errorf("block %+v duplicated or changed", r)
							}
							seen[r.SSRC] = true
						}
					case *rtcp.SenderReport:
						nsr++
					}
				}
			}
			if len(seen) != tc.blocks || nsr != tc.srs {
				t.Errorf("%d blocks, %d SRs; want %d, %d", len(seen), nsr, tc.blocks, tc.srs)
			}
		})
	}
}

type rtcpRecorder struct {
	mu     sync.Mutex
	writes [][]rtcp.Packet
}

func (r *rtcpRecorder) Write(p []rtcp.Packet, _ interceptor.Attributes) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, p)
	r.mu.Unlock()
	return 0, nil
}

func (r *rtcpRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.writes)
}

func TestRTCPBatcher(t *testing.T) {
	i, err := RTCPBatcherFactory{Window: 20 * time.Millisecond}.NewInterceptor("")
	if err != nil {
		t.Fatal(err)
	}
	rec := &rtcpRecorder{}
	w := i.BindRTCPWriter(rec)
	// a report round as pion's interceptors write it: one packet per stream
	for _, p := range rrs(63) {
		if _, err := w.Write([]rtcp.Packet{p}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// other RTCP is not held back
	if _, err := w.Write([]rtcp.Packet{&rtcp.TransportLayerNack{MediaSSRC: 5}}, nil); err != nil {
		t.Fatal(err)
	}
	if n := rec.count(); n != 1 {
		t.Fatalf("%d writes before the window ended, want the NACK alone", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rec.count() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := rec.count(); n != 3 {
		t.Fatalf("%d writes, want the NACK and 2 compounds", n)
	}
}
