package server

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/persist"
)

// A persisted create on a scene whose name GET /persist answers with 400
// (or one that is not valid UTF-8) is not stored either (it could never be read there): the two agree. The
// front end refuses it as a whole, like a publish without rights: no
// subscriber sees an object that was never stored, and the refusal is
// logged and counted.
func TestInvalidSceneNameNotPersisted(t *testing.T) {
	n := startNode(t, func(c *Config) { c.Insecure = true })
	c := mustConnect(t, n.mqttURL, "u", "")
	watcher := mustConnect(t, n.mqttURL, "w", "")
	seen := newInbox()
	subscribe(t, watcher, "realm/s/ns/#", seen)
	denied := metricSum(t, n, `xrealm_auth_denials_total{action="publish"}`)
	create := func(id string) string { return `{"object_id":"` + id + `","action":"create","persist":true,"data":{}}` }
	scenes := []string{"a.b", "a b", "é"}
	for _, sc := range scenes {
		publish(t, c, "realm/s/ns/"+sc+"/o/x/obj", 1, create("obj"))
	}
	// Not valid UTF-8: refused too, before it is acknowledged.
	publish(t, c, "realm/s/ns/ok/o/x/bad", 1, `{"object_id":"bad","action":"create","persist":true,"data":{"name":"`+"\xff"+`"}}`)
	// An object id whose key the store cannot hold (non-letters escape to
	// 3 bytes): refused too, not acknowledged and then dropped.
	long := strings.Repeat(".", 400)
	publish(t, c, "realm/s/ns/ok/o/x/"+long, 1, create(long))
	publish(t, c, "realm/s/ns/ok/o/x/obj", 1, create("obj")) // applied after the others
	waitObjects(t, n, "ns/ok", "", func(objs []object) bool { return byID(objs, "obj") != nil })
	seen.wait(t, "ns/ok/o/x/obj", 5*time.Second)
	if got := metricSum(t, n, `xrealm_auth_denials_total{action="publish"}`) - denied; got != float64(len(scenes)+2) {
		t.Errorf("%v publishes counted as refused, want %d", got, len(scenes)+2)
	}
	if seen.has("ns/ok/o/x/bad") {
		t.Error("a subscriber got the create that is not valid UTF-8")
	}
	if seen.has("ns/ok/o/x/" + long) {
		t.Error("a subscriber got the create whose id is too long to store")
	}
	for _, sc := range scenes {
		if code := getJSON(t, n.httpURL+"/persist/ns/"+url.PathEscape(sc), "", nil); code != 400 {
			t.Errorf("GET /persist/ns/%s: %d, want 400", sc, code)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := n.Store.Get(ctx, "ns", sc, "obj")
		cancel()
		if !errors.Is(err, persist.ErrNotFound) {
			t.Errorf("object of scene %q stored (%v), want not", sc, err)
		}
		if seen.has("ns/" + sc + "/o/x/obj") {
			t.Errorf("a subscriber got the create on scene %q, which was not stored", sc)
		}
	}
}
