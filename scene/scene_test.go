package scene

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/topic"
)

func mustTopic(t testing.TB, s string) topic.SceneTopic {
	t.Helper()
	st, err := topic.ParseScene(s)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestParse(t *testing.T) {
	tp := "realm/s/ns/sc/o/uc/box"
	tests := []struct {
		name    string
		payload string
		want    Message
		wantErr string // substring of the error; "" for success
	}{
		{
			name:    "create",
			payload: `{"object_id":"box","action":"create","type":"object","persist":true,"ttl":5,"data":{"position":{"x":1}},"timestamp":"2024-01-01T00:00:00.000+00Z"}`,
			want: Message{ObjectID: "box", Action: "create", Type: "object", Persist: true, TTL: 5,
				Data: map[string]any{"position": map[string]any{"x": 1.0}}, Timestamp: "2024-01-01T00:00:00.000+00Z"},
		},
		{
			name:    "update overwrite private",
			payload: `{"object_id":"box","action":"update","overwrite":true,"private":true,"data":{}}`,
			want:    Message{ObjectID: "box", Action: "update", Overwrite: true, Private: true, Data: map[string]any{}},
		},
		{name: "delete without data", payload: `{"object_id":"box","action":"delete"}`, want: Message{ObjectID: "box", Action: "delete"}},
		{name: "clientEvent", payload: ` {"object_id":"box","action":"clientEvent","type":"mousedown","data":{"source":"x"}}`,
			want: Message{ObjectID: "box", Action: "clientEvent", Type: "mousedown", Data: map[string]any{"source": "x"}}},
		{name: "numeric timestamp kept as text", payload: `{"object_id":"box","action":"join","timestamp":1700000000}`,
			want: Message{ObjectID: "box", Action: "join", Timestamp: "1700000000"}},
		{name: "ttl as string", payload: `{"object_id":"box","action":"leave","ttl":"2.5"}`, want: Message{ObjectID: "box", Action: "leave", TTL: 2.5}},
		{name: "null data", payload: `{"object_id":"box","action":"delete","data":null}`, want: Message{ObjectID: "box", Action: "delete"}},

		{name: "malformed JSON", payload: `{"object_id":"box",`, wantErr: "malformed JSON"},
		{name: "empty payload", payload: ``, wantErr: "malformed JSON"},
		{name: "array", payload: `[1,2]`, wantErr: "not a JSON object"},
		{name: "null", payload: `null`, wantErr: "not a JSON object"},
		{name: "string", payload: `"box"`, wantErr: "not a JSON object"},
		{name: "missing object_id", payload: `{"action":"create"}`, wantErr: "object_id missing"},
		{name: "numeric object_id", payload: `{"object_id":7,"action":"create"}`, wantErr: "object_id: want a string"},
		{name: "wrong object_id", payload: `{"object_id":"other","action":"create"}`, wantErr: `object_id "other" does not equal the topic id "box"`},
		{name: "missing action", payload: `{"object_id":"box"}`, wantErr: "action missing"},
		{name: "unknown action", payload: `{"object_id":"box","action":"explode"}`, wantErr: `unknown action "explode"`},
		{name: "action case matters", payload: `{"object_id":"box","action":"Create"}`, wantErr: "unknown action"},
		{name: "persist not bool", payload: `{"object_id":"box","action":"create","persist":"yes"}`, wantErr: "persist: want true or false"},
		{name: "negative ttl", payload: `{"object_id":"box","action":"create","ttl":-1}`, wantErr: "ttl -1"},
		{name: "ttl not a number", payload: `{"object_id":"box","action":"create","ttl":{}}`, wantErr: "ttl: want a number"},
		{name: "ttl beyond a duration", payload: `{"object_id":"box","action":"create","ttl":1e10}`, wantErr: "ttl 1e+10 is beyond the longest, 3155760000 seconds"},
		{name: "ttl string beyond a duration", payload: `{"object_id":"box","action":"create","ttl":"1e300"}`, wantErr: "ttl 1e+300 is beyond"},
		{name: "data not an object", payload: `{"object_id":"box","action":"create","data":[1]}`, wantErr: "data is not a JSON object"},
		// An object with a number beyond float64 is no "not an object": the
		// reason names the number (it said "data is not a JSON object").
		{name: "data with a number out of range", payload: `{"object_id":"box","action":"create","data":{"position":{"x":1e400}}}`, wantErr: "data: number 1e400 is out of range"},
		{name: "data a string", payload: `{"object_id":"box","action":"create","data":"x"}`, wantErr: `data is not a JSON object, got "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(mustTopic(t, tp), []byte(tt.payload))
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%s) = %+v, want error containing %q", tt.payload, got, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tp) {
					t.Fatalf("Parse(%s) error = %q, want one wrapping ErrInvalid naming %q and containing %q", tt.payload, err, tp, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%s): %v", tt.payload, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse(%s) = %+v, want %+v", tt.payload, got, tt.want)
			}
		})
	}
}

func TestParseTruncatesPayload(t *testing.T) {
	long := `{"object_id":"nope","action":"create","data":{"x":"` + strings.Repeat("a", 10000) + `"}}`
	_, err := Parse(mustTopic(t, "r/s/n/s/o/u/box"), []byte(long))
	if err == nil {
		t.Fatal("want error")
	}
	if len(err.Error()) > 400 || !strings.Contains(err.Error(), "bytes)") {
		t.Fatalf("error not truncated (%d bytes): %.200s", len(err.Error()), err)
	}
}

func TestMerge(t *testing.T) {
	tests := []struct {
		name             string
		dst, delta, want string
	}{
		{"add key", `{"a":1}`, `{"b":2}`, `{"a":1,"b":2}`},
		{"replace scalar", `{"a":1}`, `{"a":"x"}`, `{"a":"x"}`},
		{"null removes", `{"a":1,"b":2}`, `{"a":null}`, `{"b":2}`},
		{"null of absent key", `{"a":1}`, `{"z":null}`, `{"a":1}`},
		{"nested merge", `{"p":{"x":1,"y":2}}`, `{"p":{"y":3,"z":4}}`, `{"p":{"x":1,"y":3,"z":4}}`},
		{"nested null removes", `{"p":{"x":1,"y":2}}`, `{"p":{"x":null}}`, `{"p":{"y":2}}`},
		{"array replaces", `{"a":[1,2,3]}`, `{"a":[4]}`, `{"a":[4]}`},
		{"object replaces scalar", `{"a":1}`, `{"a":{"b":{"c":null,"d":1}}}`, `{"a":{"b":{"d":1}}}`},
		{"scalar replaces object", `{"a":{"b":1}}`, `{"a":2}`, `{"a":2}`},
		{"empty delta", `{"a":{"b":1}}`, `{}`, `{"a":{"b":1}}`},
		{"deep", `{"a":{"b":{"c":{"d":1,"e":2}}}}`, `{"a":{"b":{"c":{"e":null,"f":[1]}}}}`, `{"a":{"b":{"c":{"d":1,"f":[1]}}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dst, delta, want map[string]any
			for _, p := range []struct {
				s string
				m *map[string]any
			}{{tt.dst, &dst}, {tt.delta, &delta}, {tt.want, &want}} {
				if err := json.Unmarshal([]byte(p.s), p.m); err != nil {
					t.Fatal(err)
				}
			}
			Merge(dst, delta)
			if !reflect.DeepEqual(dst, want) {
				got, _ := json.Marshal(dst)
				t.Fatalf("Merge(%s, %s) = %s, want %s", tt.dst, tt.delta, got, tt.want)
			}
		})
	}
}

func TestMergeDoesNotAlias(t *testing.T) {
	dst := map[string]any{}
	inner := map[string]any{"x": 1.0}
	Merge(dst, map[string]any{"p": inner})
	inner["x"] = 2.0
	if dst["p"].(map[string]any)["x"] != 1.0 {
		t.Fatal("Merge kept a reference to delta's nested object")
	}
}
