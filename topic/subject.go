package topic

import (
	"fmt"
	"strings"
)

// ToSubject maps an MQTT topic name or filter to a NATS subject. Levels
// become tokens; "+" and "#" levels become "*" and ">". Inside a level, the
// bytes NATS does not accept in a token ('.', space, tab, CR, LF, '%') are
// written as %XX, and a level that is empty or that is exactly "*" or ">"
// (possible in an MQTT topic name, where they are not wildcards) is written
// as "%00", "%2A" or "%3E". The mapping is reversible with FromSubject.
func ToSubject(t string) string {
	if !needsEscape(t) {
		return strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(t, "/", "."), "+", "*"), "#", ">")
	}
	var b strings.Builder
	b.Grow(len(t) + 8)
	for i, l := range strings.Split(t, "/") {
		if i > 0 {
			b.WriteByte('.')
		}
		switch l {
		case "":
			b.WriteString("%00")
			continue
		case "+":
			b.WriteByte('*')
			continue
		case "#":
			b.WriteByte('>')
			continue
		case "*":
			b.WriteString("%2A")
			continue
		case ">":
			b.WriteString("%3E")
			continue
		}
		for j := 0; j < len(l); j++ {
			c := l[j]
			switch c {
			case '.', ' ', '\t', '\r', '\n', '%':
				fmt.Fprintf(&b, "%%%02X", c)
			default:
				b.WriteByte(c)
			}
		}
	}
	return b.String()
}

func needsEscape(t string) bool {
	if t == "" || t[0] == '/' || t[len(t)-1] == '/' || strings.Contains(t, "//") {
		return true
	}
	for i := 0; i < len(t); i++ {
		switch t[i] {
		case '.', ' ', '\t', '\r', '\n', '%':
			return true
		case '*', '>':
			return true // rare: take the careful path
		}
	}
	return false
}

// FromSubject maps a NATS subject produced by ToSubject back to the MQTT
// topic or filter. Subjects that ToSubject cannot produce (a bad escape,
// a wildcard or separator inside a token, an escape of a character that
// needs none) yield an error naming the subject: a NATS client must not
// reach MQTT subscribers with a topic that no MQTT publish could have.
func FromSubject(s string) (string, error) {
	if !strings.ContainsAny(s, "%*>+#/") {
		return strings.ReplaceAll(s, ".", "/"), nil
	}
	var b strings.Builder
	b.Grow(len(s))
	toks := strings.Split(s, ".")
	for i, tok := range toks {
		if i > 0 {
			b.WriteByte('/')
		}
		switch tok {
		case "*":
			b.WriteByte('+')
			continue
		case ">":
			if i != len(toks)-1 {
				return "", fmt.Errorf("subject %q: '>' is token %d of %d; as a wildcard ('#') it must be the last", s, i+1, len(toks))
			}
			b.WriteByte('#')
			continue
		case "%00":
			continue
		}
		for j := 0; j < len(tok); j++ {
			c := tok[j]
			if c == '+' || c == '#' {
				// ToSubject maps only whole "+" and "#" levels (to "*" and
				// ">"); one inside a level is no MQTT topic's, yet a token
				// that also holds a '*' would map back to itself.
				return "", fmt.Errorf("subject %q: MQTT wildcard %q inside token %q", s, c, tok)
			}
			if c != '%' {
				b.WriteByte(c)
				continue
			}
			if j+2 >= len(tok) {
				return "", fmt.Errorf("subject %q: truncated escape in token %q", s, tok)
			}
			v, ok := unhex(tok[j+1], tok[j+2])
			if !ok {
				return "", fmt.Errorf("subject %q: bad escape %q", s, tok[j:j+3])
			}
			b.WriteByte(v)
			j += 2
		}
	}
	out := b.String()
	if ToSubject(out) != s {
		return "", fmt.Errorf("subject %q: not one that an MQTT topic maps to (it would read as %q)", s, out)
	}
	return out, nil
}

func unhex(a, b byte) (byte, bool) {
	h, ok1 := hexVal(a)
	l, ok2 := hexVal(b)
	return h<<4 | l, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// ScenePrefix returns the NATS subject that one in-process subscription of
// a front end uses to carry all messages that filter f can match: the
// filter's first four levels ({realm}/s/{ns}/{scene}), followed by ">" when
// the filter goes deeper. Filters that share a scene share the subject.
func ScenePrefix(f string) string {
	levels := strings.SplitN(f, "/", 5)
	if len(levels) == 5 {
		return ToSubject(strings.Join(levels[:4], "/")) + ".>"
	}
	return ToSubject(f)
}
