// Package scene defines the ARENA message envelope carried on scene topics
// and the rules that make a message valid: a JSON object with a known action
// whose object_id equals the id level of the topic it was published on.
// It also provides Merge, the deep merge used to apply update deltas.
package scene

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/xrealm/xrealm/topic"
)

// Actions an ARENA message may carry.
const (
	ActionCreate      = "create"
	ActionUpdate      = "update"
	ActionDelete      = "delete"
	ActionClientEvent = "clientEvent"
	ActionJoin        = "join"
	ActionLeave       = "leave"
)

// ValidAction reports whether a is one of the actions ARENA defines.
func ValidAction(a string) bool {
	switch a {
	case ActionCreate, ActionUpdate, ActionDelete, ActionClientEvent, ActionJoin, ActionLeave:
		return true
	}
	return false
}

// Message is the JSON envelope of an ARENA scene message.
//
// Timestamp is kept as the string the sender wrote: ARENA clients send
// timestamps in several forms, some of them not valid RFC 3339, and nothing
// in xrealm depends on their value.
type Message struct {
	ObjectID  string         `json:"object_id"`
	Action    string         `json:"action"`
	Type      string         `json:"type,omitempty"`
	Persist   bool           `json:"persist,omitempty"`
	TTL       float64        `json:"ttl,omitempty"` // seconds; 0 means none
	Private   bool           `json:"private,omitempty"`
	Overwrite bool           `json:"overwrite,omitempty"`
	Data      map[string]any `json:"data,omitempty"`
	Timestamp string         `json:"timestamp,omitempty"`
}

// MaxTTL is the longest ttl, in seconds: 100 years. One beyond what a
// time.Duration holds (about 292 years; "ttl": 1e10) came out of the
// conversion negative, and the object expired as soon as it was stored.
const MaxTTL = 3_155_760_000 // 100 years of 365.25 days

// maxQuoted is how much of a payload an error message quotes.
const maxQuoted = 120

// Quote returns payload as a Go-quoted string, truncated to a length that
// fits in one log line.
func Quote(payload []byte) string {
	if len(payload) <= maxQuoted {
		return fmt.Sprintf("%q", payload)
	}
	return fmt.Sprintf("%q... (%d bytes)", payload[:maxQuoted], len(payload))
}

// wire is the lenient decoding form: fields whose JSON type varies between
// ARENA clients are decoded as raw values and interpreted by Parse.
type wire struct {
	ObjectID  json.RawMessage `json:"object_id"`
	Action    json.RawMessage `json:"action"`
	Type      json.RawMessage `json:"type"`
	Persist   json.RawMessage `json:"persist"`
	TTL       json.RawMessage `json:"ttl"`
	Private   json.RawMessage `json:"private"`
	Overwrite json.RawMessage `json:"overwrite"`
	Data      json.RawMessage `json:"data"`
	Timestamp json.RawMessage `json:"timestamp"`
}

// wireFields are the JSON names of wire's fields.
var wireFields = []string{"object_id", "action", "type", "persist", "ttl", "private", "overwrite", "data", "timestamp"}

// ErrInvalid is wrapped by every error Parse returns.
var ErrInvalid = errors.New("invalid ARENA message")

