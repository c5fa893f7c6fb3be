package persist

import (
	"encoding/json"
	"testing"

	"github.com/xrealm/xrealm/scene"
	"github.com/xrealm/xrealm/topic"
)

// FuzzIgnored reads object messages (MQTT payloads, as a front end gets
// them) with Ignored, which decides whether the persistence stream may skip
// them: a message Ignored lets skip must be one the applier would not store
// either (scene.Parse refuses it, or changesState says no), or a persisted
// change is lost.
func FuzzIgnored(f *testing.F) {
	for _, s := range []string{
		`{"object_id":"b","action":"clientEvent","type":"mousedown","data":{}}`,
		`{"object_id":"b","action":"update","data":{"x":1}}`,
		`{"object_id":"b","action":"create","persist":false}`,
		`{"object_id":"b","action":"update","persist":true}`,
		`{"object_id":"b","action":"delete"}`,
		`{"object_id":"b","action":"update","persist":true,"Persist":false}`,
		`{"object_id":"b","action":"update","ACTION":"clientEvent","persist":true}`,
		`{"object_id":"b","action":"create","persist":null}`,
		`{"object_id":"b","action":"explode"}`,
		`{"object_id":"b","action":"create","persist":"yes"}`,
		` {"object_id":"b","action":"clientEvent"} `,
		`{"object_id":"b","action":"clientEvent"}{}`,
		`[]`, `null`, ``, `not json`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if !Ignored(payload) {
			return // stored, and the applier judges it
		}
		// The applier parses it on the topic of its object_id.
		var w struct {
			ObjectID string `json:"object_id"`
		}
		id := "b"
		if json.Unmarshal(payload, &w) == nil && w.ObjectID != "" {
			id = w.ObjectID
		}
		tp, err := topic.ParseScene("realm/s/ns/sc/o/uc/" + id)
		if err != nil {
			return
		}
		m, err := scene.Parse(tp, payload)
		if err == nil && changesState(m.Action, m.Persist) {
			t.Fatalf("Ignored(%q) is true, but the applier stores it (action %q, persist %v)", payload, m.Action, m.Persist)
		}
	})
}
