package ubiq

import (
	"log/slog"
	"strconv"
	"strings"
)

// CoalesceKey is the peer property in which a peer names its objects whose
// frames carry state that each newer frame supersedes (an avatar's pose, a
// transform): NetworkIds in Ubiq's string form, "a-b" in hexadecimal
// ("1f2e-7" or "00001f2e-00000007"), separated by commas or spaces, or as
// a JSON array of such strings. When a receiver's queue is full, a newer
// frame from this peer to one of these objects replaces the older one
// still queued. Frames to any other object are events as far as the
// server knows (RPCs, a grab, WebRTC signalling): they never replace a
// queued frame, nor are they replaced, and a full queue takes them past its
// bound (see relayed). The property is stored and sent to the other peers
// like any other.
const CoalesceKey = "xrealm.coalesce"

// maxCoalesceIDs bounds the objects one peer may name in CoalesceKey; the
// rest are ignored.
const maxCoalesceIDs = 64

// parseCoalesce returns the NetworkIds named in a CoalesceKey value, at
// most maxCoalesceIDs, and the number of entries that were not NetworkIds.
func parseCoalesce(v string) (ids []NetworkId, bad int) {
	for _, s := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune(`, []"`+"\t\n\r", r) }) {
		id, ok := parseNetworkId(s)
		if !ok {
			bad++
			continue
		}
		if len(ids) < maxCoalesceIDs {
			ids = append(ids, id)
		}
	}
	return ids, bad
}

// parseNetworkId reads Ubiq's string form of a NetworkId: "a-b", each part
// 1 to 8 hexadecimal digits.
func parseNetworkId(s string) (NetworkId, bool) {
	as, bs, ok := strings.Cut(s, "-")
	if !ok {
		return NetworkId{}, false
	}
	a, err := strconv.ParseUint(as, 16, 32)
	if err != nil || len(as) > 8 {
		return NetworkId{}, false
	}
	b, err := strconv.ParseUint(bs, 16, 32)
	if err != nil || len(bs) > 8 {
		return NetworkId{}, false
	}
	return NetworkId{A: uint32(a), B: uint32(b)}, true
}

// stateKeys maps a room's state objects, by sender, to the key their
// frames are queued under (fanout.Frame.Key): the NetworkId's wire bytes
// and the sender, so that only the same sender's frames to the same object
// replace each other. A published map, and each sender's map in it, is
// never changed; the room goroutine replaces them, one sender's at a time
// (a change costs the room's senders, not all their objects).
type stateKeys map[string]map[NetworkId]string

// withSender returns a copy of m in which sender's state objects are ids
// (the other senders' maps are shared).
func (m stateKeys) withSender(sender string, ids []NetworkId) stateKeys {
	out := make(stateKeys, len(m)+1)
	for k, v := range m {
		if k != sender {
			out[k] = v
		}
	}
	if len(ids) == 0 {
		return out
	}
	own := make(map[NetworkId]string, len(ids))
	for _, id := range ids {
		var b [8]byte
		id.Put(b[:])
		own[id] = string(b[:]) + sender
	}
	out[sender] = own
	return out
}

// key returns the queue key of sender's frames to object id, if it is one
// of sender's state objects.
func (m stateKeys) key(sender string, id NetworkId) (string, bool) {
	k, ok := m[sender][id]
	return k, ok
}

// count returns the number of state objects of all senders.
func (m stateKeys) count() int {
	n := 0
	for _, own := range m {
		n += len(own)
	}
	return n
}

// setStateObjects records the objects that member props (sender) declared
// in CoalesceKey; the room goroutine calls it when a member is added,
// changes its properties or leaves (props nil).
func (r *room) setStateObjects(sender string, p *props) {
	var ids []NetworkId
	if p != nil {
		if v, ok := p.get(CoalesceKey); ok {
			var bad int
			if ids, bad = parseCoalesce(v); bad > 0 {
				r.logBounded(slog.LevelInfo, "Ubiq peer property "+CoalesceKey+": entries that are not NetworkIds ignored", "room", r.id, "peer", sender, "ignored", bad)
			}
		}
	}
	cur := r.state.Load()
	if cur == nil && len(ids) == 0 {
		return
	}
	if cur != nil && sameStateObjects(*cur, sender, ids) {
		return
	}
	var base stateKeys
	if cur != nil {
		base = *cur
	}
	next := base.withSender(sender, ids)
	r.state.Store(&next)
}

// sameStateObjects reports whether sender's state objects in m are ids.
func sameStateObjects(m stateKeys, sender string, ids []NetworkId) bool {
	own := m[sender]
	for _, id := range ids {
		if _, ok := own[id]; !ok {
			return false
		}
	}
	return len(own) == len(uniqueIDs(ids))
}

func uniqueIDs(ids []NetworkId) map[NetworkId]bool {
	u := make(map[NetworkId]bool, len(ids))
	for _, id := range ids {
		u[id] = true
	}
	return u
}

// frameKey returns the queue key of a frame from sender: its state key if
// sender declared the frame's object as state, else "" (never coalesced).
func (r *room) frameKey(sender string, frame []byte) string {
	m := r.state.Load()
	if m == nil || len(*m) == 0 {
		return ""
	}
	k, _ := m.key(sender, IDOf(frame))
	return k
}
