package topic

import (
	"testing"
	"unicode/utf8"
)

func FuzzParseScene(f *testing.F) {
	for _, s := range []string{"realm/s/ns/sc/o/uc/id", "realm/s/ns/sc/x/uc/id/to", "a/b", "", "r/s/n/s/o/+/#"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseScene(s)
		if err == nil && st.String() != s {
			t.Fatalf("ParseScene(%q).String() = %q", s, st.String())
		}
	})
}

func FuzzSubject(f *testing.F) {
	for _, s := range []string{"a/b/c", "a//b", "a.b/c d", "%", "#", "a/+/#", "*/>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || ValidFilter(s) != nil {
			return // ToSubject takes valid MQTT names and filters
		}
		subj := ToSubject(s)
		back, err := FromSubject(subj)
		if err != nil || back != s {
			t.Fatalf("round trip of %q via %q = %q, %v", s, subj, back, err)
		}
	})
}

func FuzzMatchCovers(f *testing.F) {
	f.Add("a/#", "a/+", "a/b")
	f.Add("+/+", "a/b", "a/b")
	f.Fuzz(func(t *testing.T, super, sub, name string) {
		if ValidFilter(super) != nil || ValidFilter(sub) != nil || ValidName(name) != nil {
			return
		}
		if Covers(super, sub) && Match(sub, name) && !Match(super, name) {
			t.Fatalf("Covers(%q,%q) but %q matches only sub", super, sub, name)
		}
	})
}
