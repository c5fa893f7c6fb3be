package persist

import (
	"fmt"
	"strings"
)

// KV keys allow only [-/_=.a-zA-Z0-9], and '.' separates tokens. A key is
// escapeToken(ns) "." escapeToken(scene) "." escapeToken(objectID), where
// escapeToken keeps ASCII letters, digits, '-' and '_' and writes every
// other byte as '=' and two upper-case hex digits. The escaping is
// reversible and an escaped token never contains '.'.

func escapeToken(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			n++
		}
	}
	if n == 0 && s != "" {
		return s
	}
	if s == "" {
		return "=" // never produced by a valid topic level, kept reversible
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

func plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func unescapeToken(s string) (string, error) {
	if s == "=" {
		return "", nil
	}
	if !strings.Contains(s, "=") {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '=' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("key token %q: truncated escape", s)
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("key token %q: bad escape %q", s, s[i:i+3])
		}
		b = append(b, hi<<4|lo)
		i += 2
	}
	return string(b), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// sceneKey returns the key prefix of one scene, without the trailing dot.
func sceneKey(ns, scene string) string {
	return escapeToken(ns) + "." + escapeToken(scene)
}

// objectKey returns the KV key of one object.
func objectKey(ns, scene, id string) string {
	return sceneKey(ns, scene) + "." + escapeToken(id)
}

// splitKey reverses objectKey.
func splitKey(key string) (ns, scene, id string, err error) {
	parts := strings.Split(key, ".")
	if len(parts) != 3 {
		return "", "", "", fmt.Errorf("key %q: want 3 tokens, got %d", key, len(parts))
	}
	var out [3]string
	for i, p := range parts {
		if out[i], err = unescapeToken(p); err != nil {
			return "", "", "", err
		}
	}
	return out[0], out[1], out[2], nil
}
