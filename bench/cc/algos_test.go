package benchcc

import (
	"slices"
	"strings"
	"testing"
)

func TestCheckAlgos(t *testing.T) {
	kernel := []string{"reno", "cubic", "bbr"}
	tests := []struct {
		name   string
		algos  []string
		kernel []string
		errHas []string // empty: accepted
	}{
		{name: "the default", algos: []string{"cubic", "bbr", "reno", "hera", "hera-paper"}, kernel: kernel},
		{name: "hera without the kernel having it", algos: []string{"hera"}, kernel: nil},
		{name: "a loaded hera under its kernel name", algos: []string{"hera_paper"}, kernel: append(kernel, "hera", "hera_paper")},
		{name: "a misspelling", algos: []string{"cubic", "cubc"}, kernel: kernel,
			errHas: []string{`unknown congestion control "cubc"`, "valid: bbr, cubic, hera, hera-paper, reno"}},
		{name: "two unknown", algos: []string{"vegas", "BBR"}, kernel: kernel, errHas: []string{`"vegas", "BBR"`}},
		{name: "empty name", algos: []string{""}, kernel: kernel, errHas: []string{`unknown congestion control ""`}},
		{name: "none", algos: nil, kernel: kernel, errHas: []string{"no congestion control", "valid: bbr"}},
		// Each would run twice and the summary count both runs.
		{name: "a duplicate", algos: []string{"cubic", "bbr", "cubic"}, kernel: kernel,
			errHas: []string{`congestion control "cubic" given twice`}},
		{name: "one control under its two names", algos: []string{"hera-paper", "hera_paper"}, kernel: append(kernel, "hera_paper"),
			errHas: []string{`congestion control "hera_paper" given twice (as "hera-paper" and "hera_paper")`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAlgos(tc.algos, tc.kernel)
			if len(tc.errHas) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%q accepted", tc.algos)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// A kernel that refuses to load hera gets an error saying which of the
// run's controls need no loading (the message named none before).
func TestKernelAlgos(t *testing.T) {
	for _, tc := range []struct {
		in, want []string
	}{
		{[]string{"cubic", "hera", "bbr"}, []string{"cubic", "bbr"}},
		{[]string{"hera", "hera-paper"}, []string{"cubic"}},
		{[]string{"hera_paper", "reno"}, []string{"reno"}},
	} {
		if got := kernelAlgos(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("kernelAlgos(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
