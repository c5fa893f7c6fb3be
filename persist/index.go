package persist

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xrealm/xrealm/bus"
)

// The scene index: what a cascade delete needs to find an object's
// descendants without reading the whole scene.
//
// A delete removes the object and the stored objects below it through
// data.parent. Finding them by scanning the scene (every stored object,
// every delete marker) would make each delete cost the scene's size: that
// way 1,000 expiries in a scene of 1,000 objects take 6.3 s, and the
// applier, which serves every scene, falls behind for all of them.
//
// The applier keeps, in memory, for each scene it deleted in lately, every
// stored object's id, data.parent and revision, as of a revision of the
// bucket's stream (sceneIndex.rev): it reflects every message of the
// scene's keys up to it. The bucket stays the only state. Before each use
// the index is brought up to date from the bucket itself: the messages of
// the scene's keys after the index's revision are read one by one, in
// order, until there are no more (from the stream leader, which holds
// every acknowledged write, as every current read does: scan.go). So it
// cannot go stale, whoever wrote the bucket meanwhile: another node's
// applier (the consumer moved there and back), this process before a
// restart (the index starts empty), an older build (the index holds no
// state of its own), a sweeper's expiry, the applier's own deletes.
//
// Each message is read once, so a delete costs what the scene's writes
// since the last delete in it cost, and the delete of its subtree. When
// more messages wait than a quarter of the index's objects (and at least
// minCatchUp), one scan of the scene rebuilds it instead, as it does the
// first time.
//
// Two things could leave an object in the index that is not stored any
// more: the marker purger (markers.go) removing the delete marker of a
// key before the index read it, and an operator purging the bucket. An
// index not brought up to date for markerAge/2 is therefore dropped (the
// purger removes only markers older than markerAge, so this allows clocks
// minutes apart), and every delete is conditional on the revision the
// index holds: a key at another revision, or gone, makes the delete fail
// with a conflict, and the scene is scanned again. Dropping the stale
// indexes also bounds the memory they take.

// minCatchUp is the number of messages an index is brought up to date by
// one at a time before a scan of the scene is preferred, in a small scene.
const minCatchUp = 64

// sceneIndex is the stored objects of one scene, by key and by parent.
type sceneIndex struct {
	rev      uint64                         // every message of the scene's keys up to rev is in it
	synced   time.Time                      // when it was last brought up to date (Store.now)
	objs     map[string]indexed             // key -> the object stored under it
	children map[string]map[string]struct{} // parent id -> keys of the objects whose data.parent names it
}

// indexed is one stored object as the index holds it.
type indexed struct {
	id, parent string
	rev        uint64 // the key's revision
}

func newSceneIndex() *sceneIndex {
	return &sceneIndex{objs: map[string]indexed{}, children: map[string]map[string]struct{}{}}
}

// set records the newest message of key: the object o (nil for a delete
// or purge marker, or an object that does not decode) at revision rev.
func (x *sceneIndex) set(key string, o *Object, rev uint64) {
	if old, ok := x.objs[key]; ok {
		if kids := x.children[old.parent]; kids != nil {
			delete(kids, key)
			if len(kids) == 0 {
				delete(x.children, old.parent)
			}
		}
		delete(x.objs, key)
	}
	if o == nil {
		return
	}
	e := indexed{id: o.ObjectID, parent: o.parent(), rev: rev}
	x.objs[key] = e
	if e.parent == "" {
		return
	}
	kids := x.children[e.parent]
	if kids == nil {
		kids = map[string]struct{}{}
		x.children[e.parent] = kids
	}
	kids[key] = struct{}{}
}

// doomed is one key a cascade delete removes, at the revision the index
// holds for it.
type doomed struct {
	key string
	rev uint64
}

// subtree returns the keys of the object with id id (under key, if it is
// stored) and of every object below it through data.parent, each after
// every object below it: descendants before their ancestors.
func (x *sceneIndex) subtree(key, id string) []doomed {
	var out []doomed
	if e, ok := x.objs[key]; ok {
		out = append(out, doomed{key, e.rev})
	}
	seen := map[string]bool{id: true}
	queue := []string{id}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for k := range x.children[p] {
			c := x.objs[k]
			if seen[c.id] {
				continue
			}
			seen[c.id] = true
			out = append(out, doomed{k, c.rev})
			queue = append(queue, c.id)
		}
	}
	slices.Reverse(out) // each object was found after its parent
	return out
}

