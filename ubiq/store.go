package ubiq

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xrealm/xrealm/bus"
)

// Room state in the key-value bucket:
//
//	r.{room}.i         roomRecord: name, join code, publish, properties,
//	                   and how many members each node counts in (a room
//	                   has a join code while it counts any)
//	r.{room}.m.{peer}  memberRecord: the member's PeerInfo and properties
//	r.{room}.n.{node}  a node that has the room active (relays frames to it):
//	                   it has local members or observers there, so the
//	                   room is not empty (observers have no key of their own)
//	c.{code}           join code -> room uuid
//	b.{room}.{blob}    blob
//	bb.{room}          bytes the room's blobs take (Config.MaxRoomBlobBytes)
//	h.{node}           a node's heartbeat, rewritten every NodeHeartbeat
//	e.{node}.{key}     index of the ephemeral keys (members, observers,
//	                   presence) a node wrote: when the node's heartbeat
//	                   stops, the surviving nodes delete them
//
// Peer and blob names that are not plain tokens are escaped by keyToken.

// roomRecord is a room's stored info.
type roomRecord struct {
	UUID     string `json:"uuid"`
	JoinCode string `json:"joincode"` // "" while Joined is empty
	Publish  bool   `json:"publish"`
	Name     string `json:"name"`
	Props    props  `json:"props"`
	// Gen is set when the record is created: a record deleted and created
	// again is another room for the counts below.
	Gen string `json:"gen,omitempty"`
	// Joined holds, by node, the claims of the connections that joined
	// the room and have not left it (claimRoom, unclaimRoom): one id per
	// join, so that a count-out removes its own claim, and one applied
	// twice (a write that landed but reported an error, then retried)
	// removes nothing more. A room has a join code while it holds any
	// claim, and it is not removed while it does.
	Joined map[string][]string `json:"joined,omitempty"`
}

