package persist

import (
	"strconv"
	"testing"
	"time"

	"github.com/xrealm/xrealm/bus"
)

// TestDeleteMarkersPurged: the delete markers that deletes leave in the
// bucket are purged once old (here at once), so that a scene whose objects
// come and go does not make every later scan of it longer; an object
// created again on a purged key is stored and updated as any other. It
// fails if a marker stays for ever.
func TestDeleteMarkersPurged(t *testing.T) {
	e := newEnv(t, "", false)
	e.store.markerAge, e.store.markerEvery = 0, 50*time.Millisecond
	e.run()

	e.pub(tp+"keep", `{"object_id":"keep","action":"create","persist":true,"data":{}}`)
	var keys []string
	for i := range 10 {
		id := "gone" + strconv.Itoa(i)
		keys = append(keys, objectKey("ns", "sc", id))
		e.pub(tp+id, `{"object_id":"`+id+`","action":"create","persist":true,"data":{}}`)
		e.pub(tp+id, `{"object_id":"`+id+`","action":"delete"}`)
	}
	e.barrier("ns", "sc")
	for _, key := range keys {
		eventually(t, "the delete marker of "+key+" purged", func() bool {
			m, err := e.store.leaderNewest(ctx5s(t), key)
			if err != nil {
				t.Fatal(err)
			}
			return m == nil
		})
	}

	e.pub(tp+"gone0", `{"object_id":"gone0","action":"create","persist":true,"data":{"v":1,"w":1}}`)
	e.pub(tp+"gone0", `{"object_id":"gone0","action":"update","persist":true,"data":{"v":2}}`)
	o := e.waitObject("ns", "sc", "gone0", func(o Object) bool { return o.Attributes["v"] == 2.0 })
	jsonEq(t, o.Attributes, `{"v":2,"w":1}`)
	objs, err := e.store.List(ctx5s(t), "ns", "sc", "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, o := range objs {
		ids = append(ids, o.ObjectID)
	}
	if len(ids) != 2 || ids[0] != "gone0" || ids[1] != "keep" {
		t.Fatalf("scene holds %q, want [gone0 keep]", ids)
	}
}

// TestPurgeMarkerKeepsNewerValue: a marker is purged only up to its own
// revision, so an object created again between the purger's reading of the
// markers and its purge stays (KeyValue.PurgeDeletes would remove every
// message of the key).
func TestPurgeMarkerKeepsNewerValue(t *testing.T) {
	e := newEnv(t, "", true)
	e.pub(tp+"x", `{"object_id":"x","action":"create","persist":true,"data":{"v":1}}`)
	e.pub(tp+"x", `{"object_id":"x","action":"delete"}`)
	e.barrier("ns", "sc")
	markers, err := bus.OldDeleteMarkers(ctx5s(t), e.store.kv, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range markers {
		found = found || m.Key == objectKey("ns", "sc", "x")
	}
	if !found {
		t.Fatalf("markers %v: none of x", markers)
	}

	e.pub(tp+"x", `{"object_id":"x","action":"create","persist":true,"data":{"v":2}}`)
	e.waitObject("ns", "sc", "x", nil)
	for _, m := range markers {
		if err := bus.PurgeDeleteMarker(ctx5s(t), e.store.kvStream, e.store.kv, m); err != nil {
			t.Fatal(err)
		}
	}
	o, err := e.get("ns", "sc", "x")
	if err != nil || o.Attributes["v"] != 2.0 {
		t.Fatalf("x after the purge of its old marker: %+v, %v; want v 2", o, err)
	}
}
