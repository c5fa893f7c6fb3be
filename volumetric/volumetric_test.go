package volumetric

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestSourceDeterministic(t *testing.T) {
	a := NewSource(7, 1000, 30).Frame(12)
	b := NewSource(7, 1000, 30).Frame(12)
	if len(a) != 1000 {
		t.Fatalf("len = %d, want 1000", len(a))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("point %d differs: %v vs %v", i, a[i], b[i])
		}
	}
	c := NewSource(7, 1000, 30).Frame(13)
	if a[500] == c[500] {
		t.Fatal("figure does not move between frames")
	}
	var minY, maxY float32 = math.MaxFloat32, -math.MaxFloat32
	for _, p := range a {
		minY, maxY = min(minY, p.Y), max(maxY, p.Y)
	}
	if h := maxY - minY; h < 1.5 || h > 2.1 {
		t.Fatalf("figure height %.2f m, want human-sized", h)
	}
}

func TestSplitMerge(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		shares [Descriptions]float64
		want   [Descriptions]int
		err    bool
	}{
		{"paper", 100000, DefaultShares, [Descriptions]int{15000, 25000, 60000}, false},
		{"small", 20, DefaultShares, [Descriptions]int{3, 5, 12}, false},
		{"even", 9, [Descriptions]float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, [Descriptions]int{3, 3, 3}, false},
		{"bad sum", 100, [Descriptions]float64{0.5, 0.5, 0.5}, [Descriptions]int{}, true},
		{"zero share", 100, [Descriptions]float64{0, 0.5, 0.5}, [Descriptions]int{}, true},
		{"NaN share", 100, [Descriptions]float64{math.NaN(), 0.5, 0.5}, [Descriptions]int{}, true},
		// 15 % of 3 points rounded to none: an empty description, which
		// Draco refuses to encode (xrealm bots pointcloud --points 3).
		{"three points", 3, DefaultShares, [Descriptions]int{1, 1, 1}, false},
		{"small share rounds to none", 10, [Descriptions]float64{0.02, 0.02, 0.96}, [Descriptions]int{1, 1, 8}, false},
		// Shares within the sum's tolerance whose first two pass 1: the
		// second bound was past the cloud, and Split panicked.
		{"first two shares pass 1", 10000, [Descriptions]float64{0.5, 0.5004, 0.0005}, [Descriptions]int{5000, 4999, 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp, err := NewSplitter(1, tt.n, tt.shares)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if err != nil {
				return
			}
			c := NewSource(3, tt.n, 30).Frame(0)
			parts, err := sp.Split(c)
			if err != nil {
				t.Fatal(err)
			}
			for d := range parts {
				if len(parts[d]) != tt.want[d] {
					t.Errorf("description %d has %d points, want %d", d, len(parts[d]), tt.want[d])
				}
			}
			merged := Merge(parts[:]...)
			if len(merged) != len(c) {
				t.Fatalf("merge has %d points, want %d", len(merged), len(c))
			}
			count := map[Point]int{}
			for _, p := range c {
				count[p]++
			}
			for _, p := range merged {
				count[p]--
			}
			for p, n := range count {
				if n != 0 {
					t.Fatalf("point %v off by %d after merge", p, n)
				}
			}
		})
	}
}

// TestSplitUniform checks that each description samples the whole figure:
// the share of head points in every description is close to the share in
// the whole cloud.
func TestSplitUniform(t *testing.T) {
	c := NewSource(5, 100000, 30).Frame(0)
	sp, err := NewSplitter(2, len(c), DefaultShares)
	if err != nil {
		t.Fatal(err)
	}
	parts, _ := sp.Split(c)
	headShare := func(c Cloud) float64 {
		n := 0
		for _, p := range c {
			if p.Y > 1.5 {
				n++
			}
		}
		return float64(n) / float64(len(c))
	}
	all := headShare(c)
	for d, p := range parts {
		if s := headShare(p); math.Abs(s-all) > 0.01 {
			t.Errorf("description %d head share %.3f, whole %.3f", d, s, all)
		}
	}
	if _, err := sp.Split(c[:10]); err == nil {
		t.Error("split of a cloud of the wrong size succeeded")
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Description: 2, Client: 0xdeadbeef, Frame: 77, Fragment: 3, Count: 9, CaptureUs: 123456789}
	b := make([]byte, HeaderSize+2)
	h.Marshal(b)
	got, data, err := ParseHeader(b)
	if err != nil || got != h || len(data) != 2 {
		t.Fatalf("got %+v %d %v, want %+v", got, len(data), err, h)
	}
	for _, bad := range [][]byte{b[:5], append([]byte{9}, b[1:]...)} {
		if _, _, err := ParseHeader(bad); err == nil {
			t.Errorf("ParseHeader(%x) succeeded", bad)
		}
	}
	if _, _, err := ParseHeader(b[:5]); !errors.Is(err, ErrShortPayload) {
		t.Errorf("short payload error %v", err)
	}
}

