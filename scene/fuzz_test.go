package scene

import (
	"errors"
	"testing"
	"time"

	"github.com/xrealm/xrealm/topic"
)

func FuzzParse(f *testing.F) {
	seeds := []string{
		`{"object_id":"box","action":"create","persist":true,"data":{"a":1}}`,
		`{"object_id":"box","action":"update","data":{"a":null}}`,
		`{"object_id":"other","action":"create"}`,
		`{"object_id":"box","action":"explode"}`,
		`{"object_id":"box","action":"create","ttl":"x"}`,
		`{"object_id":"box","action":"create","persist":true,"ttl":1e10}`,
		`{"object_id":"box","action":"delete","timestamp":"2024-01-01T00:00:00+00Z"}`,
		`{"object_id":"box",`,
		`[]`, `null`, ``, `{}`,
	}
	for _, s := range seeds {
		f.Add("box", []byte(s))
	}
	f.Fuzz(func(t *testing.T, id string, payload []byte) {
		tp, err := topic.ParseScene("realm/s/ns/sc/o/uc/" + id)
		if err != nil {
			return
		}
		m, err := Parse(tp, payload)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			if len(err.Error()) > 1000+2*len(id) {
				t.Fatalf("error of %d bytes is too long for one log line", len(err.Error()))
			}
			return
		}
		if m.ObjectID != tp.ID {
			t.Fatalf("accepted object_id %q on topic id %q", m.ObjectID, tp.ID)
		}
		if !ValidAction(m.Action) {
			t.Fatalf("accepted unknown action %q", m.Action)
		}
		if m.TTL < 0 {
			t.Fatalf("accepted negative ttl %v", m.TTL)
		}
		// The persistence layer stores now + ttl: it must be a duration
		// forward, or the object expires at once.
		if d := time.Duration(m.TTL * float64(time.Second)); d < 0 || m.TTL >= 1 && d < time.Second {
			t.Fatalf("accepted ttl %v s, which is %v as a duration", m.TTL, d)
		}
		// Peek, the hot-path reader, agrees with Parse on what it reads.
		action, persist, err := Peek(payload)
		if err != nil || action != m.Action || persist != m.Persist {
			t.Fatalf("Peek = %q, %v, %v; Parse read action %q, persist %v", action, persist, err, m.Action, m.Persist)
		}
	})
}
