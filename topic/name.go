package topic

import (
	"fmt"
	"strings"
)

// SceneNameChars says which characters ValidSceneName accepts.
const SceneNameChars = "ASCII letters, digits, '-', '_' and '='"

// ValidSceneName reports whether name may be a namespace or a scene name;
// what ("namespace" or "scene") names it in the error. A name is one topic
// level that the scene settings store can use as part of a key: non-empty,
// made of SceneNameChars. That leaves out the MQTT wildcards '+' and '#',
// the level separator '/', NATS's token separator '.', spaces, and
// anything outside ASCII. The error names the first character refused.
func ValidSceneName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%s name is empty", what)
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

// ParseSceneName splits "namespace/scene" and checks both names with
// ValidSceneName.
func ParseSceneName(s string) (ns, scene string, err error) {
	ns, scene, ok := strings.Cut(s, "/")
	if !ok {
		return "", "", fmt.Errorf("scene %q: want namespace/scene", s)
	}
	if err := ValidSceneName("namespace", ns); err != nil {
		return "", "", fmt.Errorf("scene %q: %w", s, err)
	}
	if err := ValidSceneName("scene", scene); err != nil {
		return "", "", fmt.Errorf("scene %q: %w", s, err)
	}
	return ns, scene, nil
}

// ValidLevel reports whether s is one literal topic level: non-empty,
// without '/' and without the wildcards '+' and '#'. what names s in the
// error.
func ValidLevel(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case strings.ContainsAny(s, "+#"):
		return fmt.Errorf("%s %q contains an MQTT wildcard ('+' or '#'); it must be one literal topic level", what, s)
	case strings.Contains(s, "/"):
		return fmt.Errorf("%s %q contains '/'; it must be one topic level", what, s)
	}
	return nil
}