// newClaimID returns a random id for a claim on a room (roomRecord.Joined).
func newClaimID() string {
	var b [12]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (r *roomRecord) info() RoomInfo {
	return RoomInfo{UUID: r.UUID, JoinCode: r.JoinCode, Publish: r.Publish, Name: r.Name, Keys: nonNil(r.Props.Keys), Values: nonNil(r.Props.Values)}
}

// memberRecord is a member's stored info.
type memberRecord struct {
	UUID     string    `json:"uuid"`
	SceneID  NetworkId `json:"sceneid"`
	ClientID NetworkId `json:"clientid"`
	Props    props     `json:"props"`
	Node     string    `json:"node,omitempty"` // the node that wrote it
	// Session is the session id of the connection that wrote it: a
	// connection's write whose answer was lost is still its own.
	Session string `json:"session,omitempty"`
}

func (m *memberRecord) info() PeerInfo {
	return PeerInfo{UUID: m.UUID, SceneID: m.SceneID, ClientID: m.ClientID, Keys: nonNil(m.Props.Keys), Values: nonNil(m.Props.Values)}
}

// keyToken returns s if it is a plain key token, else an escaped form that
// cannot collide with one ('=' never occurs in a plain token).
func keyToken(s string) string {
	if s != "" && len(s) <= 128 && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) < 0 {
		return s
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

// MaxNameLen is the longest blob uuid or room name, in bytes: a blob's
// uuid is part of a key-value key, whose subject a NATS connection carries
// on one protocol line of at most 4 KiB, and a longer line makes the
// server close the connection that the whole Ubiq server shares. Ubiq's
// own are uuids, 36 bytes. It bounds a room's name too (see
// RoomPropsLimitError).
const MaxNameLen = 1024

// MaxPeerUUIDLen is the longest peer uuid, in bytes: besides naming its
// member key, it tags the peer's frames and positions on the bus with a
// one-byte length (appendBus).
const MaxPeerUUIDLen = 255

// NameError refuses a peer uuid, blob uuid or room name longer than its
// bound (MaxPeerUUIDLen, MaxNameLen).
type NameError struct {
	What     string // "peer uuid", "blob uuid", "room name"
	Len, Max int
}

func (e *NameError) Error() string {
	return fmt.Sprintf("%s of %d bytes is longer than the longest, %d", e.What, e.Len, e.Max)
}

// checkName returns a *NameError if name is longer than max bytes.
func checkName(what, name string, max int) error {
	if len(name) > max {
		return &NameError{What: what, Len: len(name), Max: max}
	}
	return nil
}

func infoKey(room string) string         { return "r." + room + ".i" }
func memberKey(room, peer string) string { return "r." + room + ".m." + keyToken(peer) }
func codeKey(code string) string         { return "c." + code }
func blobKey(room, blob string) string   { return "b." + room + "." + keyToken(blob) }

// validUUID reports whether s is a UUID in its canonical 36-character
// form (any version), as Ubiq requires of room ids.
func validUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// newUUID returns a random RFC 4122 version 4 UUID.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

const joinCodeChars = "abcdefghijklmnopqrstuvwxyz0123456789"

const (
	// joinCodes is how many join codes there are: 36^3.
	joinCodes = len(joinCodeChars) * len(joinCodeChars) * len(joinCodeChars)
	// joinCodeTries is how many random codes a room tries before it gives
	// up: with 95% of the codes taken, 1 join in 27 fails; with 90%, 1 in
	// 850.
	joinCodeTries = 64
)

// newJoinCode returns a random three-character join code.
func newJoinCode() string {
	var b [3]byte
	rand.Read(b[:])
	for i := range b {
		b[i] = joinCodeChars[int(b[i])%len(joinCodeChars)]
	}
	return string(b[:])
}

func heartbeatKey(node string) string  { return "h." + node }
func ownedKey(node, key string) string { return "e." + node + "." + key }
func presenceKey(room, activation string) string {
	return "r." + room + ".n." + activation
}

// store reads and writes room state.
type store struct {
	kv       jetstream.KeyValue
	js       jetstream.JetStream // kv's, for purging its old delete markers
	node     string              // this node's name in owned keys
	newProps func() props        // properties of a new room
	newCode  func() string       // a random join code; nil = newJoinCode (tests draw from fewer)
	// wrote, if set, is told of every room record this node writes, and
	// its revision (nil: the room was removed; rev is then the revision
	// of the record deleted), for the listing of published rooms.
	wrote func(uuid string, r *roomRecord, rev uint64)
	// afterPut, if set, is called with the key of each ephemeral key
	// written (putOwned), after the write: an error it returns is
	// putOwned's, as if the write's answer was lost. Tests only.
	afterPut *atomic.Pointer[func(key string) error]
	// afterIndex, if set, is called with the key of each ephemeral key
	// written (putOwned), between the write of its index entry and the
	// key's. Tests only.
	afterIndex *atomic.Pointer[func(key string)]
	// sweepStep, if set, is called by sweepKey with the key after it read
	// it ("read") and after it deleted it ("deleted"). Tests only.
	sweepStep func(step, key string)
}

func (s *store) recordWritten(uuid string, r *roomRecord, rev uint64) {
	if s.wrote != nil {
		s.wrote(uuid, r, rev)
	}
}

// putOwned writes an ephemeral key of this node, indexing it first so that
// the surviving nodes find it if this node dies. If it fails, the key may
// have been written all the same (its answer lost), and its index entry
// was: unless the key was there before, the caller deletes both
// (deleteOwned, deleteMember), or the index entry stays until the node
// dies, and the key with it.
//
// A sweep of this node (another took it for dead) may delete the entry
// after its write and before the key's, and find no key to put it back
// for (sweepKey): putOwned then writes it again (keepIndexed). That can
// only happen if something else was written to the bucket between the two
// writes (revisions are the bucket's stream sequence, and a deletion is a
// write): when the key's revision follows the entry's, nothing was, and
// the check, a round trip, is skipped. A deletion of the entry after the
// key landed is the sweep's to undo, which it does.
func (s *store) putOwned(ctx context.Context, key string, value []byte) (uint64, error) {
	idxRev, err := s.kv.Put(ctx, ownedKey(s.node, key), nil)
	if err != nil {
		return 0, err
	}
	if f := s.afterIndex.Load(); f != nil { // tests
		(*f)(key)
	}
	rev, err := s.kv.Put(ctx, key, value)
	if f := s.afterPut.Load(); f != nil && err == nil { // tests
		if err := (*f)(key); err != nil {
			return 0, err
		}
	}
	if err != nil {
		return 0, err
	}
	if rev != idxRev+1 {
		if err := s.keepIndexed(ctx, key); err != nil {
			return 0, fmt.Errorf("%s written, but its index entry could not be checked (a sweep of this node may have deleted it): %w", key, err)
		}
	}
	return rev, nil
}

// deleteOwned deletes an ephemeral key of this node and its index entry.
func (s *store) deleteOwned(ctx context.Context, key string) error {
	if err := s.kv.Delete(ctx, key); err != nil {
		return err
	}
	return s.kv.Delete(ctx, ownedKey(s.node, key))
}

// keepIndexed writes the index entry of key, an ephemeral key of this
// node just written, if it is gone: a sweep of this node (another took it
// for dead) that read the entry before the write's own and ended before
// the key landed deleted it (sweepKey puts back an entry only for a key
// that landed before it looked). Without it, the key would stay for good
// if this node then died.
func (s *store) keepIndexed(ctx context.Context, key string) error {
	_, err := s.kv.Get(ctx, ownedKey(s.node, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		_, err = s.kv.Put(ctx, ownedKey(s.node, key), nil)
	}
	return err
}

// openStore creates or binds the bucket.
func openStore(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, maxValue int) (jetstream.KeyValue, error) {
	cfg := jetstream.KeyValueConfig{
		Bucket:       bucket,
		Description:  "xrealm Ubiq rooms: info, members, observers, join codes, blobs",
		History:      1,
		Storage:      jetstream.MemoryStorage,
		Replicas:     replicas,
		MaxValueSize: int32(maxValue),
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ubiq room bucket %q: %w", bucket, err)
	}
	return kv, nil
}

// getRoom returns a room's record and its revision.
func (s *store) getRoom(ctx context.Context, room string) (*roomRecord, uint64, error) {
	e, err := s.kv.Get(ctx, infoKey(room))
	if err != nil {
		return nil, 0, err
	}
	var r roomRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, 0, fmt.Errorf("room %s: corrupt record: %w", room, err)
	}
	return &r, e.Revision(), nil
}

// JoinCodeError refuses a join that needs a new join code when none is
// free: every one of joinCodeTries random codes was in use. Rooms hold a
// code while they have members, so this means that nearly all 46,656
// codes are held by rooms with members.
type JoinCodeError struct {
	Room  string
	Tries int
}

func (e *JoinCodeError) Error() string {
	return fmt.Sprintf("no free join code for room %s: %d random codes were all in use (of %d three-character codes; rooms with members hold one each)", e.Room, e.Tries, joinCodes)
}

// errCodeGone: a room found by its join code lost that code (its last
// member left) before the joiner counted itself in.
var errCodeGone = errors.New("the room no longer has that join code")

// reserveCode reserves a free join code for room, and returns it and the
// revision of its key. It tries prefer first, if set (takeBackCode).
func (s *store) reserveCode(ctx context.Context, room, prefer string) (string, uint64, error) {
	if prefer != "" {
		if rev, err := s.takeBackCode(ctx, room, prefer); err != nil {
			return "", 0, err
		} else if rev != 0 {
			return prefer, rev, nil
		}
	}
	gen := s.newCode
	if gen == nil {
		gen = newJoinCode
	}
	for range joinCodeTries {
		code := gen()
		rev, err := s.kv.Create(ctx, codeKey(code), []byte(room))
		if err == nil {
			return code, rev, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", 0, fmt.Errorf("reserve a join code for room %s: %w", room, err)
		}
	}
	return "", 0, &JoinCodeError{Room: room, Tries: joinCodeTries}
}

// takeBackTries bounds takeBackCode's rounds against the freeing of the
// code under way.
const takeBackTries = 4

// takeBackCode reserves join code code, which room had, for room again,
// and returns the revision of its key (0: another room has it). A code
// free is reserved as any; a code whose key still names the room, on its
// way to be freed (the room gave it up), is taken back by writing the key
// again, so that the freeing, conditional on the revision it read, leaves
// it alone.
func (s *store) takeBackCode(ctx context.Context, room, code string) (uint64, error) {
	key := codeKey(code)
	for range takeBackTries {
		rev, err := s.kv.Create(ctx, key, []byte(room))
		if err == nil {
			return rev, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, fmt.Errorf("reserve join code %s for room %s again: %w", code, room, err)
		}
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // freed meanwhile
		} else if err != nil {
			return 0, fmt.Errorf("reserve join code %s for room %s again: %w", code, room, err)
		}
		if string(e.Value()) != room {
			return 0, nil
		}
		rev, err = s.kv.Update(ctx, key, []byte(room), e.Revision())
		if err == nil {
			return rev, nil
		} else if !bus.IsRevisionConflict(err) {
			return 0, fmt.Errorf("reserve join code %s for room %s again: %w", code, room, err)
		}
	}
	return 0, nil
}

// freeCode deletes join code key code if it is still at rev. A key that
// changed since is left alone (it is gone, or another room's), and that is
// no error.
func (s *store) freeCode(ctx context.Context, code string, rev uint64) error {
	err := s.kv.Purge(ctx, codeKey(code), jetstream.LastRevision(rev))
	if err != nil && !bus.IsRevisionConflict(err) {
		return fmt.Errorf("free join code %s: %w", code, err)
	}
	return nil
}

// codeNotFreedError reports a join code that a room gave up but whose key
// could not be deleted: until it is (freeCode), no room can take that
// code.
type codeNotFreedError struct {
	room, code string
	rev        uint64
	err        error
}

func (e *codeNotFreedError) Error() string {
	return fmt.Sprintf("room %s gave up join code %s, but its key stays: %v", e.room, e.code, e.err)
}

func (e *codeNotFreedError) Unwrap() error { return e.err }

// freeCodeOf frees the code of a *codeNotFreedError. Without its
// revision, the key is deleted if it still names the room and the room
// does not hold that code again. A writer of the room whose record write
// with the code lands after that check writes the key again
// (holdWrittenCode): the purge, at the revision read, then fails, or is
// undone.
func (s *store) freeCodeOf(ctx context.Context, e *codeNotFreedError) error {
	rev := e.rev
	if rev == 0 {
		k, err := s.kv.Get(ctx, codeKey(e.code))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		} else if err != nil {
			return fmt.Errorf("free join code %s: %w", e.code, err)
		}
		if string(k.Value()) != e.room {
			return nil
		}
		switch r, _, err := s.getRoom(ctx, e.room); {
		case err == nil && r.JoinCode == e.code:
			return nil // taken again
		case err != nil && !errors.Is(err, jetstream.ErrKeyNotFound):
			return fmt.Errorf("free join code %s: %w", e.code, err)
		}
		rev = k.Revision()
	}
	return s.freeCode(ctx, e.code, rev)
}

