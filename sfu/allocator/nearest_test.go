package allocator

import (
	"maps"
	"slices"
	"testing"
)

func TestNearest(t *testing.T) {
	tests := []struct {
		name  string
		cands []Candidate
		n     int
		want  []string
	}{
		{"fewer than slots", []Candidate{{Key: "a", Interest: 0.1}, {Key: "b", Interest: 0.2}}, 4, []string{"a", "b"}},
		{"most interesting", []Candidate{{Key: "a", Interest: 0.1}, {Key: "b", Interest: 0.5}, {Key: "c", Interest: 0.3}}, 2, []string{"b", "c"}},
		{"ties by key", []Candidate{{Key: "c", Interest: 1}, {Key: "a", Interest: 1}, {Key: "b", Interest: 1}}, 2, []string{"a", "b"}},
		{"held keeps against a little closer", []Candidate{{Key: "a", Interest: 0.5, Held: true}, {Key: "b", Interest: 0.6}}, 1, []string{"a"}},
		{"held yields to much closer", []Candidate{{Key: "a", Interest: 0.2, Held: true}, {Key: "b", Interest: 0.5}}, 1, []string{"b"}},
		{"speakers first", []Candidate{{Key: "a", Interest: 0.9, Held: true}, {Key: "b", Interest: 0.1, Active: true}, {Key: "c", Interest: 0.5}}, 2, []string{"a", "b"}},
		{"nearest speakers", []Candidate{{Key: "a", Interest: 0.9}, {Key: "b", Interest: 0.1, Active: true}, {Key: "c", Interest: 0.5, Active: true}}, 1, []string{"c"}},
		{"no slots", []Candidate{{Key: "a", Interest: 1}}, 0, nil},
		{"negative slots", []Candidate{{Key: "a", Interest: 1}}, -1, nil},
		{"none", nil, 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Sorted(maps.Keys(Nearest(tt.cands, tt.n)))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Nearest(%v, %d) = %v, want %v", tt.cands, tt.n, got, tt.want)
			}
		})
	}
}