// cascadeDelete removes an object and every stored object below it through
// data.parent. The descendants are looked for even when the object itself
// is not stored (any more). Descendants go before their ancestors, so that
// a delete cut short (a crash, the store not answering) leaves the object
// itself, and the delete applied again finds what is left below it. It
// finds them through the scene's index, current as of the call: it costs
// the object's subtree and the scene's writes since the previous delete
// there, not the scene's size.
func (s *Store) cascadeDelete(ctx context.Context, ns, sc, id string) (bool, error) {
	key := objectKey(ns, sc, id)
	for conflicts := 0; ; conflicts++ {
		if err := s.afterConflict(ctx, key, conflicts); err != nil {
			return false, err
		}
		s.idxMu.Lock()
		x, err := s.sceneIndex(ctx, ns, sc)
		var keys []doomed
		if err == nil {
			keys = x.subtree(key, id)
		}
		s.idxMu.Unlock()
		if err != nil {
			return false, err
		}
		conflict := false
		for _, d := range keys {
			err := s.kv.Delete(ctx, d.key, jetstream.LastRevision(d.rev))
			if bus.IsRevisionConflict(err) {
				// Written since the index read it, or gone: read the
				// scene again (the deletes done stay done).
				s.log.Debug("persist: cascade delete found a key at another revision than its scene index; rescanning", "key", d.key, "revision", d.rev, "err", err)
				s.dropIndex(ns, sc)
				conflict = true
				break
			}
			if err != nil {
				return false, fmt.Errorf("persist: deleting %q: %w", d.key, err)
			}
		}
		if !conflict {
			return len(keys) > 0, nil
		}
	}
}

// dropIndex forgets the index of one scene.
func (s *Store) dropIndex(ns, sc string) {
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	delete(s.indexes, sceneKey(ns, sc))
}

// sceneIndex returns the index of scene ns/sc, holding every write
// acknowledged before the call: brought up to date from the bucket, or
// made from a scan of the scene. s.idxMu must be held.
func (s *Store) sceneIndex(ctx context.Context, ns, sc string) (*sceneIndex, error) {
	if err := checkScene(ns, sc); err != nil {
		return nil, err
	}
	sk := sceneKey(ns, sc)
	now := s.now()
	x := s.indexes[sk]
	if x != nil && (now.Sub(x.synced) > s.markerAge/2 || now.Before(x.synced)) {
		x = nil // see the comment at the top
	}
	if x != nil {
		ok, err := s.catchUp(ctx, x, sk+".>")
		if err != nil {
			return nil, fmt.Errorf("persist: reading scene %s/%s: %w", ns, sc, err)
		}
		if !ok {
			x = nil
		}
	}
	if x == nil {
		var err error
		if x, err = s.buildIndex(ctx, ns, sc); err != nil {
			return nil, err
		}
		// Forget the indexes not used lately: they would be dropped
		// at their next use anyway.
		for k, old := range s.indexes {
			if now.Sub(old.synced) > s.markerAge/2 {
				delete(s.indexes, k)
			}
		}
	}
	x.synced = now
	s.indexes[sk] = x
	return x, nil
}

// catchUp reads the messages of the keys matching filter after x.rev into
// x, until there are none: it then holds every write acknowledged before
// the call (the stream leader answers). It returns false, leaving x part
// way, when there are more than a scan of the scene is worth.
func (s *Store) catchUp(ctx context.Context, x *sceneIndex, filter string) (bool, error) {
	budget := max(minCatchUp, len(x.objs)/4)
	for range budget {
		m, err := s.nextMsg(ctx, filter, x.rev+1)
		if err != nil {
			return false, err
		}
		if m == nil {
			return true, nil
		}
		key, ok := strings.CutPrefix(m.subject, kvSubjectPrefix)
		if !ok {
			return false, fmt.Errorf("message %d of %s has subject %q, not one of the bucket's", m.seq, kvStream, m.subject)
		}
		x.set(key, s.indexObject(key, m), m.seq)
		x.rev = m.seq
	}
	return false, nil
}

// indexObject decodes the object of a message of key for the index: nil
// for a delete marker, or an object that does not decode (a scan leaves it
// out too).
func (s *Store) indexObject(key string, m *kvMsg) *Object {
	if m.deleted {
		return nil
	}
	o, err := s.decode(key, m.data)
	if err != nil {
		s.log.Warn("persist: skipping undecodable object", "key", key, "err", err)
		return nil
	}
	return o
}

// nextMsg returns the first message of the bucket whose subject matches
// the key pattern filter with a revision of at least seq, or nil when there
// is none. Like newest, it asks the stream leader, unless the bucket has a
// single replica.
func (s *Store) nextMsg(ctx context.Context, filter string, seq uint64) (*kvMsg, error) {
	if !s.single.Load() {
		return s.leaderGet(ctx, map[string]any{"seq": seq, "next_by_subj": kvSubjectPrefix + filter}, fmt.Sprintf("the first message of %s from %d", filter, seq))
	}
	m, err := s.kvStream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(kvSubjectPrefix+filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the first message of %s from %d: %w", filter, seq, err)
	}
	km := &kvMsg{subject: m.Subject, seq: m.Sequence, data: m.Data}
	if m.Header.Get(kvOperationHeader) != "" {
		km.deleted, km.data = true, nil
	}
	return km, nil
}

// buildIndex makes the index of scene ns/sc from a scan of it.
func (s *Store) buildIndex(ctx context.Context, ns, sc string) (*sceneIndex, error) {
	objs, newest, err := s.scan(ctx, ns, sc)
	if err != nil {
		return nil, err
	}
	x := newSceneIndex()
	x.rev = newest
	for _, e := range objs {
		x.set(e.key, e.obj, e.rev)
	}
	return x, nil
}
