package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/xrealm/xrealm/topic"
)

func TestKeyEscaping(t *testing.T) {
	tests := []struct{ ns, scene, id string }{
		{"public", "lobby", "box"},
		{"ns", "sc", "a.b c"},
		{"ns", "sc", "public|lobby::instance_0::cube1"},
		{"n.s", "sc=ne", "=41"},
		{"ns", "sc", "ünïcødé/ids*>"},
		{"ns", "sc", "%2E"},
	}
	for _, tt := range tests {
		key := objectKey(tt.ns, tt.scene, tt.id)
		for i := 0; i < len(key); i++ {
			if c := key[i]; !plain(c) && c != '.' && c != '=' {
				t.Errorf("key %q for %q has byte %q", key, tt.id, c)
			}
		}
		ns, scene, id, err := splitKey(key)
		if err != nil || ns != tt.ns || scene != tt.scene || id != tt.id {
			t.Errorf("splitKey(%q) = %q, %q, %q, %v; want %q, %q, %q", key, ns, scene, id, err, tt.ns, tt.scene, tt.id)
		}
	}
	for _, bad := range []string{"a.b", "a.b.c.d", "a.b.=4", "a.b.=ZZ"} {
		if _, _, _, err := splitKey(bad); err == nil {
			t.Errorf("splitKey(%q) succeeded", bad)
		}
	}
}

func FuzzKeyEscaping(f *testing.F) {
	f.Add("a.b c=%/")
	f.Fuzz(func(t *testing.T, id string) {
		_, _, got, err := splitKey(objectKey("ns", "sc", id))
		if err != nil || got != id {
			t.Fatalf("round trip of %q = %q, %v", id, got, err)
		}
	})
}

func TestOddObjectIDs(t *testing.T) {
	e := newEnv(t, "", true)
	for _, id := range []string{"a.b c", "public|lobby::x", "50%"} {
		e.pub(tp+id, fmt.Sprintf(`{"object_id":%q,"action":"create","persist":true,"data":{"k":1}}`, id))
		e.waitObject("ns", "sc", id, nil)
	}
}

func TestTTLExpiry(t *testing.T) {
	e := newEnv(t, "", true)
	// A second store on the same server stands for another cluster node:
	// both run the applier (one is pinned) and the sweeper.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	other, err := Open(ctx, Config{JS: e.js, Logger: e.store.log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopOther := context.WithCancel(context.Background())
	otherDone := make(chan struct{})
	go func() { defer close(otherDone); _ = other.Run(runCtx) }()
	defer func() { stopOther(); <-otherDone }()

	deletes := make(chan *nats.Msg, 16)
	sub, err := e.nc.ChanSubscribe(topic.ToSubject("realm/s/ns/sc/o/#"), deletes)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	e.pub("realm/s/ns/sc/o/creator/tmp", `{"object_id":"tmp","action":"create","persist":true,"ttl":1,"data":{}}`)
	e.pub("realm/s/ns/sc/o/creator/tmpkid", `{"object_id":"tmpkid","action":"create","persist":true,"data":{"parent":"tmp"}}`)
	e.pub(tp+"keep", `{"object_id":"keep","action":"create","persist":true,"data":{}}`)
	o := e.waitObject("ns", "sc", "tmp", nil)
	if o.ExpireAt == nil || o.ExpireAt.Sub(o.CreatedAt) != time.Second {
		t.Fatalf("expireAt = %v, createdAt %v", o.ExpireAt, o.CreatedAt)
	}
	e.waitGone("ns", "sc", "tmp")
	e.waitGone("ns", "sc", "tmpkid") // the published delete cascades

	var got []string
	timeout := time.After(1500 * time.Millisecond)
collect:
	for {
		select {
		case m := <-deletes:
			if strings.Contains(string(m.Data), `"delete"`) {
				got = append(got, m.Subject+" "+string(m.Data))
			}
		case <-timeout:
			break collect
		}
	}
	want := topic.ToSubject("realm/s/ns/sc/o/creator/tmp") + ` {"action":"delete","object_id":"tmp"}`
	if len(got) != 1 || got[0] != want {
		t.Fatalf("published deletes = %q, want exactly [%q]", got, want)
	}
	if _, err := e.get("ns", "sc", "keep"); err != nil {
		t.Fatalf("keep: %v", err)
	}
}

