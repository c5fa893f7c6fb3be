package scene

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/topic"
)

func TestCaseVariant(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" for none
	}{
		{`{"action":"create","object_id":"a"}`, ""},
		{`{"action":"create","Action":"clientEvent"}`, "Action"},
		{`{"ACTION":"x"}`, "ACTION"},
		{`{"\u0041ction":"clientEvent"}`, "Action"},                 // escaped
		{`{"data":{"Action":"x","Persist":true},"action":"u"}`, ""}, // nested keys are data's own
		{`{"text":"Action","note":["Persist"]}`, ""},                // values are not keys
		{`{"s":"a \"Action\": b","action":"x"}`, ""},                // quotes inside strings
		{`{"persiſt":true}`, "persiſt"},                             // Unicode folding, as encoding/json
		{`[{"Action":1}]`, ""},
		{`"Action"`, ""},
	} {
		k, ok := CaseVariant([]byte(tc.in), "action", "persist")
		if k != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: %q %v, want %q", tc.in, k, ok, tc.want)
		}
	}
	// Parse refuses such payloads (Peek need not: what it lets through,
	// the applier's Parse refuses).
	p := []byte(`{"object_id":"a","action":"update","persist":false,"Persist":true}`)
	if _, err := Parse(topic.SceneTopic{ID: "a"}, p); err == nil || !strings.Contains(err.Error(), "only in case") {
		t.Errorf("Parse(%s): %v", p, err)
	}
}

// FuzzCaseVariant: when CaseVariant finds no other spelling of "action",
// encoding/json reads the same action as a reader that takes the exact key
// (the last one, as browsers' JSON.parse does).
func FuzzCaseVariant(f *testing.F) {
	for _, s := range []string{`{"action":"create"}`, `{"action":"a","Action":"b"}`, `{"data":{"Action":1},"action":"x"}`, `{"\u0061ction":"y"}`, `{"s":"\"Action\":"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) || !bytes.HasPrefix(bytes.TrimLeft(in, " \t\r\n"), []byte("{")) {
			return
		}
		var st struct {
			Action json.RawMessage `json:"action"`
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(in, &st) != nil || json.Unmarshal(in, &m) != nil {
			return
		}
		if _, found := CaseVariant(in, "action"); !found && !bytes.Equal(st.Action, m["action"]) {
			t.Fatalf("%s: encoding/json reads action %s, the exact key holds %s, and CaseVariant found nothing", in, st.Action, m["action"])
		}
	})
}
