package scene

import (
	"errors"
	"testing"
)

func TestPeek(t *testing.T) {
	tests := []struct {
		payload string
		action  string
		persist bool
		bad     bool
	}{
		{payload: `{"object_id":"b","action":"clientEvent","type":"mousedown","data":{}}`, action: "clientEvent"},
		{payload: `{"action":"update","persist":true}`, action: "update", persist: true},
		{payload: `{"action":"create","persist":null}`, action: "create"},
		{payload: `{"action":"delete"}`, action: "delete"},
		{payload: `{"action":"explode"}`, bad: true},
		{payload: `{"persist":true}`, bad: true}, // no action
		{payload: `{"action":"create","persist":"yes"}`, bad: true},
		{payload: `{"action":7}`, bad: true},
		{payload: `{"action":"create",`, bad: true},
		{payload: `[]`, bad: true},
		{payload: ``, bad: true},
	}
	for _, tt := range tests {
		action, persist, err := Peek([]byte(tt.payload))
		if tt.bad {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Peek(%s): err %v, want ErrInvalid", tt.payload, err)
			}
			continue
		}
		if err != nil || action != tt.action || persist != tt.persist {
			t.Errorf("Peek(%s) = %q, %v, %v; want %q, %v", tt.payload, action, persist, err, tt.action, tt.persist)
		}
	}
}