// TestHugeTTLLosesNothing: a ttl beyond what a duration holds ("ttl":
// 1e10, about 317 years) is refused, and the object it would have replaced
// stays. It fails if the object is stored with an expiry in the past,
// which the sweeper then deletes, publishing a delete to every client.
func TestHugeTTLLosesNothing(t *testing.T) {
	e := newEnv(t, "", true)
	e.pub(tp+"keep", `{"object_id":"keep","action":"create","persist":true,"data":{"v":1}}`)
	e.waitObject("ns", "sc", "keep", nil)
	e.pub(tp+"keep", `{"object_id":"keep","action":"create","persist":true,"ttl":1e10,"data":{"v":2}}`)
	e.pub(tp+"marker", `{"object_id":"marker","action":"create","persist":true,"data":{}}`)
	e.waitObject("ns", "sc", "marker", nil) // the applier is past the huge ttl
	time.Sleep(3 * sweepEvery)
	o, err := e.get("ns", "sc", "keep")
	if err != nil {
		t.Fatalf("keep: %v", err)
	}
	if o.ExpireAt != nil || o.Attributes["v"] != 1.0 {
		t.Fatalf("keep: expireAt %v, attributes %v; want the first create's", o.ExpireAt, o.Attributes)
	}
}

func TestRestartResumes(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, dir, true)
	e.pub(tp+"a", `{"object_id":"a","action":"create","persist":true,"data":{"v":1}}`)
	e.pub(tp+"b", `{"object_id":"b","action":"create","persist":true,"type":"object","data":{"parent":"a"}}`)
	e.waitObject("ns", "sc", "b", nil)

	// Stop the applier, then publish: the stream holds the messages
	// (the PubAck is the durability point) while nothing applies them.
	e.cancel()
	<-e.done
	e.cancel = nil
	e.pub(tp+"a", `{"object_id":"a","action":"update","persist":true,"data":{"v":2}}`)
	e.pub(tp+"c", `{"object_id":"c","action":"create","persist":true,"data":{}}`)
	if _, err := e.get("ns", "sc", "c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("c applied with no applier running: %v", err)
	}
	e.stop()

	e2 := newEnv(t, dir, false)
	if o, err := e2.get("ns", "sc", "b"); err != nil || o.Attributes["parent"] != "a" {
		t.Fatalf("after restart b = %+v, %v", o, err)
	}
	e2.run()
	e2.waitObject("ns", "sc", "c", nil)
	o := e2.waitObject("ns", "sc", "a", func(o Object) bool { return o.Attributes["v"] == 2.0 })
	if o.Attributes["v"] != 2.0 {
		t.Fatalf("a = %+v", o)
	}
}

