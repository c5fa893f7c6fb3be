package persist

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// create publishes a persisted create of id in scene sc of namespace ns,
// a child of parent unless parent is "".
func (e *env) create(sc, id, parent string) {
	e.t.Helper()
	data := `{}`
	if parent != "" {
		data = `{"parent":"` + parent + `"}`
	}
	e.pub("realm/s/ns/"+sc+"/o/uc1/"+id, `{"object_id":"`+id+`","action":"create","persist":true,"data":`+data+`}`)
}

// del publishes the delete of id in scene sc, and waits until it and every
// message before it are applied.
func (e *env) del(sc, id string) {
	e.t.Helper()
	e.pub("realm/s/ns/"+sc+"/o/uc1/"+id, `{"object_id":"`+id+`","action":"delete"}`)
	e.barrier("ns", sc)
}

// ids returns the ids of the live objects of scene sc, sorted.
func (e *env) ids(sc string) []string {
	e.t.Helper()
	objs, err := e.store.List(ctx5s(e.t), "ns", sc, "")
	if err != nil {
		e.t.Fatal(err)
	}
	out := []string{}
	for _, o := range objs {
		out = append(out, o.ObjectID)
	}
	slices.Sort(out)
	return out
}

// putDirect stores id in scene sc straight into the bucket, as another
// writer would (an older build, another node's applier).
func (e *env) putDirect(sc, id, parent string) {
	e.t.Helper()
	now := time.Now()
	o := &Object{ObjectID: id, Type: "box", Attributes: map[string]any{}, Persist: true, CreatedAt: now, UpdatedAt: now}
	if parent != "" {
		o.Attributes["parent"] = parent
	}
	val, err := encode(o)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.kv.Put(ctx5s(e.t), objectKey("ns", sc, id), val); err != nil {
		e.t.Fatal(err)
	}
}

// TestCascadeDeleteThroughIndex: the cascade delete finds an object's
// descendants through the applier's scene index (index.go), which is made
// ("warm") by a first delete in the scene and then only brought up to
// date; whatever changed the scene after it was made, a delete removes
// exactly the object and the objects below it, as a scan of the scene
// would.
func TestCascadeDeleteThroughIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before runs with the index made; it returns the id to delete.
		before func(e *env, sc string) string
		want   []string // the ids left
	}{
		{"descendants of an object not stored", func(e *env, sc string) string {
			e.create(sc, "b", "ghost")
			e.create(sc, "c", "b")
			e.create(sc, "x", "")
			return "ghost"
		}, []string{"keep", "x"}},
		{"reparented away", func(e *env, sc string) string {
			e.create(sc, "a", "")
			e.create(sc, "b", "")
			e.create(sc, "c", "a")
			e.create(sc, "d", "c")
			e.barrier("ns", sc)
			e.pub("realm/s/ns/"+sc+"/o/uc1/c", `{"object_id":"c","action":"update","persist":true,"data":{"parent":"b"}}`)
			return "a"
		}, []string{"b", "c", "d", "keep"}},
		{"reparented below", func(e *env, sc string) string {
			e.create(sc, "a", "")
			e.create(sc, "b", "")
			e.create(sc, "c", "b")
			e.barrier("ns", sc)
			e.pub("realm/s/ns/"+sc+"/o/uc1/b", `{"object_id":"b","action":"update","persist":true,"data":{"parent":"a"}}`)
			return "a"
		}, []string{"keep"}},
		{"parent removed by an update", func(e *env, sc string) string {
			e.create(sc, "a", "")
			e.create(sc, "c", "a")
			e.barrier("ns", sc)
			e.pub("realm/s/ns/"+sc+"/o/uc1/c", `{"object_id":"c","action":"update","persist":true,"data":{"parent":null}}`)
			return "a"
		}, []string{"c", "keep"}},
		{"a delete cut short, applied again", func(e *env, sc string) string {
			e.create(sc, "a", "")
			e.create(sc, "b", "a")
			e.create(sc, "c", "b")
			e.create(sc, "d", "b")
			e.barrier("ns", sc)
			// What the first delete of a did before it stopped.
			if err := e.store.kv.Delete(ctx5s(e.t), objectKey("ns", sc, "c")); err != nil {
				e.t.Fatal(err)
			}
			return "a"
		}, []string{"keep"}},
		{"written by another writer", func(e *env, sc string) string {
			e.create(sc, "a", "")
			e.barrier("ns", sc)
			e.putDirect(sc, "b", "a")
			e.putDirect(sc, "c", "b")
			e.putDirect(sc, "y", "")
			return "a"
		}, []string{"keep", "y"}},
		{"created again after a delete", func(e *env, sc string) string {
			e.create(sc, "a", "")
			e.create(sc, "b", "a")
			e.del(sc, "b")
			e.create(sc, "b", "a")
			e.create(sc, "c", "b")
			return "a"
		}, []string{"keep"}},
		{"more changes than the index reads one by one", func(e *env, sc string) string {
			e.create(sc, "a", "")
			for i := range 2 * minCatchUp {
				e.create(sc, "k"+strconv.Itoa(i), "a")
			}
			return "a"
		}, []string{"keep"}},
		{"after a scene delete", func(e *env, sc string) string {
			e.create(sc, "a", "")
			e.barrier("ns", sc)
			if _, err := e.store.DeleteScene(ctx5s(e.t), "ns", sc); err != nil {
				e.t.Fatal(err)
			}
			e.create(sc, "a", "")
			e.create(sc, "b", "a")
			e.create(sc, "keep", "")
			return "a"
		}, []string{"keep"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "", true)
			const sc = "sc"
			e.create(sc, "keep", "")
			e.del(sc, "nothing") // makes the scene's index
			id := tc.before(e, sc)
			e.barrier("ns", sc)
			e.del(sc, id)
			if got := e.ids(sc); !slices.Equal(got, tc.want) {
				t.Errorf("after the delete of %s: %v, want %v", id, got, tc.want)
			}
		})
	}
}

