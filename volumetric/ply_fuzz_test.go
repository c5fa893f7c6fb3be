package volumetric

import (
	"bufio"
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// declaredVertices returns the vertex count DecodePLY's header loop would
// read from in, or -1.
func declaredVertices(in []byte) int {
	br := bufio.NewReader(bytes.NewReader(in))
	n := -1
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return n
		}
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "element" && f[1] == "vertex" {
			if v, err := strconv.Atoi(f[2]); err == nil {
				n = v
			}
		}
		if len(f) > 0 && f[0] == "end_header" {
			return n
		}
	}
}

// FuzzDecodePLY: a PLY file is refused with an error, or gives exactly the
// vertices its header declares, which the input must have room for; the
// cloud it gives survives EncodePLY and DecodePLY unchanged.
// The decoder's memory grows with the points it reads, not with the count
// a header declares, so no input is skipped.
func FuzzDecodePLY(f *testing.F) {
	cloud := Cloud{{X: 1, Y: -2, Z: 3.5, R: 255, G: 1}, {X: float32(math.Inf(1)), B: 7}, {}}
	f.Add(EncodePLY(cloud))
	f.Add(EncodePLY(nil))
	f.Add([]byte("ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nproperty uchar red\nend_header\n1 2 3 4\n-1 -2 -3 300\n"))
	f.Add([]byte("ply\nformat ascii 1.0\nelement vertex 1\nproperty double x\nproperty int y\nend_header\n1e40 2.5"))
	f.Add([]byte("ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty double x\nproperty short y\nproperty uint z\nproperty char nx\nend_header\n\x00\x00\x00\x00\x00\x00\xf0\x3f\xff\xff\x01\x00\x00\x00\x80"))
	f.Add([]byte("ply\nformat binary_little_endian 1.0\nelement vertex 9\nproperty float x\nend_header\n\x00\x00"))
	f.Add([]byte("ply\nformat binary_big_endian 1.0\nelement vertex 1\nproperty float x\nend_header\n\x00\x00\x00\x00"))
	f.Add([]byte("ply\nformat ascii 1.0\nelement face 1\nproperty list uchar int vertex_indices\nelement vertex 0\nend_header\n"))
	f.Add([]byte("ply\nformat ascii 1.0\nelement vertex -1\nend_header\n"))
	f.Add([]byte("ply\nformat ascii 1.0\nelement vertex 1\nproperty list uchar int x\nend_header\n"))
	f.Add([]byte("ply\nformat ascii 1.0\nend_header\n"))
	f.Add([]byte("ply\n"))
	f.Add([]byte("ply\nformat ascii 1.0\nelement vertex 4611686018427387904\nproperty float x\nproperty float y\nproperty float z\nend_header\n"))
	f.Add([]byte("ply\nformat binary_little_endian 1.0\nelement vertex 100000\nend_header\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		n := declaredVertices(in)
		c, err := DecodePLY(bytes.NewReader(in))
		if err != nil {
			if c != nil {
				t.Fatalf("DecodePLY returned %d points with error %v", len(c), err)
			}
			return
		}
		if len(c) != n {
			t.Fatalf("header declares %d vertices, DecodePLY returned %d", n, len(c))
		}
		if len(c) > len(in) {
			t.Fatalf("%d vertices from %d bytes", len(c), len(in))
		}
		back, err := DecodePLY(bytes.NewReader(EncodePLY(c)))
		if err != nil || len(back) != len(c) {
			t.Fatalf("re-encoded cloud of %d points decodes as %d, %v", len(c), len(back), err)
		}
		for i := range c {
			a, b := c[i], back[i]
			if math.Float32bits(a.X) != math.Float32bits(b.X) || math.Float32bits(a.Y) != math.Float32bits(b.Y) || math.Float32bits(a.Z) != math.Float32bits(b.Z) || a.R != b.R || a.G != b.G || a.B != b.B {
				t.Fatalf("point %d %+v reads back as %+v", i, a, b)
			}
		}
	})
}

