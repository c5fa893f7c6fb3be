package interest

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sort"
	"testing"
	"time"
)

func TestCellOfAndCentre(t *testing.T) {
	g := Grid{Size: 20}
	for _, c := range []Cell{{0, 0}, {1, 0}, {0, 1}, {-3, 2}, {5, -7}} {
		if got := g.CellOf(g.Centre(c)); got != c {
			t.Errorf("CellOf(Centre(%v)) = %v", c, got)
		}
	}
	// Points just inside a cell's inner radius stay in it.
	inner := 20 * math.Sqrt(3) / 2 * 0.99
	for a := 0.0; a < 2*math.Pi; a += 0.3 {
		p := Vec3{X: inner * math.Cos(a), Z: inner * math.Sin(a)}
		if got := g.CellOf(p); got != (Cell{}) {
			t.Errorf("CellOf(%v) = %v, want origin cell", p, got)
		}
	}
}

func TestRing(t *testing.T) {
	for r := 0; r <= 3; r++ {
		cells := Ring(Cell{2, -1}, r)
		if len(cells) != 3*r*(r+1)+1 {
			t.Fatalf("radius %d: %d cells", r, len(cells))
		}
		if cells[0] != (Cell{2, -1}) {
			t.Fatalf("first cell %v", cells[0])
		}
		seen := map[Cell]bool{}
		for _, c := range cells {
			if seen[c] || Distance(c, Cell{2, -1}) > r {
				t.Fatalf("radius %d: bad or repeated cell %v", r, c)
			}
			seen[c] = true
		}
	}
}

func TestCellRoomID(t *testing.T) {
	shard := [16]byte{1, 2, 3}
	a := CellRoomID(shard, Cell{1, 2})
	if a != CellRoomID(shard, Cell{1, 2}) {
		t.Fatal("not deterministic")
	}
	if a == CellRoomID(shard, Cell{2, 1}) || a == CellRoomID([16]byte{9}, Cell{1, 2}) {
		t.Fatal("different cells or shards share an id")
	}
	if a[6]>>4 != 5 || a[8]>>6 != 2 {
		t.Fatalf("not an RFC 4122 v5 UUID: %s", FormatUUID(a))
	}
	if s := FormatUUID(a); len(s) != 36 || s[14] != '5' {
		t.Fatalf("FormatUUID = %s", s)
	}
}

func bruteKNN(pos map[string]Vec3, obs string, k int) []string {
	type d struct {
		id string
		d  float64
	}
	var ds []d
	for id, p := range pos {
		if id != obs {
			dx, dz := pos[obs].X-p.X, pos[obs].Z-p.Z
			ds = append(ds, d{id, dx*dx + dz*dz})
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].d < ds[j].d })
	var out []string
	for i := 0; i < k && i < len(ds); i++ {
		out = append(out, ds[i].id)
	}
	sort.Strings(out)
	return out
}

func TestKNNMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for _, n := range []int{1, 2, 5, 21, 300} {
		k := NewKNN(KNNConfig{K: 20, Hysteresis: -1})
		pos := map[string]Vec3{}
		for i := 0; i < n; i++ {
			id := string(rune('A'+i%26)) + string(rune('a'+i/26%26)) + string(rune('0'+i/676))
			p := Vec3{X: r.Float64() * 200, Y: r.Float64() * 2, Z: r.Float64() * 200}
			pos[id] = p
			k.Set(id, p)
		}
		k.Recompute(time.Now())
		for obs := range pos {
			got := k.Members(obs)
			sort.Strings(got)
			if want := bruteKNN(pos, obs, 20); !slices.Equal(got, want) {
				t.Fatalf("n=%d observer %s: got %v, want %v", n, obs, got, want)
			}
		}
	}
}

