package persist

import (
	"github.com/nats-io/nats.go"
	"github.com/xrealm/xrealm/scene"
)

// changesState is the applier's rule: only deletes, and creates and updates
// that ask to persist, change the stored scene. Everything else on an
// object topic (clientEvents, transient creates and updates) is relayed but
// never stored.
func changesState(action string, persist bool) bool {
	switch action {
	case scene.ActionDelete:
		return true
	case scene.ActionCreate, scene.ActionUpdate:
		return persist
	}
	return false
}

// Ignored reports whether the applier would certainly ignore an object
// message with this payload: a well-formed action that changesState says
// no to. A payload it cannot read is not ignored: the stream stores it and
// the applier rejects it with a logged reason.
func Ignored(payload []byte) bool {
	action, persist, err := scene.Peek(payload)
	return err == nil && !changesState(action, persist)
}

// SkipStream marks a bus message so that the persistence stream does not
// store it, while every subscriber still receives it: JetStream refuses a
// message whose Nats-Expected-Stream header names another stream, before
// storing or replicating it. Front ends mark the object messages that
// Ignored reports, which saves the stream, its consumer and the applier
// their work on clicks and transient updates.
func SkipStream(h nats.Header) {
	h.Set(nats.ExpectedStreamHdr, "xrealm-not-persisted")
}