func TestPacketizeReassemble(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name      string
		size, mtu int
		shuffle   bool
		drop      int // fragment index to drop, -1 none
		dup       bool
		wantFrags int
		complete  bool
	}{
		{"one fragment", 100, 1200, false, -1, false, 1, true},
		{"exact multiple", 1178 * 4, 1200, false, -1, false, 4, true},
		{"many shuffled", 50000, 1200, true, -1, true, 43, true},
		{"empty", 0, 1200, false, -1, false, 1, true},
		{"lost fragment", 5000, 1200, true, 2, false, 5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := make([]byte, tt.size)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			frags, err := Packetize(Header{Client: 4, Frame: 10, Description: 1, CaptureUs: 5}, data, tt.mtu)
			if err != nil {
				t.Fatal(err)
			}
			if len(frags) != tt.wantFrags {
				t.Fatalf("%d fragments, want %d", len(frags), tt.wantFrags)
			}
			for _, f := range frags {
				if len(f) > tt.mtu {
					t.Fatalf("fragment of %d bytes exceeds mtu %d", len(f), tt.mtu)
				}
			}
			if tt.drop >= 0 {
				frags = append(frags[:tt.drop], frags[tt.drop+1:]...)
			}
			if tt.shuffle {
				rng.Shuffle(len(frags), func(i, j int) { frags[i], frags[j] = frags[j], frags[i] })
			}
			if tt.dup {
				frags = append(frags[:1], frags...)
			}
			r := NewReassembler(100 * time.Millisecond)
			var got *Description
			for i, f := range frags {
				d, err := r.Push(t0.Add(time.Duration(i)*time.Millisecond), f)
				if err != nil {
					t.Fatal(err)
				}
				if d != nil {
					got = d
				}
			}
			if tt.complete {
				if got == nil || !bytes.Equal(got.Data, data) || got.Client != 4 || got.Frame != 10 || got.Description != 1 {
					t.Fatalf("reassembled %+v, want the %d input bytes", got, len(data))
				}
				if r.Pending() != 0 {
					t.Fatalf("%d pending after completion", r.Pending())
				}
				return
			}
			if got != nil {
				t.Fatal("incomplete description was emitted")
			}
			if n := r.Expire(t0.Add(50 * time.Millisecond)); n != 0 {
				t.Fatalf("expired %d before the deadline", n)
			}
			if n := r.Expire(t0.Add(200 * time.Millisecond)); n != 1 || r.Stats().Expired != 1 {
				t.Fatalf("expired %d (stats %+v), want 1", n, r.Stats())
			}
			// a fragment arriving after expiry is late, not a new frame
			if d, _ := r.Push(t0.Add(201*time.Millisecond), frags[0]); d != nil || r.Stats().Late != 1 || r.Pending() != 0 {
				t.Fatalf("late fragment: %+v pending %d", r.Stats(), r.Pending())
			}
		})
	}
	if _, err := Packetize(Header{}, []byte{1}, HeaderSize); err == nil {
		t.Error("mtu without room succeeded")
	}
}

func TestMerger(t *testing.T) {
	m := NewMerger()
	want := [Descriptions]bool{true, false, true}
	if _, ok := m.Add(1, 1, 0, Cloud{{X: 1}}, want); ok {
		t.Fatal("merged before description 2 arrived")
	}
	c, ok := m.Add(1, 1, 2, Cloud{{X: 2}, {X: 3}}, want)
	if !ok || len(c) != 3 {
		t.Fatalf("merged %v %v, want 3 points", c, ok)
	}
	m.Add(1, 2, 1, Cloud{{X: 4}}, [Descriptions]bool{true, true, true})
	if c := m.Flush(1, 2); len(c) != 1 {
		t.Fatalf("flush gave %d points, want 1", len(c))
	}
}

func TestDracoRoundTrip(t *testing.T) {
	d, err := NewDraco()
	if errors.Is(err, ErrNoDraco) {
		t.Skip("skipping: Google Draco tools missing; run scripts/setup-sfu.sh (Debian package draco)")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := NewSource(1, 20000, 30).Frame(5)
	sp, _ := NewSplitter(1, len(c), DefaultShares)
	parts, _ := sp.Split(c)
	var decoded [Descriptions]Cloud
	ctx := context.Background()
	for i, p := range parts {
		b, err := d.Encode(ctx, "t", p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) >= len(p)*15 {
			t.Errorf("description %d: %d bytes for %d points, no compression", i, len(b), len(p))
		}
		decoded[i], err = d.Decode(ctx, "t", b)
		if err != nil {
			t.Fatal(err)
		}
		if len(decoded[i]) != len(p) {
			t.Fatalf("description %d decoded %d points, want %d", i, len(decoded[i]), len(p))
		}
	}
	merged := Merge(decoded[:]...)
	// 11-bit quantisation over a ~1.8 m box: error below 1.8/2048*1.5 m.
	var minY, maxY float32 = math.MaxFloat32, -math.MaxFloat32
	for _, p := range merged {
		minY, maxY = min(minY, p.Y), max(maxY, p.Y)
	}
	var cmin, cmax float32 = math.MaxFloat32, -math.MaxFloat32
	for _, p := range c {
		cmin, cmax = min(cmin, p.Y), max(cmax, p.Y)
	}
	if math.Abs(float64(minY-cmin)) > 0.002 || math.Abs(float64(maxY-cmax)) > 0.002 {
		t.Fatalf("decoded height range [%v,%v], source [%v,%v]", minY, maxY, cmin, cmax)
	}
}