func TestKNNChangesAndHysteresis(t *testing.T) {
	k := NewKNN(KNNConfig{K: 1, Hysteresis: 500 * time.Millisecond})
	t0 := time.Unix(1000, 0)
	k.Set("a", Vec3{})
	k.Set("b", Vec3{X: 1})
	k.Set("c", Vec3{X: 10})
	ch := k.Recompute(t0)
	if len(ch) != 3 {
		t.Fatalf("first recompute: %d changes, want one per observer", len(ch))
	}
	if !k.Interested("a", "b") || k.Interested("a", "c") || !k.Interested("c", "b") {
		t.Fatal("wrong initial sets")
	}
	// Asymmetric: c's nearest is b, b's nearest is a.
	if k.Interested("b", "c") {
		t.Fatal("sets are not asymmetric")
	}
	// c moves next to a: a's nearest becomes c, but b stays for the
	// hysteresis period.
	k.Set("c", Vec3{X: -0.5})
	ch = k.Recompute(t0.Add(100 * time.Millisecond))
	if !k.Interested("a", "b") || !k.Interested("a", "c") {
		t.Fatal("b left a's set before the hysteresis period")
	}
	if !hasChange(ch, "a", "c", true) {
		t.Fatalf("a not told that c entered: %+v", ch)
	}
	ch = k.Recompute(t0.Add(400 * time.Millisecond))
	if !k.Interested("a", "b") {
		t.Fatal("b left after 300ms of a 500ms hysteresis")
	}
	if hasChange(ch, "a", "b", false) {
		t.Fatal("left reported early")
	}
	ch = k.Recompute(t0.Add(650 * time.Millisecond))
	if k.Interested("a", "b") || !hasChange(ch, "a", "b", false) {
		t.Fatalf("b still in a's set after the hysteresis period: %+v", ch)
	}
	// Nothing moves: no changes.
	if ch := k.Recompute(t0.Add(time.Second)); len(ch) != 0 {
		t.Fatalf("changes without movement: %+v", ch)
	}
	// A removed peer leaves at once.
	k.Remove("c")
	ch = k.Recompute(t0.Add(1100 * time.Millisecond))
	if k.Interested("a", "c") || !hasChange(ch, "a", "c", false) {
		t.Fatalf("removed peer still in a set: %+v", ch)
	}
	if len(k.Members("c")) != 0 {
		t.Fatal("removed observer keeps a set")
	}
}

func hasChange(chs []Change, obs, id string, entered bool) bool {
	for _, c := range chs {
		if c.Observer != obs {
			continue
		}
		list := c.Left
		if entered {
			list = c.Entered
		}
		if slices.Contains(list, id) {
			return true
		}
	}
	return false
}

// BenchmarkKNNRecompute10k: 10,000 peers in a 1 km square, each walking at
// 3 m/s, recomputed at 5 Hz (0.6 m per step); k = 20.
func BenchmarkKNNRecompute10k(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	k := NewKNN(KNNConfig{K: 20})
	const n = 10000
	pos := make([]Vec3, n)
	dir := make([]float64, n)
	ids := make([]string, n)
	for i := range pos {
		pos[i] = Vec3{X: r.Float64() * 1000, Z: r.Float64() * 1000}
		dir[i] = r.Float64() * 2 * math.Pi
		ids[i] = fmt.Sprintf("peer-%d", i)
		k.Set(ids[i], pos[i])
	}
	now := time.Now()
	k.Recompute(now)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for i := range pos {
			pos[i].X += 0.6 * math.Cos(dir[i])
			pos[i].Z += 0.6 * math.Sin(dir[i])
			k.Set(ids[i], pos[i])
		}
		now = now.Add(200 * time.Millisecond)
		k.Recompute(now)
	}
}

