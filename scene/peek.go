package scene

import (
	"encoding/json"
	"fmt"
)

// Peek decodes only the action and persist fields of an ARENA message, with
// the same lenient rules as Parse, without checking the rest. It is for hot
// paths that route a message by what it does; Parse is the full check.
func Peek(payload []byte) (action string, persist bool, err error) {
	var w struct {
		Action  json.RawMessage `json:"action"`
		Persist json.RawMessage `json:"persist"`
	}
	if err := json.Unmarshal(payload, &w); err != nil {
		return "", false, fmt.Errorf("%w: malformed JSON: %v; payload %s", ErrInvalid, err, Quote(payload))
	}
	if action, err = str(w.Action); err != nil {
		return "", false, fmt.Errorf("%w: action: %v", ErrInvalid, err)
	}
	if !ValidAction(action) {
		return "", false, fmt.Errorf("%w: unknown action %q", ErrInvalid, clipString(action))
	}
	if persist, err = boolean(w.Persist); err != nil {
		return "", false, fmt.Errorf("%w: persist: %v", ErrInvalid, err)
	}
	return action, persist, nil
}
