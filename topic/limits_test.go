package topic

import (
	"strings"
	"testing"
)

// Topics and filters whose NATS subject would pass MaxSubjectLen are
// refused by ValidName and ValidFilter, counting the escapes the subject
// adds: published, they would make the NATS server close the MQTT front
// end's connection for every client ("maximum control line exceeded").
// The error is one log line long and gives the sizes.
func TestSubjectLengthLimit(t *testing.T) {
	base := "realm/s/ns/sc/x/uc/"
	pad := func(n int, c string) string { return base + strings.Repeat(c, n-len(base)) }
	tests := []struct {
		name   string
		topic  string
		filter bool
		ok     bool
	}{
		{"short", "realm/s/ns/sc/x/uc/id", false, true},
		{"subject at the limit", pad(MaxSubjectLen, "a"), false, true},
		{"subject one over", pad(MaxSubjectLen+1, "a"), false, false},
		{"escapes count: dots", base + strings.Repeat(".", (MaxSubjectLen-len(base))/3+1), false, false},
		{"escapes count: spaces within", base + strings.Repeat(" ", (MaxSubjectLen-len(base))/3), false, true},
		{"empty levels count", strings.Repeat("/", 700), false, false},
		{"MQTT's own limit", strings.Repeat("a", MaxLen), false, false},
		{"filter at the limit", pad(MaxSubjectLen-2, "a") + "/#", true, true},
		{"filter over", pad(MaxSubjectLen, "a") + "/#", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.filter {
				err = ValidFilter(tt.topic)
			} else {
				err = ValidName(tt.topic)
			}
			if tt.ok != (err == nil) {
				t.Fatalf("topic of %d bytes (subject %d): error %v, want ok=%v", len(tt.topic), len(ToSubject(tt.topic)), err, tt.ok)
			}
			if err != nil && len(err.Error()) > 300 {
				t.Errorf("error of %d bytes: %.100s...", len(err.Error()), err)
			}
		})
	}
}

// Names longer than MaxSceneNameLen are refused, with a short message.
func TestSceneNameLength(t *testing.T) {
	if err := ValidSceneName("scene", strings.Repeat("a", MaxSceneNameLen)); err != nil {
		t.Fatalf("name at the limit: %v", err)
	}
	err := ValidSceneName("scene", strings.Repeat("a", 6000))
	if err == nil || !strings.Contains(err.Error(), "6000 bytes is longer than the longest, 128") || len(err.Error()) > 200 {
		t.Fatalf("long name: %v", err)
	}
	_, _, err = ParseSceneName("ns/" + strings.Repeat("b", 6000))
	if err == nil || len(err.Error()) > 300 {
		t.Fatalf("ParseSceneName of a long name: error %.300v", err)
	}
}