// TestKNNChurnMatchesBruteForce: over many recomputes with peers moving,
// leaving, joining, coming back (slots reused) and leaving and coming back
// between two recomputes, every set equals the brute-force k nearest
// (no hysteresis), and the reported changes, applied in order, rebuild
// the sets.
func TestKNNChurnMatchesBruteForce(t *testing.T) {
	const K = 5
	r := rand.New(rand.NewSource(11))
	k := NewKNN(KNNConfig{K: K, Hysteresis: -1})
	pos := map[string]Vec3{}
	mirror := map[string]map[string]bool{}
	name := func(i int) string { return fmt.Sprintf("p%03d", i) }
	place := func() Vec3 { return Vec3{X: r.Float64() * 50, Z: r.Float64() * 50} }
	for i := 0; i < 40; i++ {
		pos[name(i)] = place()
		k.Set(name(i), pos[name(i)])
	}
	now := time.Unix(0, 0)
	for round := 0; round < 60; round++ {
		for id, p := range pos {
			p.X += r.Float64()*4 - 2
			p.Z += r.Float64()*4 - 2
			pos[id] = p
			k.Set(id, p)
		}
		for i := 0; i < 3; i++ { // leave
			id := name(r.Intn(60))
			if _, ok := pos[id]; ok {
				delete(pos, id)
				k.Remove(id)
			}
		}
		for i := 0; i < 3; i++ { // join or come back
			id := name(r.Intn(60))
			pos[id] = place()
			k.Set(id, pos[id])
		}
		if round%4 == 1 { // leave and come back before the recompute
			for id := range pos {
				k.Remove(id)
				k.Remove(id)
				k.Set(id, pos[id])
				break
			}
		}
		now = now.Add(200 * time.Millisecond)
		for _, ch := range k.Recompute(now) {
			m := mirror[ch.Observer]
			if m == nil {
				m = map[string]bool{}
				mirror[ch.Observer] = m
			}
			for _, id := range ch.Entered {
				if m[id] {
					t.Fatalf("round %d: %s entered %s's set twice", round, id, ch.Observer)
				}
				m[id] = true
			}
			for _, id := range ch.Left {
				if !m[id] {
					t.Fatalf("round %d: %s left %s's set without entering", round, id, ch.Observer)
				}
				delete(m, id)
			}
		}
		if k.Len() != len(pos) {
			t.Fatalf("round %d: Len %d, want %d", round, k.Len(), len(pos))
		}
		for obs := range pos {
			got := k.Members(obs)
			sort.Strings(got)
			if want := bruteKNN(pos, obs, K); !slices.Equal(got, want) {
				t.Fatalf("round %d observer %s: got %v, want %v", round, obs, got, want)
			}
			var mir []string
			for id := range mirror[obs] {
				mir = append(mir, id)
			}
			sort.Strings(mir)
			if !slices.Equal(mir, got) {
				t.Fatalf("round %d observer %s: changes give %v, set is %v", round, obs, mir, got)
			}
		}
		for id := range mirror {
			if _, ok := pos[id]; !ok {
				if len(k.Members(id)) != 0 {
					t.Fatalf("round %d: removed observer %s keeps a set", round, id)
				}
				delete(mirror, id) // a removed observer's set is gone; it starts anew
			}
		}
	}
}