// Parse decodes payload, published on topic t, and checks that it is a valid
// ARENA message: a JSON object with a known action and an object_id equal
// to t.ID. Errors wrap ErrInvalid and name the topic, the failing field and
// (truncated) the payload.
func Parse(t topic.SceneTopic, payload []byte) (Message, error) {
	fail := func(format string, args ...any) (Message, error) {
		return Message{}, fmt.Errorf("%w on %s: %s; payload %s", ErrInvalid, t, fmt.Sprintf(format, args...), Quote(payload))
	}
	if !json.Valid(payload) {
		var v any
		return fail("malformed JSON: %v", json.Unmarshal(payload, &v))
	}
	if p := bytes.TrimLeft(payload, " \t\r\n"); p[0] != '{' {
		return fail("not a JSON object")
	}
	var w wire
	if err := json.Unmarshal(payload, &w); err != nil {
		return fail("malformed JSON: %v", err)
	}
	if k, ok := CaseVariant(payload, wireFields...); ok {
		return fail("key %q differs from a field's name only in case", clipString(k))
	}
	var m Message
	var err error
	if m.ObjectID, err = str(w.ObjectID); err != nil {
		return fail("object_id: %v", err)
	}
	if m.ObjectID == "" {
		return fail("object_id missing")
	}
	if m.ObjectID != t.ID {
		return fail("object_id %q does not equal the topic id %q", clipString(m.ObjectID), clipString(t.ID))
	}
	if m.Action, err = str(w.Action); err != nil {
		return fail("action: %v", err)
	}
	if m.Action == "" {
		return fail("action missing")
	}
	if !ValidAction(m.Action) {
		return fail("unknown action %q", clipString(m.Action))
	}
	if m.Type, err = str(w.Type); err != nil {
		return fail("type: %v", err)
	}
	if m.Persist, err = boolean(w.Persist); err != nil {
		return fail("persist: %v", err)
	}
	if m.Private, err = boolean(w.Private); err != nil {
		return fail("private: %v", err)
	}
	if m.Overwrite, err = boolean(w.Overwrite); err != nil {
		return fail("overwrite: %v", err)
	}
	if m.TTL, err = number(w.TTL); err != nil {
		return fail("ttl: %v", err)
	}
	if m.TTL < 0 || math.IsInf(m.TTL, 0) || math.IsNaN(m.TTL) {
		return fail("ttl %v is not a positive number of seconds", m.TTL)
	}
	if m.TTL > MaxTTL {
		return fail("ttl %v is beyond the longest, %d seconds (100 years)", m.TTL, int64(MaxTTL))
	}
	if isNull(w.Data) {
		// absent or null: no data
	} else if w.Data[0] != '{' {
		return fail("data is not a JSON object, got %s", clip(w.Data))
	} else if err := json.Unmarshal(w.Data, &m.Data); err != nil {
		// A valid JSON object that does not decode: a number beyond
		// float64 ("1e400").
		var num *json.UnmarshalTypeError
		if errors.As(err, &num) && num.Value != "" && strings.HasPrefix(num.Value, "number") {
			return fail("data: %s is out of range", num.Value)
		}
		return fail("data: %v", err)
	}
	// The timestamp is informational: keep strings as written, and the
	// text of any other JSON value, without judging its format.
	if !isNull(w.Timestamp) {
		if s, err := str(w.Timestamp); err == nil {
			m.Timestamp = s
		} else {
			m.Timestamp = string(w.Timestamp)
		}
	}
	return m, nil
}

func isNull(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }

func str(r json.RawMessage) (string, error) {
	if isNull(r) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		return "", fmt.Errorf("want a string, got %s", clip(r))
	}
	return s, nil
}

func boolean(r json.RawMessage) (bool, error) {
	if isNull(r) {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(r, &b); err != nil {
		return false, fmt.Errorf("want true or false, got %s", clip(r))
	}
	return b, nil
}

// number accepts a JSON number or a string holding one, as some clients
// send ttl as a string.
func number(r json.RawMessage) (float64, error) {
	if isNull(r) {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(r, &f); err == nil {
		return f, nil
	}
	var s json.Number
	if err := json.Unmarshal(r, &s); err == nil {
		if f, err := s.Float64(); err == nil {
			return f, nil
		}
	}
	return 0, fmt.Errorf("want a number, got %s", clip(r))
}

func clipString(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

func clip(r json.RawMessage) string {
	if len(r) > 40 {
		return string(r[:40]) + "..."
	}
	return string(r)
}

// Merge applies delta to dst in place, as an ARENA update applies its data
// to a persisted object: a key whose value in delta is JSON null is removed
// from dst; where both hold an object for a key, the objects are merged
// recursively; any other value (scalar or array) replaces dst's. Objects
// taken from delta are copied, so dst never aliases delta's maps.
func Merge(dst, delta map[string]any) {
	for k, v := range delta {
		if v == nil {
			delete(dst, k)
			continue
		}
		if dv, ok := v.(map[string]any); ok {
			if cur, ok := dst[k].(map[string]any); ok {
				Merge(cur, dv)
				continue
			}
			dst[k] = withoutNulls(dv)
			continue
		}
		dst[k] = v
	}
}

// withoutNulls returns a deep copy of m without its null members: a null
// means "remove", and there is nothing to remove in a new object.
func withoutNulls(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	Merge(out, m)
	return out
}
