package ubiq

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Request is a message to or from the room server: Type names it and Args
// holds its arguments as a JSON-encoded string.
type Request struct {
	Type string `json:"type"`
	Args string `json:"args"`
}

// PeerInfo describes a peer, as PeerAdded and Join carry it. Keys and
// Values are parallel lists of its properties.
type PeerInfo struct {
	UUID     string    `json:"uuid"`
	SceneID  NetworkId `json:"sceneid"`
	ClientID NetworkId `json:"clientid"`
	Keys     []string  `json:"keys"`
	Values   []string  `json:"values"`
}

// RoomInfo describes a room, as SetRoom and Rooms carry it.
type RoomInfo struct {
	UUID     string   `json:"uuid"`
	JoinCode string   `json:"joincode"`
	Publish  bool     `json:"publish"`
	Name     string   `json:"name"`
	Keys     []string `json:"keys"`
	Values   []string `json:"values"`
}

// JoinArgs are the arguments of Join: by UUID, by join code, or neither to
// create a room called Name.
type JoinArgs struct {
	JoinCode string   `json:"joincode,omitempty"`
	UUID     string   `json:"uuid,omitempty"`
	Name     string   `json:"name,omitempty"`
	Publish  bool     `json:"publish"`
	Peer     PeerInfo `json:"peer"`
}

// PropertiesArgs are the arguments of AppendPeerProperties and
// AppendRoomProperties, and of RoomPropertiesAppended.
type PropertiesArgs struct {
	Keys   []string `json:"keys"`
	Values []string `json:"values"`
}

// PeerPropertiesArgs are the arguments of PeerPropertiesAppended.
type PeerPropertiesArgs struct {
	UUID   string   `json:"uuid"`
	Keys   []string `json:"keys"`
	Values []string `json:"values"`
}

// ClientArgs are requests that only name the sender's RoomClient (Ping).
type ClientArgs struct {
	ClientID NetworkId `json:"clientid"`
}

// DiscoverArgs are the arguments of DiscoverRooms.
type DiscoverArgs struct {
	ClientID NetworkId `json:"clientid"`
	JoinCode string    `json:"joincode"`
}

// RoomsArgs answer DiscoverRooms.
type RoomsArgs struct {
	Rooms   []RoomInfo   `json:"rooms"`
	Version string       `json:"version"`
	Request DiscoverArgs `json:"request"`
}

// SetBlobArgs store a blob in the sender's room.
type SetBlobArgs struct {
	UUID string `json:"uuid"`
	Blob string `json:"blob"`
}

// GetBlobArgs ask for a blob of the sender's room.
type GetBlobArgs struct {
	ClientID NetworkId `json:"clientid"`
	UUID     string    `json:"uuid"`
}

// BlobArgs answer GetBlob ("" when there is no such blob).
type BlobArgs struct {
	UUID string `json:"uuid"`
	Blob string `json:"blob"`
}

// SetObservedArgs replace the set of rooms a peer observes (an xrealm
// extension for areas of interest).
type SetObservedArgs struct {
	ClientID NetworkId `json:"clientid"` // may come before Join; zero = unchanged
	Rooms    []string  `json:"rooms"`
}

// ObservedArgs acknowledge SetObserved with the rooms now observed.
type ObservedArgs struct {
	Rooms []string `json:"rooms"`
}

// RejectedArgs refuse a Join.
type RejectedArgs struct {
	Reason   string   `json:"reason"`
	JoinArgs JoinArgs `json:"joinArgs"`
}

// EncodeRequest returns the JSON of a server message of type typ.
func EncodeRequest(typ string, args any) []byte {
	a, err := json.Marshal(args)
	if err != nil {
		panic("ubiq: encode " + typ + ": " + err.Error()) // only our own types are encoded
	}
	b, _ := json.Marshal(Request{Type: typ, Args: string(a)})
	return b
}

// encodeSetRoom returns the SetRoom message for a room.
func encodeSetRoom(info RoomInfo) []byte {
	return EncodeRequest("SetRoom", struct {
		Room RoomInfo `json:"room"`
	}{info})
}

