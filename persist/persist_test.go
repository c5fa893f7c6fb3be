package persist

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testlog"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/xrealm/xrealm/topic"
)

// env is an embedded JetStream server with a connection and a running Store.
type env struct {
	t      *testing.T
	dir    string
	srv    *server.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	store  *Store
	reg    *prometheus.Registry
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

type syncBuffer = testlog.Buffer

func startServer(t *testing.T, dir string) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		JetStream:  true,
		StoreDir:   dir,
		DontListen: true,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	return srv
}

// newEnv starts a server on dir (a new temporary one if "") and opens a
// store; it runs the store when run is true.
func newEnv(t *testing.T, dir string, run bool) *env {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	e := &env{t: t, dir: dir, logs: &syncBuffer{}, reg: prometheus.NewRegistry()}
	e.srv = startServer(t, dir)
	var err error
	e.nc, err = nats.Connect("", nats.InProcessServer(e.srv))
	if err != nil {
		t.Fatal(err)
	}
	e.js, err = jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.store, err = Open(ctx, Config{
		JS: e.js, NC: e.nc, Replicas: 1, Registerer: e.reg,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(e.logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if run {
		e.run()
	}
	t.Cleanup(e.stop)
	return e
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

func (e *env) run() {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go func() {
		defer close(e.done)
		if err := e.store.Run(ctx); err != nil {
			e.t.Errorf("Run: %v", err)
		}
	}()
}

// stop stops the store and the server; it may be called more than once.
func (e *env) stop() {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		e.cancel = nil
	}
	if e.nc != nil {
		e.nc.Close()
		e.nc = nil
	}
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		e.srv = nil
	}
}

// pub publishes payload on the MQTT topic t through JetStream, as the MQTT
// front end does for a QoS 1 persisted create.
func (e *env) pub(t, payload string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.js.Publish(ctx, topic.ToSubject(t), []byte(payload)); err != nil {
		e.t.Fatalf("publish on %s: %v", t, err)
	}
}

// corePub publishes with plain NATS, as any NATS client may.
func (e *env) corePub(t, payload string) {
	e.t.Helper()
	if err := e.nc.Publish(topic.ToSubject(t), []byte(payload)); err != nil {
		e.t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) get(ns, scene, id string) (Object, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.store.Get(ctx, ns, scene, id)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitObject waits until the object is stored and cond holds for it.
func (e *env) waitObject(ns, scene, id string, cond func(Object) bool) Object {
	e.t.Helper()
	var o Object
	eventually(e.t, "object "+ns+"/"+scene+"/"+id, func() bool {
		var err error
		o, err = e.get(ns, scene, id)
		return err == nil && (cond == nil || cond(o))
	})
	return o
}

func (e *env) waitGone(ns, scene, id string) {
	e.t.Helper()
	eventually(e.t, "deletion of "+ns+"/"+scene+"/"+id, func() bool {
		_, err := e.get(ns, scene, id)
		return errors.Is(err, ErrNotFound)
	})
}

// barrier publishes a persisted create of a fresh object and waits for it:
// the applier works in stream order, so every message published before has
// been applied when it returns.
func (e *env) barrier(ns, scene string) {
	e.t.Helper()
	id := "barrier-" + time.Now().Format("150405.000000000")
	id = strings.ReplaceAll(id, ".", "_")
	e.pub("realm/s/"+ns+"/"+scene+"/o/test/"+id, `{"object_id":"`+id+`","action":"create","persist":true}`)
	e.waitObject(ns, scene, id, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.store.kv.Delete(ctx, objectKey(ns, scene, id)); err != nil {
		e.t.Fatal(err)
	}
}

func jsonEq(t *testing.T, got map[string]any, want string) {
	t.Helper()
	var w map[string]any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		t.Fatalf("attributes = %s, want %s", g, want)
	}
}

const tp = "realm/s/ns/sc/o/uc1/"

func TestCreateUpdateSemantics(t *testing.T) {
	e := newEnv(t, "", true)

	// create with persist is stored; a second create replaces it.
	e.pub(tp+"box", `{"object_id":"box","action":"create","type":"object","persist":true,"data":{"object_type":"box","position":{"x":1,"y":2},"color":"red"},"timestamp":"2024-05-01T10:00:00.000+00Z"}`)
	o := e.waitObject("ns", "sc", "box", nil)
	if o.Type != "object" || !o.Persist || o.Realm != "realm" || o.UserClient != "uc1" || o.CreatedAt.IsZero() || o.ExpireAt != nil {
		t.Fatalf("stored object = %+v", o)
	}
	jsonEq(t, o.Attributes, `{"object_type":"box","position":{"x":1,"y":2},"color":"red"}`)
	created := o.CreatedAt

	e.pub("realm/s/ns/sc/o/uc2/box", `{"object_id":"box","action":"create","type":"object","persist":true,"data":{"object_type":"sphere"}}`)
	o = e.waitObject("ns", "sc", "box", func(o Object) bool { return o.Attributes["object_type"] == "sphere" })
	jsonEq(t, o.Attributes, `{"object_type":"sphere"}`)
	if !o.CreatedAt.Equal(created) || o.UserClient != "uc2" {
		t.Fatalf("upsert: createdAt %v (was %v), userClient %q", o.CreatedAt, created, o.UserClient)
	}

	// update merges deeply; null removes.
	e.pub(tp+"box", `{"object_id":"box","action":"create","type":"object","persist":true,"data":{"object_type":"box","position":{"x":1,"y":2,"z":3},"color":"red","material":{"opacity":0.5}}}`)
	e.waitObject("ns", "sc", "box", func(o Object) bool { return o.Attributes["object_type"] == "box" })
	e.pub(tp+"box", `{"object_id":"box","action":"update","persist":true,"data":{"position":{"y":5,"z":null},"color":null,"material":{"color":"blue"}}}`)
	o = e.waitObject("ns", "sc", "box", func(o Object) bool { return o.Attributes["color"] == nil })
	jsonEq(t, o.Attributes, `{"object_type":"box","position":{"x":1,"y":5},"material":{"opacity":0.5,"color":"blue"}}`)

	// update without persist does not touch the stored object.
	e.pub(tp+"box", `{"object_id":"box","action":"update","data":{"position":{"x":100}}}`)
	// overwrite replaces the whole object.
	e.pub(tp+"box", `{"object_id":"box","action":"update","persist":true,"overwrite":true,"type":"object","data":{"object_type":"cone"}}`)
	o = e.waitObject("ns", "sc", "box", func(o Object) bool { return o.Attributes["object_type"] == "cone" })
	jsonEq(t, o.Attributes, `{"object_type":"cone"}`)

	// Not persisted: create without persist, update of an unknown object,
	// clientEvent, a private message to one client, other message types.
	e.pub(tp+"temp", `{"object_id":"temp","action":"create","data":{"a":1}}`)
	e.pub(tp+"ghost", `{"object_id":"ghost","action":"update","persist":true,"data":{"a":1}}`)
	e.pub(tp+"ev", `{"object_id":"ev","action":"clientEvent","persist":true,"type":"mousedown","data":{}}`)
	e.corePub(tp+"priv/uc9", `{"object_id":"priv","action":"create","persist":true,"data":{}}`)
	e.corePub("realm/s/ns/sc/u/uc1/cam", `{"object_id":"cam","action":"create","persist":true,"data":{}}`)
	e.barrier("ns", "sc")
	for _, id := range []string{"temp", "ghost", "ev", "priv", "cam"} {
		if o, err := e.get("ns", "sc", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: got %+v, %v; want not persisted", id, o, err)
		}
	}
	if got := counterValue(t, e.store.invalid); got != 0 {
		t.Errorf("invalid counter = %v, want 0", got)
	}
	if got := counterValue(t, e.store.applied); got < 5 {
		t.Errorf("applied counter = %v, want at least 5", got)
	}
	eventually(t, "gauge xrealm_persisted_objects = 1", func() bool {
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "xrealm_persisted_objects" {
				return mf.GetMetric()[0].GetGauge().GetValue() == 1 // box
			}
		}
		return false
	})
}

func TestOpenRejectsBadRealm(t *testing.T) {
	e := newEnv(t, "", false)
	for _, realm := range []string{"*", "a.b", ""} {
		_, err := Open(context.Background(), Config{JS: e.js, Realms: []string{realm}})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", realm)) {
			t.Errorf("Open with realm %q: %v", realm, err)
		}
	}
}

func TestInvalidMessagesNotPersisted(t *testing.T) {
	e := newEnv(t, "", true)
	// A persisted create in a scene whose name the HTTP routes refuse
	// (topic.ValidSceneName) would be stored where it can never be read.
	create := func(id string) string { return `{"object_id":"` + id + `","action":"create","persist":true}` }
	bad := []struct{ topic, payload, reason, ns, scene, id string }{
		{tp + "a", `{"object_id":"a","action":"create","persist":true,`, "malformed JSON", "ns", "sc", "a"},
		{tp + "b", `{"object_id":"not-b","action":"create","persist":true}`, `does not equal the topic id \"b\"`, "ns", "sc", "not-b"},
		{tp + "c", `{"object_id":"c","action":"spawn","persist":true}`, `unknown action \"spawn\"`, "ns", "sc", "c"},
		{tp + "d", `[{"object_id":"d"}]`, "not a JSON object", "ns", "sc", "d"},
		{"realm/s/ns/a.b/o/uc1/e", create("e"), `scene name \"a.b\": '.' is not allowed`, "ns", "a.b", "e"},
		{"realm/s/ns/a b/o/uc1/f", create("f"), `scene name \"a b\": ' ' is not allowed`, "ns", "a b", "f"},
		{"realm/s/ns/é/o/uc1/g", create("g"), `scene name \"é\": 'é' is not allowed`, "ns", "é", "g"},
		{"realm/s/n.s/sc/o/uc1/h", create("h"), `namespace name \"n.s\": '.' is not allowed`, "n.s", "sc", "h"},
	}
	for _, b := range bad {
		e.pub(b.topic, b.payload)
	}
	e.pub(tp+"ok", create("ok"))
	e.waitObject("ns", "sc", "ok", nil) // applied after the others
	for _, b := range bad {
		if _, err := e.get(b.ns, b.scene, b.id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s/%s/%s persisted (%v), want not", b.ns, b.scene, b.id, err)
		}
	}
	if got := counterValue(t, e.store.invalid); got != float64(len(bad)) {
		t.Errorf("invalid counter = %v, want %d", got, len(bad))
	}
	logs := e.logs.String()
	for _, b := range bad {
		var line string
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, b.reason) {
				line = l
			}
		}
		if line == "" || !strings.Contains(line, "invalid message not persisted") {
			t.Errorf("no log line with %q in:\n%s", b.reason, logs)
		}
	}
}

