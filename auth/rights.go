package auth

import (
	"strings"

	"github.com/xrealm/xrealm/scene"
	"github.com/xrealm/xrealm/topic"
)

// Rights are the topic filters a token allows.
type Rights struct {
	Publ []string // may publish where a filter matches the topic
	Subs []string // may subscribe to filters these cover
	Evts []string // may publish only clientEvent messages where these match
}

// CanPublish reports whether a message may be published on topic.
func (r Rights) CanPublish(name string) bool {
	for _, f := range r.Publ {
		if topic.Match(f, name) {
			return true
		}
	}
	return false
}

// EventOnly reports whether topic allows only clientEvent messages: no publ
// filter matches it but an evts filter does.
func (r Rights) EventOnly(name string) bool {
	for _, f := range r.Evts {
		if topic.Match(f, name) {
			return true
		}
	}
	return false
}

// CanSubscribe reports whether a subscription to filter is allowed: some
// subs filter must cover it entirely.
func (r Rights) CanSubscribe(filter string) bool {
	for _, f := range r.Subs {
		if topic.Covers(f, filter) {
			return true
		}
	}
	return false
}

// IsClientEvent reports whether payload is a JSON object whose action is
// "clientEvent". It is how event-only rights are checked. It reads the
// action as a browser does: the last "action" key, null included (a
// string field would skip a null), and a payload with another spelling of
// the key ("Action", which encoding/json would read) is not one.
func IsClientEvent(payload []byte) bool {
	action, _, err := scene.Peek(payload)
	if err != nil || action != scene.ActionClientEvent {
		return false
	}
	_, variant := scene.CaseVariant(payload, "action")
	return !variant
}

// Role is what a user may do in a scene.
type Role string

// Roles.
const (
	RoleNone   Role = ""
	RoleViewer Role = "viewer"
	RoleEditor Role = "editor"
)

// ParseRole checks a role name.
func ParseRole(s string) (Role, bool) {
	switch Role(s) {
	case RoleViewer, RoleEditor:
		return Role(s), true
	}
	return RoleNone, false
}

// SceneRights returns the rights of role in scene ns/scene of realm.
// userClient limits a viewer's own topics to that client id; "" allows any
// (arena-py picks its client id after it has its token).
//
// An editor may publish and subscribe to everything in the scene. A viewer
// may subscribe to everything in the scene, publish its own presence, chat,
// user (camera, hands), render and program messages, and publish
// clientEvents (not edits) on object topics.
func SceneRights(realm, ns, scene string, role Role, userClient string) Rights {
	base := realm + "/s/" + ns + "/" + scene
	uc := userClient
	if uc == "" {
		uc = "+"
	}
	switch role {
	case RoleEditor:
		return Rights{Publ: []string{base + "/#"}, Subs: []string{base + "/#"}}
	case RoleViewer:
		r := Rights{Subs: []string{base + "/#"}}
		for _, m := range []string{topic.MsgPresence, topic.MsgChat, topic.MsgUser, topic.MsgRender, topic.MsgProgram, topic.MsgDebug} {
			r.Publ = append(r.Publ, base+"/"+m+"/"+uc+"/#")
		}
		r.Evts = []string{base + "/" + topic.MsgObjects + "/" + uc + "/#"}
		return r
	}
	return Rights{}
}

// ServiceRights returns the rights of a service node that joins the bus
// over NATS: publish and subscribe on its own subjects ("sfu/#" maps to the
// NATS subjects "sfu.>"), and replies through NATS inboxes.
func ServiceRights(service string) Rights {
	own := service + "/#"
	return Rights{Publ: []string{own}, Subs: []string{own, Inboxes}}
}

// IsService reports whether r are a service node's rights (ServiceRights:
// they subscribe to NATS's inboxes), which no user's token carries. Such a
// token signs a node in to the bus; it is no user's sign-in.
func (r Rights) IsService() bool { return r.CanSubscribe(Inboxes) }

// AnonymousPrefix starts the user name (sub) of every anonymous user's
// token. The rest is the display name the user chose, so the name is not
// unique: two anonymous users may both be anonymous-bob.
const AnonymousPrefix = "anonymous-"

// IsAnonymous reports whether sub names an anonymous user.
func IsAnonymous(sub string) bool { return strings.HasPrefix(sub, AnonymousPrefix) }

// Inboxes is the filter of NATS's reply subjects. Rights that subscribe to
// it are a service's (ServiceRights), and only those answer requests over
// NATS.
const Inboxes = "_INBOX/#"