// encodeRooms returns the Rooms message answering request a with rooms,
// of which it lists the first that fit in limit bytes (all of them if
// limit <= 0), and how many it listed. The message quotes each RoomInfo a
// second time, character by character, so a room's share of it is its
// quoted JSON and a comma. It quotes a's join code too, which is cut to
// fit if it does not (a code of more than three characters finds no room
// anyway).
func encodeRooms(rooms []RoomInfo, a DiscoverArgs, limit int) ([]byte, int) {
	n := len(rooms)
	if limit > 0 {
		size := len(EncodeRequest("Rooms", RoomsArgs{Rooms: []RoomInfo{}, Version: roomsVersion, Request: a}))
		if size > limit {
			code := a.JoinCode
			a.JoinCode = ""
			empty := len(EncodeRequest("Rooms", RoomsArgs{Rooms: []RoomInfo{}, Version: roomsVersion, Request: a}))
			a.JoinCode = code
			fitStrings(limit-empty, &a.JoinCode)
			size = len(EncodeRequest("Rooms", RoomsArgs{Rooms: []RoomInfo{}, Version: roomsVersion, Request: a}))
		}
		for i, r := range rooms {
			b, _ := json.Marshal(r)
			q, _ := json.Marshal(string(b))
			if i > 0 {
				size++
			}
			if size += len(q) - 2; size > limit {
				n = i
				break
			}
		}
	}
	return EncodeRequest("Rooms", RoomsArgs{Rooms: rooms[:n], Version: roomsVersion, Request: a}), n
}

// encodeRejected returns the Rejected message refusing Join a for reason,
// at most limit bytes (> 0) long: it quotes a back, and a Join that fit a
// frame may not, quoted twice. What does not fit is cut: the peer's
// properties go first, then the strings (the reason, the room's uuid,
// code and name, and the peer's uuid) are cut to share what is left, the
// shortest kept whole first.
func encodeRejected(reason string, a JoinArgs, limit int) []byte {
	msg := EncodeRequest("Rejected", RejectedArgs{Reason: reason, JoinArgs: a})
	if limit <= 0 || len(msg) <= limit {
		return msg
	}
	a.Peer.Keys, a.Peer.Values = []string{}, []string{}
	if msg = EncodeRequest("Rejected", RejectedArgs{Reason: reason, JoinArgs: a}); len(msg) <= limit {
		return msg
	}
	strs := []*string{&reason, &a.UUID, &a.JoinCode, &a.Name, &a.Peer.UUID}
	saved := make([]string, len(strs))
	for i, p := range strs {
		saved[i], *p = *p, ""
	}
	empty := len(EncodeRequest("Rejected", RejectedArgs{Reason: reason, JoinArgs: a}))
	for i, p := range strs {
		*p = saved[i]
	}
	fitStrings(limit-empty, strs...)
	return EncodeRequest("Rejected", RejectedArgs{Reason: reason, JoinArgs: a})
}

// encodeBlob returns the Blob message answering GetBlob for uuid with
// blob. It quotes the uuid back, which is cut to fit limit (> 0) bytes if
// it does not: a uuid longer than MaxNameLen names no blob anyway (and a
// stored blob's answer fits, see SetBlob).
func encodeBlob(uuid, blob string, limit int) []byte {
	msg := EncodeRequest("Blob", BlobArgs{UUID: uuid, Blob: blob})
	if limit <= 0 || len(msg) <= limit {
		return msg
	}
	fitStrings(limit-len(EncodeRequest("Blob", BlobArgs{Blob: blob})), &uuid)
	return EncodeRequest("Blob", BlobArgs{UUID: uuid, Blob: blob})
}

// maxEscape is the most bytes that one byte of a string takes in a
// server message, which quotes it twice: '<' is \u003c in the args' JSON
// and \\u003c in the message's (a control character, U+2028 and an
// invalid byte alike; '"' takes four).
const maxEscape = 7

// fitStrings cuts the strings, at character boundaries, so that together
// they take at most room bytes of a server message (maxEscape a byte): the
// shortest are kept whole first, and the rest share what is left.
func fitStrings(room int, strs ...*string) {
	budget := max(room, 0) / maxEscape
	order := slices.Clone(strs)
	slices.SortStableFunc(order, func(a, b *string) int { return cmp.Compare(len(*a), len(*b)) })
	for i, p := range order {
		*p = cutString(*p, budget/(len(order)-i))
		budget -= len(*p)
	}
}

// cutString returns s cut to at most n bytes, at a character boundary.
func cutString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// roomsVersion is the version a Rooms message gives, Ubiq's.
const roomsVersion = "0.0.4"

// The exact bytes of a position-only AppendPeerProperties as EncodeRequest
// writes it (xrealm's bots send one every 200 ms): the fast path reads the
// position without two JSON decodes. Any other spelling takes the general
// path, with the same effect.
var (
	posReqHead = []byte(`{"type":"AppendPeerProperties","args":"{\"keys\":[\"` + PositionKey + `\"],\"values\":[\"`)
	posReqTail = []byte(`\"]}"}`)
)

// AppendPositionRequest appends a position-only AppendPeerProperties
// request for (x, y, z), "x,y,z" with two decimals, spelled exactly as
// EncodeRequest spells it: the server reads it on a fast path.
func AppendPositionRequest(b []byte, x, y, z float64) []byte {
	b = append(b, posReqHead...)
	b = strconv.AppendFloat(b, x, 'f', 2, 64)
	b = append(b, ',')
	b = strconv.AppendFloat(b, y, 'f', 2, 64)
	b = append(b, ',')
	b = strconv.AppendFloat(b, z, 'f', 2, 64)
	return append(b, posReqTail...)
}