// TestKNNPeersWithoutPosition: peers added without a position have no set
// and fill, stably and after every positioned peer, the free places of the
// positioned observers' sets.
func TestKNNPeersWithoutPosition(t *testing.T) {
	k := NewKNN(KNNConfig{K: 2, Hysteresis: 500 * time.Millisecond})
	t0 := time.Unix(1000, 0)
	members := func(obs string) []string {
		m := k.Members(obs)
		sort.Strings(m)
		return m
	}
	k.Set("a", Vec3{})
	k.Add("b")
	k.Add("c")
	ch := k.Recompute(t0)
	if len(ch) != 1 || ch[0].Observer != "a" || !ch[0].First || len(ch[0].Entered) != 2 {
		t.Fatalf("first recompute: %+v, want a's first set only", ch)
	}
	if got := members("a"); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("a's set %v, want the peers without a position", got)
	}
	if !k.Positioned("a") || k.Positioned("b") || k.Interested("b", "a") || len(k.Members("b")) != 0 {
		t.Fatal("a peer without a position has a set")
	}
	// The set is full: another peer without a position does not displace
	// one that is in it.
	k.Add("d")
	k.Add("b") // already there: no change
	if ch := k.Recompute(t0.Add(100 * time.Millisecond)); len(ch) != 0 {
		t.Fatalf("changes %+v, want none", ch)
	}
	// A positioned peer takes a place: c, the later of the two, leaves
	// after the hysteresis period, b stays.
	k.Set("e", Vec3{X: 1000})
	ch = k.Recompute(t0.Add(200 * time.Millisecond))
	if !hasChange(ch, "a", "e", true) || !hasChange(ch, "e", "a", true) || !hasChange(ch, "e", "b", true) {
		t.Fatalf("changes %+v: e must enter a's set, and a and b e's", ch)
	}
	for _, c := range ch {
		if c.Observer == "e" && !c.First {
			t.Fatal("e's first set is not marked First")
		}
	}
	if got := members("a"); !slices.Equal(got, []string{"b", "c", "e"}) {
		t.Fatalf("a's set %v during c's hysteresis", got)
	}
	ch = k.Recompute(t0.Add(800 * time.Millisecond))
	if !hasChange(ch, "a", "c", false) || !slices.Equal(members("a"), []string{"b", "e"}) {
		t.Fatalf("changes %+v, a's set %v: c must have left", ch, members("a"))
	}
	// b gets a position: it keeps its place, now as a positioned peer, and
	// gets a set of its own.
	k.Set("b", Vec3{X: 1})
	ch = k.Recompute(t0.Add(900 * time.Millisecond))
	if !k.Positioned("b") || !slices.Equal(members("b"), []string{"a", "e"}) || !slices.Equal(members("a"), []string{"b", "e"}) {
		t.Fatalf("b's set %v, a's %v", members("b"), members("a"))
	}
	if hasChange(ch, "a", "b", false) {
		t.Fatal("b left a's set when it got its position")
	}
	// Removed and back without a position before a recompute: no set, and
	// no Change for it.
	k.Remove("b")
	k.Add("b")
	ch = k.Recompute(t0.Add(time.Second))
	if k.Positioned("b") || len(k.Members("b")) != 0 {
		t.Fatal("b back without a position keeps its set")
	}
	for _, c := range ch {
		if c.Observer == "b" {
			t.Fatalf("change for b without a position: %+v", c)
		}
	}
	if k.Len() != 5 {
		t.Fatalf("Len %d, want 5", k.Len())
	}
}