func TestHTTP(t *testing.T) {
	e := newEnv(t, "", true)
	for _, m := range []struct{ scene, id, typ string }{
		{"sc", "box", "object"}, {"sc", "opts", "scene-options"}, {"ro", "r1", "object"}, {"secret", "s1", "object"}, {"tpl", "t1", "object"},
	} {
		e.pub("realm/s/ns/"+m.scene+"/o/uc/"+m.id, fmt.Sprintf(`{"object_id":%q,"action":"create","persist":true,"type":%q,"data":{"position":{"x":1}}}`, m.id, m.typ))
	}
	e.pub("realm/s/ns/tpl/o/uc/t2", `{"object_id":"t2","action":"create","persist":true,"type":"object","data":{"parent":"t1"}}`)
	e.waitObject("ns", "tpl", "t2", nil)
	e.barrier("ns", "sc")

	access := func(r *http.Request, ns, scene string, write bool) error {
		switch {
		case scene == "secret":
			return fmt.Errorf("no token: %w", ErrUnauthenticated)
		case scene == "ro" && write:
			return errors.New("you have not been granted write access")
		}
		return nil
	}
	srv := httptest.NewServer(e.store.Handler(access))
	defer srv.Close()

	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", method, path, ct)
		}
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	ids := func(body string) string {
		t.Helper()
		var objs []map[string]any
		if err := json.Unmarshal([]byte(body), &objs); err != nil {
			t.Fatalf("body %s: %v", body, err)
		}
		var out []string
		for _, o := range objs {
			if _, ok := o["attributes"].(map[string]any); !ok || o["type"] == nil {
				t.Errorf("object without attributes or type: %v", o)
			}
			out = append(out, o["object_id"].(string))
		}
		return strings.Join(out, ",")
	}

	tests := []struct {
		name, method, path, body string
		status                   int
		check                    func(body string) string // returns what to compare
		want                     string
	}{
		{"health", "GET", "/persist/health", "", 200, nil, `{"status":"ok"}`},
		{"list", "GET", "/persist/ns/sc", "", 200, ids, "box,opts"},
		{"list by type", "GET", "/persist/ns/sc?type=scene-options", "", 200, ids, "opts"},
		{"list empty", "GET", "/persist/ns/nothing", "", 200, nil, `[]`},
		{"list denied 401", "GET", "/persist/ns/secret", "", 401, nil, `{"error":"no token: authentication required"}`},
		{"one", "GET", "/persist/ns/sc/box", "", 200, ids, "box"},
		{"one absent", "GET", "/persist/ns/sc/nope", "", 200, nil, `[]`},
		{"all scenes", "GET", "/persist/!allscenes", "", 200, nil, `["ns/ro","ns/sc","ns/tpl"]`},
		{"namespace scenes", "GET", "/persist/ns/!allscenes", "", 200, nil, `["ns/ro","ns/sc","ns/tpl"]`},
		{"delete denied 403", "DELETE", "/persist/ns/ro", "", 403, nil, `{"error":"you have not been granted write access"}`},
		{"clone bad action", "POST", "/persist/ns/new", `{"action":"copy"}`, 400, nil, ""},
		{"clone no source", "POST", "/persist/ns/new", `{"action":"clone"}`, 400, nil, ""},
		{"clone bad json", "POST", "/persist/ns/new", `{`, 400, nil, ""},
		{"clone body too large", "POST", "/persist/ns/new", `{"action":"clone","namespace":"ns","sceneId":"tpl","x":"` + strings.Repeat("x", 70<<10) + `"}`, 413, nil, `{"error":"request body is larger than 64 KiB"}`},
		{"clone two bodies", "POST", "/persist/ns/new", `{"action":"clone","namespace":"ns","sceneId":"tpl"} {"action":"clone"}`, 400, nil, `{"error":"request body has more after its JSON object"}`},
		{"clone empty source", "POST", "/persist/ns/new", `{"action":"clone","namespace":"ns","sceneId":"nothing"}`, 404, nil, ""},
		{"clone unreadable source", "POST", "/persist/ns/new", `{"action":"clone","namespace":"ns","sceneId":"secret"}`, 401, nil, ""},
		{"clone into non-empty", "POST", "/persist/ns/sc", `{"action":"clone","namespace":"ns","sceneId":"tpl"}`, 409, nil, ""},
		{"clone into read-only", "POST", "/persist/ns/ro", `{"action":"clone","namespace":"ns","sceneId":"tpl"}`, 403, nil, ""},
		{"clone", "POST", "/persist/ns/new", `{"action":"clone","namespace":"ns","sceneId":"tpl"}`, 200, nil, `{"objectsCloned":2,"result":"success"}`},
		{"delete scene", "DELETE", "/persist/ns/sc", "", 200, nil, `{"deletedCount":2,"result":"success"}`},
		{"list deleted", "GET", "/persist/ns/sc", "", 200, nil, `[]`},
		{"unknown route", "PUT", "/persist/ns/sc", "", 404, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := do(tt.method, tt.path, tt.body)
			if status != tt.status {
				t.Fatalf("%s %s: status %d, want %d; body %s", tt.method, tt.path, status, tt.status, body)
			}
			if status >= 400 && !strings.HasPrefix(body, `{"error":`) {
				t.Errorf("error body %s is not {\"error\":...}", body)
			}
			if tt.want == "" {
				return
			}
			got := body
			if tt.check != nil {
				got = tt.check(body)
			}
			if got != tt.want {
				t.Fatalf("%s %s = %s, want %s", tt.method, tt.path, got, tt.want)
			}
		})
	}
	// The clone goes through the stream; the copies arrive shortly.
	o := e.waitObject("ns", "new", "t2", nil)
	if o.Attributes["parent"] != "t1" || o.Type != "object" {
		t.Fatalf("cloned t2 = %+v", o)
	}
	e.waitObject("ns", "new", "t1", nil)
}

// TestCrashMidApply stands for a node that took a message and died before
// acknowledging it: the message must still be applied, before any later one.
func TestCrashMidApply(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, dir, false)
	e.pub(tp+"x", `{"object_id":"x","action":"create","persist":true,"data":{"v":1}}`)
	e.pub(tp+"x", `{"object_id":"x","action":"delete"}`)

	// A pinned client takes the first message and never acks it.
	batch, err := e.store.consumer.Fetch(1, jetstream.FetchMaxWait(2*time.Second), jetstream.FetchPriorityGroup(PriorityGroup))
	if err != nil {
		t.Fatal(err)
	}
	var got int
	for m := range batch.Messages() {
		got++
		if !strings.Contains(string(m.Data()), `"create"`) {
			t.Fatalf("first message = %s", m.Data())
		}
	}
	if got != 1 {
		t.Fatalf("fetched %d messages (%v)", got, batch.Error())
	}
	e.stop()

	e2 := newEnv(t, dir, true)
	// Applied in order: created, then deleted; never left standing.
	eventually(t, "both messages applied", func() bool {
		info, err := e2.store.consumer.Info(context.Background())
		return err == nil && info.AckFloor.Stream >= 2
	})
	if _, err := e2.get("ns", "sc", "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("x = %v, want deleted", err)
	}
}
