package scene

import (
	"bytes"
	"encoding/json"
)

// CaseVariant returns the first top-level key of the JSON object payload
// that equals one of names when case is ignored but not exactly. Go's
// encoding/json matches keys without regard to case, and a later key
// overrides an earlier one, so {"action":"create","Action":"clientEvent"}
// decodes as a clientEvent, while a browser reads a create: such messages
// must be refused, not decoded. payload must be valid JSON.
func CaseVariant(payload []byte, names ...string) (key string, found bool) {
	depth := 0
	for i := 0; i < len(payload); i++ {
		switch payload[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			j := i + 1
			escaped := false
			for j < len(payload) && payload[j] != '"' {
				if payload[j] == '\\' {
					escaped = true
					j++
				}
				j++
			}
			if j >= len(payload) {
				return "", false
			}
			raw := payload[i : j+1]
			i = j
			if depth != 1 {
				continue
			}
			k := j + 1
			for k < len(payload) && (payload[k] == ' ' || payload[k] == '\t' || payload[k] == '\n' || payload[k] == '\r') {
				k++
			}
			if k >= len(payload) || payload[k] != ':' {
				continue // a value, not a key
			}
			key := raw[1 : len(raw)-1]
			if escaped {
				var s string
				if json.Unmarshal(raw, &s) != nil {
					continue
				}
				key = []byte(s)
			}
			for _, n := range names {
				if string(key) != n && bytes.EqualFold(key, []byte(n)) {
					return string(key), true
				}
			}
		}
	}
	return "", false
}