// TestKNNChurnWithoutPositions: as TestKNNChurnMatchesBruteForce, with
// peers that join without a position, get one later, or come back
// without one. A positioned observer's set is its k nearest positioned
// peers and, if fewer than k, as many peers without a position as fit;
// the changes, applied in order (a First change starting anew), rebuild
// the sets.
func TestKNNChurnWithoutPositions(t *testing.T) {
	const K = 4
	r := rand.New(rand.NewSource(5))
	k := NewKNN(KNNConfig{K: K, Hysteresis: -1})
	pos := map[string]Vec3{}
	loose := map[string]bool{}
	mirror := map[string]map[string]bool{}
	name := func(i int) string { return fmt.Sprintf("p%03d", i) }
	place := func() Vec3 { return Vec3{X: r.Float64() * 30, Z: r.Float64() * 30} }
	now := time.Unix(0, 0)
	for round := 0; round < 200; round++ {
		for i := 0; i < 2; i++ { // leave
			id := name(r.Intn(12))
			if _, ok := pos[id]; ok || loose[id] {
				delete(pos, id)
				delete(loose, id)
				k.Remove(id)
			}
		}
		for i := 0; i < 2; i++ { // join or move, with or without a position
			id := name(r.Intn(12))
			if r.Intn(3) == 0 {
				if _, ok := pos[id]; !ok {
					loose[id] = true
					k.Add(id)
				}
			} else {
				delete(loose, id)
				pos[id] = place()
				k.Set(id, pos[id])
			}
		}
		if round%5 == 2 { // leave and come back without a position
			for id := range pos {
				delete(pos, id)
				loose[id] = true
				k.Remove(id)
				k.Add(id)
				break
			}
		}
		now = now.Add(200 * time.Millisecond)
		for _, ch := range k.Recompute(now) {
			if ch.First {
				delete(mirror, ch.Observer)
			}
			m := mirror[ch.Observer]
			if m == nil {
				if !ch.First {
					t.Fatalf("round %d: %s's first change is not marked First", round, ch.Observer)
				}
				m = map[string]bool{}
				mirror[ch.Observer] = m
			}
			for _, id := range ch.Entered {
				if m[id] {
					t.Fatalf("round %d: %s entered %s's set twice", round, id, ch.Observer)
				}
				m[id] = true
			}
			for _, id := range ch.Left {
				if !m[id] {
					t.Fatalf("round %d: %s left %s's set without entering", round, id, ch.Observer)
				}
				delete(m, id)
			}
		}
		if k.Len() != len(pos)+len(loose) {
			t.Fatalf("round %d: Len %d, want %d", round, k.Len(), len(pos)+len(loose))
		}
		for id := range loose {
			if k.Positioned(id) || len(k.Members(id)) != 0 {
				t.Fatalf("round %d: %s has no position but a set", round, id)
			}
			delete(mirror, id)
		}
		for obs := range pos {
			if !k.Positioned(obs) {
				t.Fatalf("round %d: %s not positioned", round, obs)
			}
			var near, fill []string
			for _, id := range k.Members(obs) {
				if loose[id] {
					fill = append(fill, id)
				} else {
					near = append(near, id)
				}
			}
			sort.Strings(near)
			if want := bruteKNN(pos, obs, K); !slices.Equal(near, want) {
				t.Fatalf("round %d observer %s: positioned members %v, want %v", round, obs, near, want)
			}
			if want := min(K-len(near), len(loose)); len(fill) != want {
				t.Fatalf("round %d observer %s: %d members without a position, want %d", round, obs, len(fill), want)
			}
			got := k.Members(obs)
			sort.Strings(got)
			var mir []string
			for id := range mirror[obs] {
				mir = append(mir, id)
			}
			sort.Strings(mir)
			if !slices.Equal(mir, got) {
				t.Fatalf("round %d observer %s: changes give %v, set is %v", round, obs, mir, got)
			}
		}
		for id := range mirror {
			if _, ok := pos[id]; !ok {
				delete(mirror, id)
			}
		}
	}
}

// CellOf gives the cell whose centre is nearest, on both sides of the
// origin, on cell edges and corners (where either neighbour will do: its
// centre is as near) and far out.
func TestCellOfNearestCentre(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, size := range []float64{0.5, 20, 1e6} {
		g := Grid{Size: size}
		var pts []Vec3
		for range 20000 {
			span := []float64{3, 100, 1e9}[rng.Intn(3)] * size
			pts = append(pts, Vec3{X: (rng.Float64()*2 - 1) * span, Z: (rng.Float64()*2 - 1) * span})
		}
		// corners and edge midpoints of cells around the origin and at -40,17
		for _, c := range []Cell{{}, {-40, 17}, {3, -5}} {
			ctr := g.Centre(c)
			for k := range 6 {
				a := float64(k) * math.Pi / 3
				pts = append(pts,
					Vec3{X: ctr.X + size*math.Cos(a), Z: ctr.Z + size*math.Sin(a)},
					Vec3{X: ctr.X + size*math.Sqrt(3)/2*math.Cos(a+math.Pi/6), Z: ctr.Z + size*math.Sqrt(3)/2*math.Sin(a+math.Pi/6)})
			}
		}
		for _, p := range pts {
			got := g.CellOf(p)
			d := func(c Cell) float64 { ctr := g.Centre(c); return math.Hypot(p.X-ctr.X, p.Z-ctr.Z) }
			best := d(got)
			for _, c := range Ring(got, 2)[1:] {
				if dc := d(c); dc < best-1e-9*size*(1+math.Abs(p.X/size)+math.Abs(p.Z/size)) {
					t.Fatalf("size %g: CellOf(%v) = %v at %g from its centre, but %v is at %g", size, p, got, best, c, dc)
				}
			}
		}
	}
}
