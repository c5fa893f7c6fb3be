package topic

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseScene(t *testing.T) {
	tests := []struct {
		in      string
		want    SceneTopic
		wantErr string
	}{
		{in: "realm/s/ns/sc/o/pyClient-1/box", want: SceneTopic{"realm", "ns", "sc", "o", "pyClient-1", "box", ""}},
		{in: "realm/s/ns/sc/x/uc/id/to", want: SceneTopic{"realm", "ns", "sc", "x", "uc", "id", "to"}},
		{in: "realm/s/ns/sc/o/uc", wantErr: "6 levels"},
		{in: "realm/s/ns/sc/o/uc/id/to/extra", wantErr: "too many levels"},
		{in: "realm/d/ns/sc/o/uc/id", wantErr: "level 2"},
		{in: "realm/s/ns/sc/q/uc/id", wantErr: "unknown message type"},
		{in: "realm/s/ns//o/uc/id", wantErr: "empty scene"},
		{in: "realm/s/ns/sc/o/+/id", wantErr: "wildcard in userClient"},
		{in: "", wantErr: "1 levels"},
	}
	for _, tt := range tests {
		got, err := ParseScene(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseScene(%q) error = %v, want containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseScene(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if got.String() != tt.in {
			t.Errorf("String() = %q, want %q", got.String(), tt.in)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		filter, name string
		want         bool
	}{
		{"a/b/c", "a/b/c", true},
		{"a/b/c", "a/b/d", false},
		{"a/+/c", "a/b/c", true},
		{"a/+/c", "a/b/c/d", false},
		{"a/#", "a/b/c", true},
		{"a/#", "a", true},
		{"a/b/#", "a/c", false},
		{"#", "a/b", true},
		{"#", "$NETWORK/latency", false},
		{"+/latency", "$NETWORK/latency", false},
		{"$NETWORK/#", "$NETWORK/latency", true},
		{"+", "a", true},
		{"+", "a/b", false},
		{"a/+", "a/", true},
		{"r/s/ns/sc/+/+/+", "r/s/ns/sc/o/pyClient-1/box", true},
		{"r/s/ns/sc/+/+/+", "r/s/ns/sc/o/pyClient-1/box/to", false},
		{"r/s/ns/sc/+/+/+/me/#", "r/s/ns/sc/o/uc/box/me", true},
	}
	for _, tt := range tests {
		if got := Match(tt.filter, tt.name); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.filter, tt.name, got, tt.want)
		}
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		super, sub string
		want       bool
	}{
		{"a/#", "a/b/c", true},
		{"a/#", "a/+/c", true},
		{"a/#", "a/#", true},
		{"a/#", "a", true}, // MQTT's a/# matches a itself
		{"a/+/#", "a/b", true},
		{"a/+/#", "a/+", true},
		{"a/b/#", "a", false},
		{"a/+/c", "a/b", false},
		{"a/#", "#", false},
		{"a/+", "a/b", true},
		{"a/+", "a/+", true},
		{"a/+", "a/#", false},
		{"a/b", "a/+", false},
		{"a/b", "a/b", true},
		{"a/b", "a/b/c", false},
		{"#", "#", true},
		{"#", "+/x", true},
		{"r/s/ns/sc/#", "r/s/ns/sc/+/+/+", true},
		{"r/s/ns/sc/#", "r/s/ns/+/+/+/+", false},
		{"r/s/ns/sc/#", "r/s/#", false},
		{"r/s/ns/sc/#", "#", false},
		{"r/s/ns/sc/#", "+/s/ns/sc/#", false},
		{"+/+", "$SYS/x", true},
	}
	for _, tt := range tests {
		if got := Covers(tt.super, tt.sub); got != tt.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tt.super, tt.sub, got, tt.want)
		}
	}
}

// Covers must agree with Match: whenever Covers(super, sub) holds, every
// topic that sub matches is matched by super.
func TestCoversImpliesMatch(t *testing.T) {
	filters := []string{"#", "a/#", "a/+", "a/b", "+/b", "+/+", "a/+/c", "a/b/#", "+/#", "a/b/c"}
	names := []string{"a", "b", "a/b", "a/c", "b/b", "a/b/c", "a/x/c", "a/b/c/d", "x/y/z"}
	for _, sup := range filters {
		for _, sub := range filters {
			if !Covers(sup, sub) {
				continue
			}
			for _, n := range names {
				if Match(sub, n) && !Match(sup, n) {
					t.Errorf("Covers(%q, %q) but %q matches only the second", sup, sub, n)
				}
			}
		}
	}
}

func TestValidFilter(t *testing.T) {
	for _, ok := range []string{"#", "+", "a/+/b", "a/#", "+/+/#", "$NETWORK/latency"} {
		if err := ValidFilter(ok); err != nil {
			t.Errorf("ValidFilter(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "a/#/b", "a#", "a/b+", "a\x00b", string([]byte{0xff})} {
		if err := ValidFilter(bad); err == nil {
			t.Errorf("ValidFilter(%q) = nil, want error", bad)
		}
	}
	if err := ValidName("a/+/b"); err == nil {
		t.Error("ValidName accepted a wildcard")
	}
}

func TestSubjectRoundTrip(t *testing.T) {
	tests := []struct{ in, subj string }{
		{"realm/s/ns/sc/o/uc/box", "realm.s.ns.sc.o.uc.box"},
		{"realm/s/ns/sc/#", "realm.s.ns.sc.>"},
		{"realm/s/+/sc/+/+/+", "realm.s.*.sc.*.*.*"},
		{"realm/s/ns/sc/o/uc/box.1", "realm.s.ns.sc.o.uc.box%2E1"},
		{"a b/%/c", "a%20b.%25.c"},
		{"a//b", "a.%00.b"},
		{"/a", "%00.a"},
		{"a/*/>", "a.%2A.%3E"},
	}
	for _, tt := range tests {
		got := ToSubject(tt.in)
		if got != tt.subj {
			t.Errorf("ToSubject(%q) = %q, want %q", tt.in, got, tt.subj)
		}
		back, err := FromSubject(got)
		if err != nil || back != tt.in {
			t.Errorf("FromSubject(%q) = %q, %v; want %q", got, back, err, tt.in)
		}
	}
	// Bad escapes, and wildcards where no MQTT topic or filter has them.
	for _, bad := range []string{"a.%2", "a.%ZZ", "0.*#", "a.*+", "a.b*#c", ">.0", "a.>.b"} {
		if name, err := FromSubject(bad); err == nil {
			t.Errorf("FromSubject(%q) = %q, nil error", bad, name)
		} else if !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("FromSubject(%q): error %q does not quote the subject", bad, err)
		}
	}
}

func TestScenePrefix(t *testing.T) {
	tests := []struct{ in, want string }{
		{"realm/s/ns/sc/#", "realm.s.ns.sc.>"},
		{"realm/s/ns/sc/+/+/+", "realm.s.ns.sc.>"},
		{"realm/s/ns/sc/+/+/+/me/#", "realm.s.ns.sc.>"},
		{"realm/s/#", "realm.s.>"},
		{"realm/s/+/+/o/x/y", "realm.s.*.*.>"},
		{"#", ">"},
	}
	for _, tt := range tests {
		if got := ScenePrefix(tt.in); got != tt.want {
			t.Errorf("ScenePrefix(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
