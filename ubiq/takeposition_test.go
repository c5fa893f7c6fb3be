package ubiq

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/interest"
)

func TestTakePosition(t *testing.T) {
	P := PositionKey
	for _, tc := range []struct {
		name         string
		keys, values []string
		wantK, wantV []string
		want         interest.Vec3
		wantOK       bool
	}{
		{"none", []string{"a"}, []string{"1"}, []string{"a"}, []string{"1"}, interest.Vec3{}, false},
		{"only", []string{P}, []string{"1,2,3"}, []string{}, []string{}, interest.Vec3{X: 1, Y: 2, Z: 3}, true},
		{"between", []string{"a", P, "b"}, []string{"1", "1,2,3", "2"}, []string{"a", "b"}, []string{"1", "2"}, interest.Vec3{X: 1, Y: 2, Z: 3}, true},
		{"last valid wins", []string{P, P, P}, []string{"1,1,1", "2,2,2", "bad"}, []string{}, []string{}, interest.Vec3{X: 2, Y: 2, Z: 2}, true},
		{"none valid", []string{P, "a"}, []string{"bad", "1"}, []string{"a"}, []string{"1"}, interest.Vec3{}, false},
		{"key without value kept", []string{"a", P, P}, []string{"1", "0,0,1"}, []string{"a", P}, []string{"1"}, interest.Vec3{Z: 1}, true},
		{"value without key kept", []string{P}, []string{"0,0,1", "x"}, []string{}, []string{"x"}, interest.Vec3{Z: 1}, true},
	} {
		keys, values := slices.Clone(tc.keys), slices.Clone(tc.values)
		k, v, p, ok := takePosition(keys, values)
		if fmt.Sprint(k) != fmt.Sprint(tc.wantK) || fmt.Sprint(v) != fmt.Sprint(tc.wantV) || p != tc.want || ok != tc.wantOK {
			t.Errorf("%s: takePosition(%q, %q) = %q, %q, %v, %v; want %q, %q, %v, %v", tc.name, tc.keys, tc.values, k, v, p, ok, tc.wantK, tc.wantV, tc.want, tc.wantOK)
		}
		if !slices.Equal(keys, tc.keys) || !slices.Equal(values, tc.values) {
			t.Errorf("%s: the request's lists were changed", tc.name)
		}
	}
}

// TestTakePositionLinear: taking the positions out of a request costs a
// pass over it, not a copy of the rest of the lists per position entry
// (one frame holds about 160,000 entries: that was some 10^10 string
// copies, and hundreds of GB allocated, on one request).
func TestTakePositionLinear(t *testing.T) {
	const n = 2000
	keys, values := make([]string, 0, 2*n), make([]string, 0, 2*n)
	for i := range n {
		keys = append(keys, PositionKey, fmt.Sprint("k", i))
		values = append(values, "1,2,3", "v")
	}
	allocs := testing.AllocsPerRun(5, func() { takePosition(keys, values) })
	if allocs > 4 {
		t.Fatalf("takePosition of %d position entries: %v allocations, want a few", n, allocs)
	}
}

// FuzzTakePosition: takePosition does what removing the position entries
// one by one does, on lists split from the input at '|' (keys) and '#'
// (values; '!' stands for PositionKey).
func FuzzTakePosition(f *testing.F) {
	f.Add("a|!|b", "1#1,2,3#2")
	f.Add("!|!|!", "1,1,1#bad#2 2 2#x")
	f.Add("!", "")
	f.Fuzz(func(t *testing.T, ks, vs string) {
		split := func(s, sep string) []string {
			l := strings.Split(s, sep)
			for i, x := range l {
				if x == "!" {
					l[i] = PositionKey
				}
			}
			return l
		}
		keys, values := split(ks, "|"), split(vs, "#")
		// The reference: remove each position entry in turn.
		rk, rv := slices.Clone(keys), slices.Clone(values)
		var rp interest.Vec3
		var rok bool
		for i := 0; i < len(rk) && i < len(rv); {
			if rk[i] != PositionKey {
				i++
				continue
			}
			if q, valid := parsePosition(rv[i]); valid {
				rp, rok = q, true
			}
			rk, rv = slices.Delete(rk, i, i+1), slices.Delete(rv, i, i+1)
		}
		k, v, p, ok := takePosition(keys, values)
		if !slices.Equal(k, rk) || !slices.Equal(v, rv) || p != rp || ok != rok {
			t.Fatalf("takePosition(%q, %q) = %q, %q, %v, %v; want %q, %q, %v, %v", keys, values, k, v, p, ok, rk, rv, rp, rok)
		}
	})
}
