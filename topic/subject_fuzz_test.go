package topic

import (
	"strings"
	"testing"
)

// FuzzFromSubject reads arbitrary NATS subjects (the bus carries subjects
// that any bus client wrote; the MQTT hub and the persistence applier read
// them) back as MQTT topics. A subject is refused, or read as a topic with
// one level per token (an escape never makes a level separator), wildcard
// characters only as whole levels ('+' anywhere, '#' last), as ToSubject's
// own subjects give; and the topic maps to a subject that reads back as
// the same topic.
func FuzzFromSubject(f *testing.F) {
	for _, s := range []string{"realm.s.ns.sc.o.uc.id", "a.*.>", "a.%00.b", "a.%2E.b", "a.%2A.%3E", "a.%25", "a.%2", "a.%zz", "%00", "", ".", "a..b", "#000000000000000", "a.%2F.b", "a.%2B", "a.b+c", "a.%2e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, err := FromSubject(s)
		if err != nil {
			return
		}
		levels := strings.Split(name, "/")
		if want := strings.Count(s, ".") + 1; len(levels) != want {
			t.Fatalf("FromSubject(%q) = %q: %d levels from %d tokens", s, name, len(levels), want)
		}
		for i, l := range levels {
			if (strings.Contains(l, "+") && l != "+") || (strings.Contains(l, "#") && (l != "#" || i != len(levels)-1)) {
				t.Fatalf("FromSubject(%q) = %q: level %q holds a wildcard character", s, name, l)
			}
		}
		back, err := FromSubject(ToSubject(name))
		if err != nil || back != name {
			t.Fatalf("FromSubject(%q) = %q, whose subject %q reads back as %q, %v", s, name, ToSubject(name), back, err)
		}
	})
}