// props is an ordered property dictionary with Ubiq's append semantics: an
// empty value deletes its key, and only keys whose value changed are
// reported.
type props struct {
	Keys   []string `json:"k,omitempty"`
	Values []string `json:"v,omitempty"`
}

func (p *props) get(k string) (string, bool) {
	for i, key := range p.Keys {
		if key == k {
			return p.Values[i], true
		}
	}
	return "", false
}

func (p *props) set(k, v string) bool {
	for i, key := range p.Keys {
		if key == k {
			if v == "" {
				p.Keys = append(p.Keys[:i], p.Keys[i+1:]...)
				p.Values = append(p.Values[:i], p.Values[i+1:]...)
				return true
			}
			if p.Values[i] == v {
				return false
			}
			p.Values[i] = v
			return true
		}
	}
	if v == "" {
		return false
	}
	p.Keys = append(p.Keys, k)
	p.Values = append(p.Values, v)
	return true
}

// appendAll applies keys and values (extra keys without a value are
// ignored) and returns the changed keys with their new values ("" for a
// deleted key), each key once, last value winning. It takes time linear in
// the keys held and given (an index, not a scan per key: a peer may send
// hundreds of thousands of keys in one message).
func (p *props) appendAll(keys, values []string) (ck, cv []string) {
	n := min(len(keys), len(values))
	if n == 0 {
		return nil, nil
	}
	if n == 1 { // the common case: no index
		if !p.set(keys[0], values[0]) {
			return nil, nil
		}
		v, _ := p.get(keys[0])
		return []string{keys[0]}, []string{v}
	}
	idx := make(map[string]int, len(p.Keys)+n) // a key's first entry
	var next map[int]int                       // an entry's next duplicate (none in what this package writes)
	last := map[string]int{}
	for i, k := range p.Keys {
		if j, dup := last[k]; dup {
			if next == nil {
				next = map[int]int{}
			}
			next[j] = i
		} else {
			idx[k] = i
		}
		last[k] = i
	}
	clear(last)
	dead := map[int]bool{} // entries deleted, dropped at the end
	changed := map[string]bool{}
	var order []string
	for i := range n {
		k, v := keys[i], values[i]
		j, ok := idx[k]
		switch {
		case !ok && v == "":
			continue
		case !ok:
			idx[k] = len(p.Keys)
			p.Keys = append(p.Keys, k)
			p.Values = append(p.Values, v)
		case v == "":
			dead[j] = true
			if d, dup := next[j]; dup {
				idx[k] = d // the duplicate is found now, as set would
			} else {
				delete(idx, k)
			}
		case p.Values[j] == v:
			continue
		default:
			p.Values[j] = v
		}
		if !changed[k] {
			changed[k] = true
			order = append(order, k)
		}
	}
	for _, k := range order {
		v := ""
		if j, ok := idx[k]; ok {
			v = p.Values[j]
		}
		ck = append(ck, k)
		cv = append(cv, v)
	}
	if len(dead) > 0 {
		w := 0
		for i := range p.Keys {
			if dead[i] {
				continue
			}
			p.Keys[w], p.Values[w] = p.Keys[i], p.Values[i]
			w++
		}
		clear(p.Keys[w:])
		clear(p.Values[w:])
		p.Keys, p.Values = p.Keys[:w], p.Values[:w]
	}
	return ck, cv
}

// value returns k's value, "" if it has none.
func (p *props) value(k string) string {
	v, _ := p.get(k)
	return v
}

// has reports whether k has the value v.
func (p *props) has(k, v string) bool {
	got, ok := p.get(k)
	return ok && got == v
}

func (p props) clone() props {
	return props{Keys: append([]string(nil), p.Keys...), Values: append([]string(nil), p.Values...)}
}

// diff returns the keys whose values differ from old to p ("" = deleted),
// in time linear in both.
func (p props) diff(old props) (ck, cv []string) {
	was := first(old)
	for i, k := range p.Keys {
		if j, ok := was[k]; !ok || old.Values[j] != p.Values[i] {
			ck = append(ck, k)
			cv = append(cv, p.Values[i])
		}
	}
	now := first(p)
	for _, k := range old.Keys {
		if _, ok := now[k]; !ok {
			ck = append(ck, k)
			cv = append(cv, "")
		}
	}
	return ck, cv
}

// first maps each key of p to its first index.
func first(p props) map[string]int {
	m := make(map[string]int, len(p.Keys))
	for i, k := range p.Keys {
		if _, dup := m[k]; !dup && i < len(p.Values) {
			m[k] = i
		}
	}
	return m
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
