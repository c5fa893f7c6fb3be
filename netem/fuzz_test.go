package netem

import (
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