// observeRoom creates room uuid, if it does not exist, for observers: with
// no join code (a room takes one when a peer joins it, see claimRoom), so
// that observing rooms never uses up codes.
func (s *store) observeRoom(ctx context.Context, uuid string) error {
	if _, _, err := s.getRoom(ctx, uuid); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	rec := &roomRecord{UUID: uuid, Name: uuid, Props: s.newProps(), Gen: newUUID()}
	b, _ := json.Marshal(rec)
	wrev, err := s.kv.Create(ctx, infoKey(uuid), b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil
	} else if err != nil {
		return fmt.Errorf("create room %s: %w", uuid, err)
	}
	s.recordWritten(uuid, rec, wrev)
	return nil
}

// claimRoom counts one more member of this node into room uuid, under
// claim id claim (newClaimID; unclaimRoom takes it out), creating
// the room if it does not exist, and returns the record as written and its
// revision. A room without members has no join code (Ubiq's server deletes
// a room its last peer leaves, and a join creates it anew): it takes a free
// code here, and the joiner's name ("" = the uuid) and publish flag. With
// code set, the join is by that code, which the room must still have
// (errCodeGone). No free code is a *JoinCodeError. The count comes before
// the member key: while it is there the room keeps its code and is not
// removed.
func (s *store) claimRoom(ctx context.Context, uuid, code, name, claim string, publish bool) (*roomRecord, uint64, error) {
	if name == "" {
		name = uuid
	}
	for {
		r, rev, err := s.getRoom(ctx, uuid)
		missing := errors.Is(err, jetstream.ErrKeyNotFound)
		if err != nil && !missing {
			return nil, 0, err
		}
		if code != "" && (missing || r.JoinCode != code) {
			return nil, 0, errCodeGone
		}
		if missing {
			r = &roomRecord{UUID: uuid, Props: s.newProps(), Gen: newUUID()}
		}
		if r.JoinCode == "" {
			r.Name, r.Publish = name, publish
		}
		if r.Joined == nil {
			r.Joined = map[string][]string{}
		}
		if !slices.Contains(r.Joined[s.node], claim) { // not in already (a retried claim)
			r.Joined[s.node] = append(r.Joined[s.node], claim)
		}
		wrev, err := s.putClaimed(ctx, r, rev, "")
		if err == nil {
			return r, wrev, nil
		}
		if !errors.Is(err, errClaimConflict) {
			return nil, 0, err
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
	}
}

// errClaimConflict: the room's record changed since it was read (putClaimed).
var errClaimConflict = errors.New("the room's record changed since it was read")

// putClaimed writes room record r, read at revision rev (0: there was
// none, it is created), to which claims were added, and returns the
// revision written. A record without a join code takes a free one first
// (prefer, if it is free), and holds it once written (holdWrittenCode).
// A record that changed since rev is errClaimConflict: nothing is
// written, and a code reserved for it is freed, unless it is prefer and
// the record names it now (freeUnwritten).
func (s *store) putClaimed(ctx context.Context, r *roomRecord, rev uint64, prefer string) (uint64, error) {
	var fresh string
	var freshRev uint64
	if r.JoinCode == "" {
		var err error
		if fresh, freshRev, err = s.reserveCode(ctx, r.UUID, prefer); err != nil {
			return 0, err
		}
		r.JoinCode = fresh
	}
	b, _ := json.Marshal(r)
	var wrev uint64
	var err error
	if rev == 0 {
		wrev, err = s.kv.Create(ctx, infoKey(r.UUID), b)
	} else {
		wrev, err = s.kv.Update(ctx, infoKey(r.UUID), b, rev)
	}
	if err == nil {
		s.recordWritten(r.UUID, r, wrev)
		if fresh != "" {
			return s.holdWrittenCode(ctx, r, wrev)
		}
		return wrev, nil
	}
	conflict := bus.IsRevisionConflict(err)
	if fresh != "" && !conflict {
		// The write may have landed all the same (its answer lost):
		// the code's key stays until the retrier finds the room
		// without that code (freeCodeOf without a revision), which
		// is when the caller's count-out of the claim took it, or at
		// once if the write did not land. Freed now, another room
		// could take a code this room's record still names.
		return 0, errors.Join(fmt.Errorf("write room %s: %w", r.UUID, err),
			&codeNotFreedError{room: r.UUID, code: fresh, err: fmt.Errorf("the room's write may have landed: %w", err)})
	}
	if fresh != "" {
		if ferr := s.freeUnwritten(ctx, r.UUID, fresh, freshRev, fresh == prefer); ferr != nil {
			return 0, errors.Join(fmt.Errorf("write room %s: %w", r.UUID, err), ferr)
		}
	}
	if !conflict {
		return 0, fmt.Errorf("write room %s: %w", r.UUID, err)
	}
	return 0, errClaimConflict
}

// holdWrittenCode writes the key of the join code of room record r,
// reserved for r's write, which landed at revision rev, again
// (takeBackCode), and returns the revision of the record that holds a
// code. A freeing of the code that read its key before, conditional on
// that revision, then fails: one that found the record without the code
// (another writer's write that failed, the retrier's freeCodeOf). A key
// freed meanwhile is created again; if another room took the code
// meanwhile, r takes another and is written again (while it names the
// code: a record that changed since is read again). r is the record as
// last written or read.
func (s *store) holdWrittenCode(ctx context.Context, r *roomRecord, rev uint64) (uint64, error) {
	code := r.JoinCode
	krev, err := s.takeBackCode(ctx, r.UUID, code)
	if err != nil {
		return 0, fmt.Errorf("room %s written with join code %s: %w", r.UUID, code, err)
	}
	if krev != 0 {
		return rev, nil
	}
	for r.JoinCode == code {
		r.JoinCode = ""
		wrev, err := s.putClaimed(ctx, r, rev, "")
		if err == nil {
			return wrev, nil
		}
		if !errors.Is(err, errClaimConflict) {
			return 0, err
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		cur, crev, err := s.getRoom(ctx, r.UUID)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0, errClaimConflict // removed: the caller creates it again
		} else if err != nil {
			return 0, err
		}
		*r, rev = *cur, crev
	}
	return rev, nil
}

// freeUnwritten frees join code code, reserved at revision rev for a
// write of room's record that found the record changed. A code taken back
// (takenBack: the room's code before) is left alone if the record names
// it now: another writer of the room (a put-back on another node) took
// the same code back, after this one reserved it, and wrote the record
// with it. An error is a *codeNotFreedError.
func (s *store) freeUnwritten(ctx context.Context, room, code string, rev uint64, takenBack bool) error {
	if takenBack {
		switch r, _, err := s.getRoom(ctx, room); {
		case err == nil && r.JoinCode == code:
			return nil // the other writer's
		case err != nil && !errors.Is(err, jetstream.ErrKeyNotFound):
			// Without the revision, the retrier frees it only if the
			// record does not name it (freeCodeOf).
			return &codeNotFreedError{room: room, code: code, err: fmt.Errorf("read the room's record: %w", err)}
		}
	}
	if err := s.freeCode(ctx, code, rev); err != nil {
		return &codeNotFreedError{room: room, code: code, rev: rev, err: err}
	}
	return nil
}

// unclaimRoom counts the member of node with claim id claim out of room
// uuid (claim "": all of node's, for a dead node), if the room is still
// generation gen ("" = any). A claim that is not there (counted out
// already: this is a retry of a count-out whose write landed) is left
// alone, so a count-out is never applied twice. The last member out takes
// the join code with it: a room that only observers hold has none.
func (s *store) unclaimRoom(ctx context.Context, uuid, gen, node, claim string) error {
	for {
		r, rev, err := s.getRoom(ctx, uuid)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		if gen != "" && r.Gen != gen {
			return nil
		}
		claims := r.Joined[node]
		if claim != "" {
			i := slices.Index(claims, claim)
			if i < 0 {
				return nil
			}
			claims = slices.Delete(slices.Clone(claims), i, i+1)
		} else if len(claims) == 0 {
			return nil
		} else {
			claims = nil
		}
		if len(claims) == 0 {
			delete(r.Joined, node)
		} else {
			r.Joined[node] = claims
		}
		var code string
		var codeRev uint64
		if len(r.Joined) == 0 && r.JoinCode != "" {
			// The code's key is read before the record changes: once it
			// has, a new reservation of the same code is a new revision,
			// which the conditional purge leaves alone.
			code = r.JoinCode
			e, err := s.kv.Get(ctx, codeKey(code))
			if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				return fmt.Errorf("leave room %s: read its join code %s: %w", uuid, code, err)
			}
			if err == nil && string(e.Value()) == uuid {
				codeRev = e.Revision()
			}
			r.JoinCode = ""
		}
		b, _ := json.Marshal(r)
		var wrev uint64
		if wrev, err = s.kv.Update(ctx, infoKey(uuid), b, rev); err == nil {
			s.recordWritten(uuid, r, wrev)
			if codeRev != 0 {
				if err := s.freeCode(ctx, code, codeRev); err != nil {
					return &codeNotFreedError{room: uuid, code: code, rev: codeRev, err: err}
				}
			}
			return nil
		}
		if !bus.IsRevisionConflict(err) {
			return fmt.Errorf("leave room %s: %w", uuid, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// roomByCode returns the uuid of the room with a join code.
func (s *store) roomByCode(ctx context.Context, code string) (string, error) {
	if len(code) != 3 || strings.Trim(code, joinCodeChars) != "" {
		return "", jetstream.ErrKeyNotFound
	}
	e, err := s.kv.Get(ctx, codeKey(code))
	if err != nil {
		return "", err
	}
	room := string(e.Value())
	if _, _, err := s.getRoom(ctx, room); err != nil {
		return "", err
	}
	return room, nil
}

func (s *store) putMember(ctx context.Context, room string, m *memberRecord) (uint64, error) {
	if err := checkName("peer uuid", m.UUID, MaxPeerUUIDLen); err != nil {
		return 0, err
	}
	m.Node = s.node
	b, _ := json.Marshal(m)
	return s.putOwned(ctx, memberKey(room, m.UUID), b)
}

// deleteMember deletes peer's member key in room, written by the
// connection of session, if it is still at revision rev (the writer's
// last write known; 0: none known) or holds that session all the same (a
// later write of the connection whose answer was lost); if another
// connection has written it since (a reconnect with the same uuid), the
// key and its index entry are that connection's and stay.
func (s *store) deleteMember(ctx context.Context, room, peer string, rev uint64, session string) error {
	key := memberKey(room, peer)
	for {
		var err error
		if rev != 0 {
			err = s.kv.Delete(ctx, key, jetstream.LastRevision(rev))
			if err == nil {
				return s.kv.Delete(ctx, ownedKey(s.node, key))
			}
			if !bus.IsRevisionConflict(err) {
				return err
			}
		}
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return s.kv.Delete(ctx, ownedKey(s.node, key))
		case err != nil:
			return err
		}
		var m memberRecord
		if json.Unmarshal(e.Value(), &m) == nil && m.Node == s.node && session != "" && m.Session == session {
			rev = e.Revision() // this connection's, written later than it knew
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		if m.Node == s.node {
			return nil // written since by another connection of this node
		}
		return s.kv.Delete(ctx, ownedKey(s.node, key))
	}
}

// heartbeat rewrites this node's heartbeat key.
func (s *store) heartbeat(ctx context.Context) error {
	_, err := s.kv.Put(ctx, heartbeatKey(s.node), []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	return err
}

// retryFunc does a write now, or hands it to the server's retrier, which
// calls do until it succeeds (Server.tryWrite); with inOrder, behind the
// room's writes that wait already. room is "" for a write that belongs to
// no room.
type retryFunc func(ctx context.Context, what, room string, inOrder bool, do func(ctx context.Context) error)

// sweepNode deletes the ephemeral keys that a dead node wrote (its
// members, observers and room presence), its count of members in the
// rooms where it had member keys, then its heartbeat. A key is deleted
// only if that node still owns it: a peer that reconnected to another node
// meanwhile keeps its new member key. A write that fails is handed to
// retry (a key's deletion with its index entry, a count-out, the
// heartbeat's deletion): the others go on, and no failure leaves a dead
// node's member in its room, or its count holding the room's join code,
// for good. It returns the rooms it touched; only a listing of the keys
// that fails fails the sweep (sweeping again is harmless).
func (s *store) sweepNode(ctx context.Context, node string, retry retryFunc) (rooms []string, err error) {
	prefix := ownedKey(node, "")
	keys, err := s.listKeys(ctx, prefix+">")
	if err != nil {
		return nil, fmt.Errorf("sweep node %s: list its keys: %w", node, err)
	}
	seen := map[string]bool{}
	joined := map[string]bool{} // rooms the dead node had members in
	for _, k := range keys {
		key := strings.TrimPrefix(k, prefix)
		room, rest, _ := strings.Cut(strings.TrimPrefix(key, "r."), ".")
		if strings.HasPrefix(rest, "m.") {
			joined[room] = true
		}
		retry(ctx, "delete a dead node's key", room, false, func(ctx context.Context) error { return s.sweepKey(ctx, node, key) })
		if !seen[room] {
			seen[room] = true
			rooms = append(rooms, room)
		}
	}
	// Its members' counts go with them, and with the last, a room's code.
	for room := range joined {
		retry(ctx, "count a dead node out", room, true, func(ctx context.Context) error { return s.unclaimRoom(ctx, room, "", node, "") })
	}
	retry(ctx, "delete a dead node's heartbeat", "", false, func(ctx context.Context) error { return s.kv.Delete(ctx, heartbeatKey(node)) })
	return rooms, nil
}

// sweepKey deletes key, which dead node wrote, if that node still owns
// it, then its index entry, unless the node wrote the key again meanwhile:
// the node may be alive (cut off from the bus for a while), and writes its
// presence key again when it sees it deleted (room.announceAgain); a key
// it holds must keep its entry, or nobody deletes the key if it then dies.
// So the entry is deleted only at the revision read before the key was
// (putOwned writes the entry before the key: a write since then changed
// it), and put back if the node's key is there after all (a write whose
// entry came before that read, whose key landed after). A write whose key
// lands after this ends finds its entry gone: its writer puts it back
// (putOwned, keepIndexed).
func (s *store) sweepKey(ctx context.Context, node, key string) error {
	idx := ownedKey(node, key)
	var idxRev uint64
	switch e, err := s.kv.Get(ctx, idx); {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// Deleted by its node, or by an earlier try of this sweep.
	case err != nil:
		return fmt.Errorf("sweep node %s: read the index entry of %s: %w", node, key, err)
	default:
		idxRev = e.Revision()
	}
	owned, rev, err := s.ownedBy(ctx, key, node)
	if err != nil {
		return fmt.Errorf("sweep node %s: read %s: %w", node, key, err)
	}
	if s.sweepStep != nil {
		s.sweepStep("read", key)
	}
	if owned {
		if err := s.kv.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil && !bus.IsRevisionConflict(err) {
			return fmt.Errorf("sweep node %s: delete %s: %w", node, key, err)
		}
	}
	if s.sweepStep != nil {
		s.sweepStep("deleted", key)
	}
	if idxRev == 0 {
		return nil
	}
	err = s.kv.Delete(ctx, idx, jetstream.LastRevision(idxRev))
	if bus.IsRevisionConflict(err) {
		return nil // written again: the node writes its key again, or did
	}
	if err != nil {
		return fmt.Errorf("sweep node %s: delete the index entry of %s: %w", node, key, err)
	}
	owned, _, err = s.ownedBy(ctx, key, node)
	if err != nil {
		return fmt.Errorf("sweep node %s: read %s again after deleting its index entry: %w", node, key, err)
	}
	if owned {
		if _, err := s.kv.Create(ctx, idx, nil); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("sweep node %s: put back the index entry of %s, written again: %w", node, key, err)
		}
	}
	return nil
}

// ownedBy reports whether key still holds what node wrote, and its
// revision. A key that is gone is owned by nobody; a read that fails is an
// error.
func (s *store) ownedBy(ctx context.Context, key, node string) (bool, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, 0, nil
	} else if err != nil {
		return false, 0, err
	}
	rest := strings.TrimPrefix(key, "r.")
	_, rest, _ = strings.Cut(rest, ".")
	switch {
	case strings.HasPrefix(rest, "m."):
		var m memberRecord
		return json.Unmarshal(e.Value(), &m) == nil && m.Node == node, e.Revision(), nil
	case strings.HasPrefix(rest, "o."):
		return string(e.Value()) == node, e.Revision(), nil
	case strings.HasPrefix(rest, "n."):
		return strings.HasPrefix(rest[2:], node+"-"), e.Revision(), nil
	}
	return false, 0, nil
}

// RoomPropsLimitError refuses a room property append that would make the
// room's SetRoom message (its RoomInfo, quoted twice) larger than half the
// largest frame (the other half leaves room for its name, at most
// MaxNameLen bytes, and the record's claims): a queue takes no server
// message over twice its byte bound, so a joiner sent one would be
// disconnected, and a record near the store's largest value would take no
// more claims, so nobody could join the room.
type RoomPropsLimitError struct {
	Room        string
	Size, Limit int // the SetRoom message's size, and its limit
}

func (e *RoomPropsLimitError) Error() string {
	return fmt.Sprintf("room %s: its properties would make its SetRoom message %d bytes, more than the limit of %d (half the largest frame)", e.Room, e.Size, e.Limit)
}

// appendRoomProps applies an append to a room's properties with a
// compare-and-set loop, and returns the keys that changed. With limit > 0,
// an append that makes the room's SetRoom message larger and more than
// limit bytes is a *RoomPropsLimitError.
func (s *store) appendRoomProps(ctx context.Context, room string, keys, values []string, limit int) ([]string, []string, error) {
	for {
		r, rev, err := s.getRoom(ctx, room)
		if err != nil {
			return nil, nil, err
		}
		was := 0
		if limit > 0 {
			was = len(encodeSetRoom(r.info()))
		}
		ck, cv := r.Props.appendAll(keys, values)
		if len(ck) == 0 {
			return nil, nil, nil
		}
		if limit > 0 {
			if n := len(encodeSetRoom(r.info())); n > limit && n > was {
				return nil, nil, &RoomPropsLimitError{Room: room, Size: n, Limit: limit}
			}
		}
		b, _ := json.Marshal(r)
		if wrev, err := s.kv.Update(ctx, infoKey(room), b, rev); err == nil {
			s.recordWritten(room, r, wrev)
			return ck, cv, nil
		} else if !bus.IsRevisionConflict(err) {
			return nil, nil, err
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
	}
}

// removeIfEmpty deletes a room, its join code and its blobs when it has
// no members and no observers left: no member counted in (Joined), no
// member keys, no other node's presence, and held (this node's own
// connections) false.
func (s *store) removeIfEmpty(ctx context.Context, room string, held func() bool) (bool, error) {
	r, rev, err := s.getRoom(ctx, room)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		return false, err
	}
	// A joiner counted itself in: its member key follows. (A count of a
	// node whose heartbeat is gone, swept as dead, holds nothing: that
	// node died between counting a peer in and indexing its member key.)
	for node := range r.Joined {
		if node == s.node {
			return false, nil
		}
		if _, err := s.kv.Get(ctx, heartbeatKey(node)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
	}
	// Members, and the presence keys of other nodes (a node holds a room
	// while it has local members or observers there). This node's own
	// presence may still be on its way out: the caller checked that no
	// local connection holds the room.
	keys, err := s.listKeys(ctx, "r."+room+".m.*", "r."+room+".n.*")
	if err != nil {
		return false, err
	}
	own := "r." + room + ".n." + s.node + "-"
	for _, k := range keys {
		if !strings.HasPrefix(k, own) {
			return false, nil
		}
	}
	if held() {
		return false, nil
	}
	if err := s.kv.Delete(ctx, infoKey(room), jetstream.LastRevision(rev)); bus.IsRevisionConflict(err) {
		return false, nil // changed meanwhile: someone is using it
	} else if err != nil {
		return false, fmt.Errorf("remove room %s: %w", room, err)
	}
	s.recordWritten(room, nil, rev)
	var codeErr error
	if r.JoinCode != "" {
		e, err := s.kv.Get(ctx, codeKey(r.JoinCode))
		switch {
		case err == nil && string(e.Value()) == room:
			if err := s.freeCode(ctx, r.JoinCode, e.Revision()); err != nil {
				codeErr = &codeNotFreedError{room: room, code: r.JoinCode, rev: e.Revision(), err: err}
			}
		case err != nil && !errors.Is(err, jetstream.ErrKeyNotFound):
			codeErr = &codeNotFreedError{room: room, code: r.JoinCode, err: err} // revision unknown
		}
	}
	if err := s.purgeBlobs(ctx, room); err != nil {
		return true, errors.Join(codeErr, &blobsNotPurgedError{room: room, err: err})
	}
	return true, codeErr
}

// blobsNotPurgedError reports a removed room whose blobs, or their count,
// could not all be deleted: purgeBlobs again.
type blobsNotPurgedError struct {
	room string
	err  error
}

func (e *blobsNotPurgedError) Error() string {
	return fmt.Sprintf("room %s was removed, but not all its blobs: %v", e.room, e.err)
}

func (e *blobsNotPurgedError) Unwrap() error { return e.err }

// purgeBlobs deletes the blobs of room, which was removed, then their
// count (so the count is never below what the blobs take). A room that was
// created again meanwhile (its record is back) keeps them and their
// count, as a room that was never removed: its new members may have
// written some. Their revisions are read before the record is: a room
// created after that read writes new revisions, which the conditional
// purges leave alone.
func (s *store) purgeBlobs(ctx context.Context, room string) error {
	keys, err := s.listKeys(ctx, "b."+room+".*")
	if err != nil {
		return fmt.Errorf("list the blobs: %w", err)
	}
	keys = append(keys, blobBytesKey(room)) // last
	revs := make([]uint64, len(keys))
	for i, k := range keys {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		} else if err != nil {
			return fmt.Errorf("read %s: %w", k, err)
		}
		revs[i] = e.Revision()
	}
	switch _, _, err := s.getRoom(ctx, room); {
	case err == nil:
		return nil // created again: the blobs are its own
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return err
	}
	for i, k := range keys {
		if revs[i] == 0 {
			continue
		}
		if err := s.kv.Purge(ctx, k, jetstream.LastRevision(revs[i])); err != nil && !bus.IsRevisionConflict(err) {
			return fmt.Errorf("purge %s: %w", k, err)
		}
	}
	return nil
}

func (s *store) listKeys(ctx context.Context, filters ...string) ([]string, error) {
	l, err := s.kv.ListKeysFiltered(ctx, filters...)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, err
	}
	defer l.Stop()
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// discover returns the room with a join code (none if no room has it).
// Without a code, DiscoverRooms lists the published rooms: see
// Server.published.
func (s *store) discover(ctx context.Context, code string) ([]RoomInfo, error) {
	out := []RoomInfo{}
	room, err := s.roomByCode(ctx, code)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return out, nil
	} else if err != nil {
		return nil, err
	}
	r, _, err := s.getRoom(ctx, room)
	if err != nil {
		return out, nil
	}
	return append(out, r.info()), nil
}

// blobOverhead is what a blob costs against a room's blob budget besides
// its key and value: a key-value entry's headers, roughly. So a flood of
// empty blobs under new names runs out of budget too.
const blobOverhead = 64

// blobCost is what blob value v under key costs against the budget.
func blobCost(key string, v int) int64 { return int64(len(key) + v + blobOverhead) }

// BlobLimitError refuses a SetBlob that would take a room's blobs past
// Config.MaxRoomBlobBytes.
type BlobLimitError struct {
	Room       string
	Used, Cost int64 // bytes the room's blobs take, and what the new one would add
	Limit      int64
}

func (e *BlobLimitError) Error() string {
	return fmt.Sprintf("room %s: its blobs take %d bytes, and %d more would exceed the limit of %d", e.Room, e.Used, e.Cost, e.Limit)
}

// setBlob stores blob id in room. With limit > 0, the room's blobs may
// take at most limit bytes (blobCost each), counted under blobBytesKey:
// a write that would go past it is a *BlobLimitError. The count and the
// blob are both conditional writes, so concurrent writers on any node
// keep it exact (a node that dies between the two leaves it too high,
// never too low, until the room goes).
func (s *store) setBlob(ctx context.Context, room, id, blob string, limit int64) error {
	if err := checkName("blob uuid", id, MaxNameLen); err != nil {
		return err
	}
	key := blobKey(room, id)
	if limit <= 0 {
		_, err := s.kv.Put(ctx, key, []byte(blob))
		return err
	}
	for {
		var old int64
		var rev uint64
		switch e, err := s.kv.Get(ctx, key); {
		case err == nil:
			old, rev = blobCost(key, len(e.Value())), e.Revision()
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return err
		}
		delta := blobCost(key, len(blob)) - old
		if delta > 0 {
			if err := s.addBlobBytes(ctx, room, delta, limit); err != nil {
				return err
			}
		}
		var err error
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, []byte(blob))
		} else {
			_, err = s.kv.Update(ctx, key, []byte(blob), rev)
		}
		if err == nil || !bus.IsRevisionConflict(err) {
			if err != nil && delta > 0 {
				s.addBlobBytes(ctx, room, -delta, 0) // not written: give the bytes back
			} else if err == nil && delta < 0 {
				s.addBlobBytes(ctx, room, delta, 0)
			}
			return err
		}
		// Another writer came first: give the bytes back and start again.
		if delta > 0 {
			if err := s.addBlobBytes(ctx, room, -delta, 0); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// blobBytesKey counts the bytes of a room's blobs (blobCost).
func blobBytesKey(room string) string { return "bb." + room }

// addBlobBytes adds delta to the count of room's blob bytes with a
// compare-and-set loop. An increase that would take it past limit (> 0) is
// a *BlobLimitError; a decrease never is.
func (s *store) addBlobBytes(ctx context.Context, room string, delta, limit int64) error {
	key := blobBytesKey(room)
	for {
		var used int64
		var rev uint64
		switch e, err := s.kv.Get(ctx, key); {
		case err == nil:
			used, _ = strconv.ParseInt(string(e.Value()), 10, 64)
			rev = e.Revision()
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return err
		}
		if delta > 0 && limit > 0 && used+delta > limit {
			return &BlobLimitError{Room: room, Used: used, Cost: delta, Limit: limit}
		}
		v := []byte(strconv.FormatInt(max(used+delta, 0), 10))
		var err error
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, v)
		} else {
			_, err = s.kv.Update(ctx, key, v, rev)
		}
		if !bus.IsRevisionConflict(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (s *store) getBlob(ctx context.Context, room, id string) (string, error) {
	if err := checkName("blob uuid", id, MaxNameLen); err != nil {
		return "", err
	}
	e, err := s.kv.Get(ctx, blobKey(room, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(e.Value()), nil
}

// purgeMarkers removes old delete markers so that rooms that came and went
// do not accumulate, each only up to its own revision: a key written again
// meanwhile (a room of the same uuid, a member back) keeps its new value,
// which KeyValue.PurgeDeletes would remove with the marker.
func (s *store) purgeMarkers(ctx context.Context) error {
	_, err := bus.PurgeOldDeleteMarkers(ctx, s.js, s.kv, 10*time.Minute)
	return err
}
