package topic

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxLen is the longest topic or filter MQTT can carry.
const MaxLen = 65535

// MaxSubjectLen is the longest NATS subject (ToSubject's form) of a topic
// or filter that ValidName and ValidFilter accept. A NATS connection
// carries a subject on one protocol line of at most 4 KiB (the server's
// max_control_line), with a reply subject and lengths beside it; a longer
// line makes the server close the connection for good, and the front ends
// and the persistence store each share one connection among all their
// clients. ARENA's topics are a few dozen bytes.
const MaxSubjectLen = 2048

// ValidName reports whether name is a valid MQTT topic name for a PUBLISH:
// non-empty, UTF-8, no NUL and no wildcard characters.
func ValidName(name string) error {
	if err := validCommon(name); err != nil {
		return err
	}
	if strings.ContainsAny(name, "+#") {
		return fmt.Errorf("topic name %s contains a wildcard", Clip(name))
	}
	return nil
}

// ValidFilter reports whether f is a valid MQTT topic filter: "+" only as a
// whole level, "#" only as the whole last level.
func ValidFilter(f string) error {
	if err := validCommon(f); err != nil {
		return err
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		if strings.Contains(l, "#") && (l != "#" || i != len(levels)-1) {
			return fmt.Errorf("topic filter %s: '#' must be the whole last level", Clip(f))
		}
		if strings.Contains(l, "+") && l != "+" {
			return fmt.Errorf("topic filter %s: '+' must be a whole level", Clip(f))
		}
	}
	return nil
}

func validCommon(s string) error {
	if s == "" {
		return errors.New("empty topic")
	}
	if len(s) > MaxLen {
		return fmt.Errorf("topic of %d bytes is longer than %d", len(s), MaxLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("topic %s is not valid UTF-8", Clip(s))
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("topic %s contains NUL", Clip(s))
	}
	// A byte becomes at most 3 in the subject, an empty level 3 for none.
	if 4*len(s)+3 > MaxSubjectLen {
		if n := len(ToSubject(s)); n > MaxSubjectLen {
			return fmt.Errorf("topic %s of %d bytes is too long for the bus: its NATS subject has %d bytes, over the limit of %d", Clip(s), len(s), n, MaxSubjectLen)
		}
	}
	return nil
}

// Match reports whether topic name matches the MQTT filter. Both are taken
// as valid. As MQTT requires, a filter starting with a wildcard does not
// match a topic starting with '$'.
func Match(filter, name string) bool {
	if len(name) > 0 && name[0] == '$' && len(filter) > 0 && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	for {
		fl, frest, fmore := cut(filter)
		if fl == "#" {
			return true
		}
		nl, nrest, nmore := cut(name)
		if fl != "+" && fl != nl {
			return false
		}
		if !fmore && !nmore {
			return true
		}
		if !nmore {
			// "a/#" also matches "a".
			return fmore && frest == "#"
		}
		if !fmore {
			return false
		}
		filter, name = frest, nrest
	}
}

// Covers reports whether every topic matched by filter sub is also matched
// by filter super. A subscription to sub is allowed by a right to super
// exactly when Covers(super, sub).
func Covers(super, sub string) bool {
	if len(sub) > 0 && (sub[0] == '+' || sub[0] == '#') && len(super) > 0 && super[0] != '+' && super[0] != '#' {
		// sub also matches '$' topics only if super does; a literal first
		// level in super cannot cover a wildcard first level in sub.
		return false
	}
	for {
		pl, prest, pmore := cut(super)
		if pl == "#" {
			return true
		}
		sl, srest, smore := cut(sub)
		if sl == "#" {
			// sub matches everything below here; only '#' in super covers it.
			return false
		}
		switch {
		case pl == "+":
			// covers any single level, literal or '+'
		case sl == "+":
			return false
		case pl != sl:
			return false
		}
		if !pmore && !smore {
			return true
		}
		if !smore {
			// sub ends here; super has more levels. Only "x/#" matches "x".
			return prest == "#"
		}
		if !pmore {
			return false
		}
		super, sub = prest, srest
	}
}

// cut splits off the first level of s.
func cut(s string) (level, rest string, more bool) {
	i := strings.IndexByte(s, '/')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}
