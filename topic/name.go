package topic

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SceneNameChars says which characters ValidSceneName accepts.
const SceneNameChars = "ASCII letters, digits, '-', '_' and '='"

// MaxSceneNameLen is the longest namespace or scene name, in bytes. Names
// become parts of NATS subjects and of key-value keys (the persisted
// objects', the scene settings'), which a NATS connection carries on one
// protocol line of at most 4 KiB: a request naming a longer subject makes
// the server close the connection, and with it every service that shares
// it. ARENA's own names are far shorter.
const MaxSceneNameLen = 128

// ValidSceneName reports whether name may be a namespace or a scene name;
// what ("namespace" or "scene") names it in the error. A name is one topic
// level that the scene settings store can use as part of a key: non-empty,
// made of SceneNameChars. That leaves out the MQTT wildcards '+' and '#',
// the level separator '/', NATS's token separator '.', spaces, and
// anything outside ASCII, and names longer than MaxSceneNameLen. The error
// names the first character refused.
func ValidSceneName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%s name is empty", what)
	}
	if len(name) > MaxSceneNameLen {
		return fmt.Errorf("%s name %s of %d bytes is longer than the longest, %d", what, Clip(name), len(name), MaxSceneNameLen)
	}
	for _, c := range name {
		if sceneNameChar(c) {
			continue
		}
		why := ""
		switch c {
		case '+', '#':
			why = " (an MQTT wildcard: a name is one scene, never a pattern)"
		case '/':
			why = " (it separates namespace and scene)"
		}
		return fmt.Errorf("%s name %q: %q is not allowed%s; a name may contain only %s", what, name, c, why, SceneNameChars)
	}
	return nil
}

func sceneNameChar(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '='
}

// Clip returns s quoted, cut to a length that fits in an error message or
// a log line.
func Clip(s string) string {
	const most = 100
	if len(s) <= most {
		return fmt.Sprintf("%q", s)
	}
	n := most
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%q...", s[:n])
}

// ParseSceneName splits "namespace/scene" and checks both names with
// ValidSceneName.
func ParseSceneName(s string) (ns, scene string, err error) {
	ns, scene, ok := strings.Cut(s, "/")
	if !ok {
		return "", "", fmt.Errorf("scene %s: want namespace/scene", Clip(s))
	}
	if err := ValidSceneName("namespace", ns); err != nil {
		return "", "", fmt.Errorf("scene %s: %w", Clip(s), err)
	}
	if err := ValidSceneName("scene", scene); err != nil {
		return "", "", fmt.Errorf("scene %s: %w", Clip(s), err)
	}
	return ns, scene, nil
}

// ValidLevel reports whether s is one literal topic level: non-empty,
// without '/', without the wildcards '+' and '#', and without control
// characters (NATS refuses some of them in subjects, so a right naming
// one would be dropped). what names s in the error.
func ValidLevel(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%s %s contains a control character", what, Clip(s))
	case strings.ContainsAny(s, "+#"):
		return fmt.Errorf("%s %s contains an MQTT wildcard ('+' or '#'); it must be one literal topic level", what, Clip(s))
	case strings.Contains(s, "/"):
		return fmt.Errorf("%s %s contains '/'; it must be one topic level", what, Clip(s))
	}
	return nil
}