func TestCascadeDelete(t *testing.T) {
	e := newEnv(t, "", true)
	for _, m := range []struct{ id, parent string }{
		{"root", ""}, {"child1", "root"}, {"child2", "root"}, {"grand", "child1"}, {"other", ""}, {"otherchild", "other"},
	} {
		data := `{}`
		if m.parent != "" {
			data = `{"parent":"` + m.parent + `"}`
		}
		e.pub(tp+m.id, `{"object_id":"`+m.id+`","action":"create","persist":true,"data":`+data+`}`)
	}
	// an object with the same parent name in another scene is not touched
	e.pub("realm/s/ns/sc2/o/uc1/kid", `{"object_id":"kid","action":"create","persist":true,"data":{"parent":"root"}}`)
	e.waitObject("ns", "sc2", "kid", nil)
	e.waitObject("ns", "sc", "otherchild", nil)

	// a delete needs no persist flag
	e.pub(tp+"root", `{"object_id":"root","action":"delete"}`)
	for _, id := range []string{"root", "child1", "child2", "grand"} {
		e.waitGone("ns", "sc", id)
	}
	for _, id := range []string{"other", "otherchild"} {
		if _, err := e.get("ns", "sc", id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if _, err := e.get("ns", "sc2", "kid"); err != nil {
		t.Errorf("kid in sc2: %v", err)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestObjectTooLargeIsRejectedNotRetried: a create that fits the bus but,
// with the metadata the store adds, not the store, and updates that grow a
// stored object past the limit, are rejected with a reason; they do not
// hold up the messages after them, in any scene.
func TestObjectTooLargeIsRejectedNotRetried(t *testing.T) {
	e := newEnv(t, "", true)
	most := e.store.maxObject()
	big := strings.Repeat("x", most-100) // the message fits; the stored object, with its metadata, does not
	e.pub(tp+"big", `{"object_id":"big","action":"create","persist":true,"data":{"s":"`+big+`"}}`)
	e.pub(tp+"grow", `{"object_id":"grow","action":"create","persist":true,"data":{"a":"`+strings.Repeat("a", most/2)+`"}}`)
	e.pub(tp+"grow", `{"object_id":"grow","action":"update","persist":true,"data":{"b":"`+strings.Repeat("b", most/2)+`"}}`)
	e.pub("realm/s/other/scene/o/test/small", `{"object_id":"small","action":"create","persist":true}`)
	e.waitObject("other", "scene", "small", nil)
	if _, err := e.get("ns", "sc", "big"); !errors.Is(err, ErrNotFound) {
		t.Errorf("big persisted (or failed: %v), want not", err)
	}
	if o := e.waitObject("ns", "sc", "grow", nil); o.Attributes["b"] != nil {
		t.Errorf("the update that made grow too large was applied")
	}
	if got := counterValue(t, e.store.invalid); got != 2 {
		t.Errorf("invalid counter = %v, want 2", got)
	}
	if n := strings.Count(e.logs.String(), "over the store's limit"); n != 2 {
		t.Errorf("%d log lines say why, want 2:\n%s", n, e.logs.String())
	}
}