// FuzzFrameTracker pushes the fuzz input as RTP payloads of a point-cloud
// track (each a length byte and that many bytes) through a node's frame
// tracker, a millisecond apart. A description completes at most once, and
// only once every fragment below its count arrived; every completion is
// counted; the tracker stays within its bounds, and before any deadline
// only the descriptions it evicted count as expired; and when the deadline
// has passed for all, every description that did not complete counts as
// expired (while the tracker could remember them all as finished).
func FuzzFrameTracker(f *testing.F) {
	frags, _ := Packetize(Header{Client: 1, Frame: 2, Description: 1, CaptureUs: 500}, bytes.Repeat([]byte("pc"), 100), 80)
	var stream []byte
	for i, p := range frags {
		if i == 1 {
			stream = append(append(stream, byte(len(p))), p...) // a retransmission
		}
		stream = append(append(stream, byte(len(p))), p...)
	}
	f.Add(stream)
	odd := make([]byte, HeaderSize)
	Header{Client: 1, Frame: 3, Fragment: 1, Count: 3}.Marshal(odd)
	other := make([]byte, HeaderSize)
	Header{Client: 1, Frame: 3, Fragment: 0, Count: 2}.Marshal(other)
	f.Add([]byte(string(rune(len(odd))) + string(odd) + string(rune(len(other))) + string(other)))
	// headers that each announce 65535 fragments: more than the pending
	// bitmaps' bound holds, so the first ones are evicted
	var hostile []byte
	for i := range MaxTrackedPendingBytes/8192 + 8 {
		p := make([]byte, HeaderSize)
		Header{Client: 2, Frame: uint32(i), Count: 65535}.Marshal(p)
		hostile = append(append(hostile, byte(len(p))), p...)
	}
	f.Add(hostile)
	f.Fuzz(func(t *testing.T, stream []byte) {
		const deadline = time.Hour // nothing expires while the stream is pushed
		tr := NewFrameTracker(deadline, 64)
		now := time.Unix(1000, 0)
		seen := map[fragKey]map[uint16]bool{}
		completed := map[fragKey]bool{}
		for len(stream) > 0 {
			n := int(stream[0])
			stream = stream[1:]
			p := stream[:min(n, len(stream))]
			stream = stream[len(p):]
			now = now.Add(time.Millisecond)
			h, lat, done := tr.Observe(now, p)
			checkBounds(t, tr)
			ph, _, err := ParseHeader(p)
			if err != nil {
				if done {
					t.Fatalf("a payload that is not a fragment (%v) completed a description", err)
				}
				continue
			}
			k := fragKey{ph.Client, ph.Frame, ph.Description}
			if seen[k] == nil {
				seen[k] = map[uint16]bool{}
			}
			seen[k][ph.Fragment] = true
			if !done {
				continue
			}
			if h != ph {
				t.Fatalf("completion reports header %+v for a payload with %+v", h, ph)
			}
			if completed[k] && len(seen) <= MaxTrackedDone { // else it may have been forgotten
				t.Fatalf("description %+v completed twice", k)
			}
			completed[k] = true
			for i := uint16(0); i < h.Count; i++ {
				if !seen[k][i] {
					t.Fatalf("description %+v completed with %d fragments but fragment %d never arrived", k, h.Count, i)
				}
			}
			if want := now.Sub(time.UnixMicro(int64(h.CaptureUs))); lat != want {
				t.Fatalf("latency %v, want %v", lat, want)
			}
		}
		st := tr.Stats(now)
		if st.Complete != uint64(len(completed)) || st.Expired != st.Evicted {
			t.Fatalf("stats %+v before any deadline; %d completions returned", st, len(completed))
		}
		st = tr.Stats(now.Add(2 * deadline))
		if len(seen) > MaxTrackedDone {
			return // finished descriptions were forgotten: a late fragment may count one twice
		}
		if st.Complete != uint64(len(completed)) || st.Expired != uint64(len(seen)-len(completed)) {
			t.Fatalf("stats %+v after every deadline; %d descriptions seen, %d completed", st, len(seen), len(completed))
		}
	})
}