// TestCascadeDeleteAfterMarkerPurged: the index holds an object whose key
// was deleted by another writer, and whose delete marker was purged before
// the index read it. The cascade delete does not write a marker for it
// (its deletes are conditional on the revision the index holds): it scans
// the scene again, and removes what is there.
func TestCascadeDeleteAfterMarkerPurged(t *testing.T) {
	e := newEnv(t, "", true)
	e.create("sc", "a", "")
	e.create("sc", "b", "a")
	e.create("sc", "c", "a")
	e.del("sc", "nothing") // makes the scene's index
	key := objectKey("ns", "sc", "b")
	if err := e.store.kv.Delete(ctx5s(t), key); err != nil {
		t.Fatal(err)
	}
	if n, err := e.store.purgeMarkers(ctx5s(t), 0); err != nil || n == 0 {
		t.Fatalf("purged %d markers: %v", n, err)
	}
	e.del("sc", "a")
	if got := e.ids("sc"); len(got) != 0 {
		t.Fatalf("left after the delete of a: %v", got)
	}
	m, err := e.store.newest(ctx5s(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if m != nil {
		t.Fatalf("b's key, purged, was written again: %+v", m)
	}
}

// TestCascadeDeleteAcrossRestart: the index is made, the server and the
// store restart, objects are added, and the delete removes them all: the
// new process's index is made from the bucket.
func TestCascadeDeleteAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, dir, true)
	e.create("sc", "a", "")
	e.create("sc", "b", "a")
	e.del("sc", "nothing")
	e.stop()

	e = newEnv(t, dir, true)
	e.create("sc", "c", "b")
	e.create("sc", "keep", "")
	e.del("sc", "a")
	if got := e.ids("sc"); !slices.Equal(got, []string{"keep"}) {
		t.Fatalf("after the delete of a: %v, want [keep]", got)
	}
}

