package topic

import (
	"fmt"
	"strings"
)

// Kinds of ARENA topic, the second level of a topic.
const (
	KindScene   = "s"
	KindDevice  = "d"
	KindRuntime = "g"
)

// Scene message types, the fifth level of a scene topic.
const (
	MsgPresence = "x"
	MsgChat     = "c"
	MsgUser     = "u"
	MsgObjects  = "o"
	MsgRender   = "r"
	MsgEnv      = "e"
	MsgProgram  = "p"
	MsgDebug    = "d"
)

// SceneTopic is a parsed ARENA scene topic.
type SceneTopic struct {
	Realm      string
	Namespace  string
	Scene      string
	MsgType    string
	UserClient string
	ID         string
	ToUID      string // empty unless the message is addressed to one client
}

// String returns the topic in its MQTT form.
func (t SceneTopic) String() string {
	s := t.Realm + "/s/" + t.Namespace + "/" + t.Scene + "/" + t.MsgType + "/" + t.UserClient + "/" + t.ID
	if t.ToUID != "" {
		s += "/" + t.ToUID
	}
	return s
}

// SceneKey returns "namespace/scene".
func (t SceneTopic) SceneKey() string { return t.Namespace + "/" + t.Scene }

func validMsgType(m string) bool {
	switch m {
	case MsgPresence, MsgChat, MsgUser, MsgObjects, MsgRender, MsgEnv, MsgProgram, MsgDebug:
		return true
	}
	return false
}

// ParseScene parses an ARENA scene topic. It fails with an error that names
// the topic and the offending level when the topic is not of the form
// {realm}/s/{ns}/{scene}/{msgType}/{userClient}/{id}[/{toUid}].
func ParseScene(topic string) (SceneTopic, error) {
	var lv [9]string
	n := 0
	rest := topic
	for n < len(lv) {
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			lv[n] = rest
			n++
			rest = ""
			break
		}
		lv[n] = rest[:i]
		rest = rest[i+1:]
		n++
	}
	if rest != "" || n > 8 {
		return SceneTopic{}, fmt.Errorf("topic %s: too many levels for a scene topic (at most 8)", Clip(topic))
	}
	if n < 7 {
		return SceneTopic{}, fmt.Errorf("topic %s: %d levels, a scene topic has 7 or 8", Clip(topic), n)
	}
	if lv[1] != KindScene {
		return SceneTopic{}, fmt.Errorf("topic %s: level 2 is %s, want %q for a scene topic", Clip(topic), Clip(lv[1]), KindScene)
	}
	if !validMsgType(lv[4]) {
		return SceneTopic{}, fmt.Errorf("topic %s: unknown message type %s", Clip(topic), Clip(lv[4]))
	}
	names := [...]string{"realm", "", "namespace", "scene", "", "userClient", "id", "toUid"}
	for i := 0; i < n; i++ {
		if lv[i] == "" {
			return SceneTopic{}, fmt.Errorf("topic %s: empty %s level", Clip(topic), names[i])
		}
		if strings.ContainsAny(lv[i], "+#") {
			return SceneTopic{}, fmt.Errorf("topic %s: wildcard in %s level", Clip(topic), names[i])
		}
	}
	t := SceneTopic{Realm: lv[0], Namespace: lv[2], Scene: lv[3], MsgType: lv[4], UserClient: lv[5], ID: lv[6]}
	if n == 8 {
		t.ToUID = lv[7]
	}
	return t, nil
}

// SceneFilter returns the MQTT filter that covers every topic of one scene.
func SceneFilter(realm, namespace, scene string) string {
	return realm + "/s/" + namespace + "/" + scene + "/#"
}
