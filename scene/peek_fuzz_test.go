package scene

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/xrealm/xrealm/topic"
)

// FuzzPeek reads arbitrary payloads (MQTT input) with Peek, the hot-path
// reader: it never panics, its errors wrap ErrInvalid and fit a log line,
// what it accepts has a known action, and it never refuses a payload that
// Parse accepts (on the topic of the payload's own object id), nor reads it
// differently.
func FuzzPeek(f *testing.F) {
	for _, s := range []string{
		`{"object_id":"b","action":"clientEvent","type":"mousedown","data":{}}`,
		`{"object_id":"b","action":"update","persist":true}`,
		`{"object_id":"b","action":"create","persist":null}`,
		`{"action":"delete"}`,
		`{"action":"explode"}`,
		`{"persist":true}`,
		`{"action":"create","persist":"yes"}`,
		`{"action":7}`,
		`{"action":"create","Action":"delete"}`,
		`{"action":"create",`,
		`{"action":"create"}{}`,
		`[]`, `null`, ``, `"action"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		action, persist, err := Peek(payload)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Peek(%q): error %v does not wrap ErrInvalid", payload, err)
			}
			if len(err.Error()) > 1000 {
				t.Fatalf("Peek(%q): error of %d bytes is too long for one log line", payload, len(err.Error()))
			}
		} else if !ValidAction(action) {
			t.Fatalf("Peek(%q) accepted unknown action %q", payload, action)
		}
		if m, perr := parseOwnTopic(payload); perr == nil {
			if err != nil || action != m.Action || persist != m.Persist {
				t.Fatalf("Peek(%q) = %q, %v, %v; Parse on object %q read action %q, persist %v", payload, action, persist, err, m.ObjectID, m.Action, m.Persist)
			}
		}
	})
}

// parseOwnTopic parses payload on the topic of its own object_id.
func parseOwnTopic(payload []byte) (Message, error) {
	var w wire
	if err := json.Unmarshal(payload, &w); err != nil {
		return Message{}, err
	}
	id, err := str(w.ObjectID)
	if err != nil {
		return Message{}, err
	}
	tp, err := topic.ParseScene("realm/s/ns/sc/o/uc/" + id)
	if err != nil {
		return Message{}, err
	}
	return Parse(tp, payload)
}