// TestCascadeDeleteOfExpired: an expired object's descendants go with it,
// with the scene's index made before they were created.
func TestCascadeDeleteOfExpired(t *testing.T) {
	e, clk := newClockEnv(t)
	e.create("sc", "keep", "")
	e.del("sc", "nothing") // makes the scene's index
	e.pub(tp+"p", `{"object_id":"p","action":"create","persist":true,"ttl":60,"data":{}}`)
	e.create("sc", "c", "p")
	e.create("sc", "g", "c")
	e.barrier("ns", "sc")
	clk.Advance(2 * time.Minute)
	for _, id := range []string{"p", "c", "g"} {
		e.waitGone("ns", "sc", id)
	}
	// And a second expiry in the same scene, through the index made by
	// the first.
	e.pub(tp+"q", `{"object_id":"q","action":"create","persist":true,"ttl":60,"data":{}}`)
	e.create("sc", "d", "q")
	e.barrier("ns", "sc")
	clk.Advance(2 * time.Minute)
	e.waitGone("ns", "sc", "q")
	e.waitGone("ns", "sc", "d")
	if got := e.ids("sc"); !slices.Equal(got, []string{"keep"}) {
		t.Fatalf("after the expiries: %v, want [keep]", got)
	}
}

// TestCascadeDeleteAfterApplierMoved: in a three-node cluster (the index
// read from the stream leader), node 0's applier makes the scene's index,
// node 1's applies creates below an object (the consumer moved there),
// and node 0's applies the delete of the object: every descendant goes.
func TestCascadeDeleteAfterApplierMoved(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := newJSCluster(t, 3)
	s0, s1 := c.open(0), c.open(1)
	if s0.single.Load() {
		t.Fatal("a store with three replicas reads its keys with direct gets")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	apply := func(s *Store, id, payload string) {
		t.Helper()
		if err := s.apply(ctx, topicSubject(tp+id), nil, []byte(payload)); err != nil {
			t.Fatalf("applying %s: %v", payload, err)
		}
	}
	create := func(s *Store, id, parent string) {
		apply(s, id, `{"object_id":"`+id+`","action":"create","persist":true,"data":{"parent":"`+parent+`"}}`)
	}
	create(s0, "a", "")
	create(s0, "b", "a")
	apply(s0, "nothing", `{"object_id":"nothing","action":"delete"}`) // node 0's index
	create(s1, "c", "b")
	create(s1, "d", "a")
	create(s1, "keep", "")
	apply(s1, "nothing", `{"object_id":"nothing","action":"delete"}`) // node 1's index
	apply(s0, "a", `{"object_id":"a","action":"delete"}`)
	objs, err := s1.List(ctx, "ns", "sc", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].ObjectID != "keep" {
		t.Fatalf("after the delete of a: %+v, want keep alone", objs)
	}
	// Node 1's index, made before node 0's delete, is brought up to date.
	create(s1, "e", "keep")
	apply(s1, "keep", `{"object_id":"keep","action":"delete"}`)
	if objs, err := s0.List(ctx, "ns", "sc", ""); err != nil || len(objs) != 0 {
		t.Fatalf("after the delete of keep: %+v, %v", objs, err)
	}
}

// TestCascadeDeleteOfOlderBuildsBucket: objects an older build stored (no
// index anywhere) before the store opened are found.
func TestCascadeDeleteOfOlderBuildsBucket(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir)
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx5s(t), jetstream.KeyValueConfig{Bucket: BucketName, History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct{ id, parent string }{{"a", ""}, {"b", "a"}, {"c", "b"}, {"keep", ""}} {
		attrs := map[string]any{}
		if o.parent != "" {
			attrs["parent"] = o.parent
		}
		val, err := encode(&Object{ObjectID: o.id, Type: "box", Attributes: attrs, Persist: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx5s(t), objectKey("ns", "sc", o.id), val); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	srv.Shutdown()
	srv.WaitForShutdown()

	e := newEnv(t, dir, true)
	e.del("sc", "a")
	if got := e.ids("sc"); !slices.Equal(got, []string{"keep"}) {
		t.Fatalf("after the delete of a: %v, want [keep]", got)
	}
}
