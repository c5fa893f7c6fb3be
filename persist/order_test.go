package persist

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/topic"
)

// testClock is a clock the test moves by hand; the store reads it from its
// applier and sweeper goroutines.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newClockEnv is newEnv with the store on a test clock, running.
func newClockEnv(t *testing.T) (*env, *testClock) {
	t.Helper()
	e := newEnv(t, "", false)
	clk := newTestClock()
	e.store.now = clk.Now
	e.run()
	return e, clk
}

// halt stops the store's applier and sweeper; run starts them again.
func (e *env) halt() {
	e.t.Helper()
	e.cancel()
	<-e.done
	e.cancel = nil
}

func ctx5s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestSceneDeleteOrderedWithCreates: a create the stream acknowledged
// before a scene delete is gone after the delete answers, even when the
// applier had not applied it yet; a create published after the delete
// answered stays. It fails if the delete removes the bucket's keys at
// once: the create still waiting in the stream is then stored after it.
func TestSceneDeleteOrderedWithCreates(t *testing.T) {
	e := newEnv(t, "", false) // no applier yet: the creates wait in the stream
	e.pub(tp+"early", `{"object_id":"early","action":"create","persist":true,"data":{}}`)
	e.pub("realm/s/ns/other/o/uc1/keep", `{"object_id":"keep","action":"create","persist":true,"data":{}}`)

	done := make(chan error, 1)
	go func() { _, err := e.store.DeleteScene(ctx5s(t), "ns", "sc"); done <- err }()
	e.run()
	if err := <-done; err != nil {
		t.Fatalf("DeleteScene: %v", err)
	}
	if _, err := e.get("ns", "sc", "early"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("early, created before the scene delete, is stored after it answered (%v)", err)
	}
	e.pub(tp+"late", `{"object_id":"late","action":"create","persist":true,"data":{}}`)
	e.waitObject("ns", "sc", "late", nil)
	e.barrier("ns", "sc")
	if _, err := e.get("ns", "sc", "early"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("early reappeared: %v", err)
	}
	if _, err := e.get("ns", "other", "keep"); err != nil {
		t.Fatalf("an object of another scene: %v", err)
	}
}

// TestTTLExpiryKeepsRecreate: the sweeper finds an object expired while a
// create of the same id (without ttl) waits in the stream. The create
// wins: the expiry was about the version it replaces. It fails if the
// sweeper deletes the key and publishes a delete that the applier applies
// after the create, removing it.
func TestTTLExpiryKeepsRecreate(t *testing.T) {
	e, clk := newClockEnv(t)
	e.pub(tp+"tmp", `{"object_id":"tmp","action":"create","persist":true,"ttl":60,"data":{"v":1}}`)
	e.waitObject("ns", "sc", "tmp", nil)
	e.halt()
	e.pub(tp+"tmp", `{"object_id":"tmp","action":"create","persist":true,"data":{"v":2}}`)
	clk.Advance(2 * time.Minute)
	// What the sweeper does when the old version's time has come.
	if err := e.store.expire(ctx5s(t), objectKey("ns", "sc", "tmp")); err != nil {
		t.Fatal(err)
	}
	e.run()
	e.barrier("ns", "sc")
	time.Sleep(3 * sweepEvery) // room for a wrong delete to arrive; no assertion on time
	e.barrier("ns", "sc")
	o, err := e.get("ns", "sc", "tmp")
	if err != nil {
		t.Fatalf("the re-created tmp was removed by the expiry of the version it replaced: %v", err)
	}
	if o.Attributes["v"] != 2.0 || o.ExpireAt != nil {
		t.Fatalf("tmp = %+v, want the re-create's", o)
	}
}

// TestCloneKeepsTTL: the copy of an object with a ttl expires when the
// original does (it gets the original's remaining lifetime); permanent
// objects stay permanent. It fails if every copy is permanent.
func TestCloneKeepsTTL(t *testing.T) {
	e, clk := newClockEnv(t)
	e.pub("realm/s/ns/src/o/uc1/tmp", `{"object_id":"tmp","action":"create","persist":true,"ttl":60,"data":{}}`)
	e.pub("realm/s/ns/src/o/uc1/box", `{"object_id":"box","action":"create","persist":true,"data":{}}`)
	src := e.waitObject("ns", "src", "tmp", nil)
	e.waitObject("ns", "src", "box", nil)
	clk.Advance(20 * time.Second)
	n, err := e.store.Clone(ctx5s(t), "ns", "src", "ns", "dst")
	if err != nil || n != 2 {
		t.Fatalf("Clone = %d, %v", n, err)
	}
	cp := e.waitObject("ns", "dst", "tmp", nil)
	if cp.ExpireAt == nil || !cp.ExpireAt.Equal(*src.ExpireAt) {
		t.Fatalf("copy expires at %v, want %v, the original's", cp.ExpireAt, src.ExpireAt)
	}
	if b := e.waitObject("ns", "dst", "box", nil); b.ExpireAt != nil {
		t.Fatalf("copy of a permanent object expires at %v", b.ExpireAt)
	}
}

// TestScenesLeavesOutExpired: a scene whose objects have all expired, not
// yet swept, is not listed, as GET /persist/{ns}/{scene} answers [] for it.
func TestScenesLeavesOutExpired(t *testing.T) {
	e, clk := newClockEnv(t)
	e.pub("realm/s/ns/gone/o/uc1/tmp", `{"object_id":"tmp","action":"create","persist":true,"ttl":10,"data":{}}`)
	e.pub("realm/s/ns/mixed/o/uc1/tmp", `{"object_id":"tmp","action":"create","persist":true,"ttl":10,"data":{}}`)
	e.pub("realm/s/ns/mixed/o/uc1/box", `{"object_id":"box","action":"create","persist":true,"data":{}}`)
	e.pub("realm/s/ns/kept/o/uc1/box", `{"object_id":"box","action":"create","persist":true,"data":{}}`)
	e.waitObject("ns", "kept", "box", nil)
	e.halt() // no sweeper: the expired objects stay in the bucket
	clk.Advance(time.Minute)
	got, err := e.store.Scenes(ctx5s(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ns/kept", "ns/mixed"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Scenes = %q, want %q", got, want)
	}
}

// TestInvalidUTF8Refused: a persisted create whose strings are not valid
// UTF-8 is refused as an invalid message, with a reason saying so, at any
// size. It fails if each bad byte is stored as U+FFFD (three bytes): a
// small create is then stored altered, and a large one that fits the
// payload limit is refused as over the store's limit after the client has
// its acknowledgement.
func TestInvalidUTF8Refused(t *testing.T) {
	e := newEnv(t, "", true)
	most := e.store.maxObject()
	e.pub(tp+"small", `{"object_id":"small","action":"create","persist":true,"data":{"s":"a`+"\xff"+`b"}}`)
	e.pub(tp+"large", `{"object_id":"large","action":"create","persist":true,"data":{"s":"`+strings.Repeat("\xfe", most/2)+`"}}`)
	e.pub(tp+"ok", `{"object_id":"ok","action":"create","persist":true,"data":{"s":"é✓"}}`)
	e.barrier("ns", "sc")
	for _, id := range []string{"small", "large"} {
		if o, err := e.get("ns", "sc", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s stored (%v, %.80v), want refused", id, err, o.Attributes)
		}
	}
	if o, err := e.get("ns", "sc", "ok"); err != nil || o.Attributes["s"] != "é✓" {
		t.Errorf("valid UTF-8: %+v, %v", o, err)
	}
	if got := counterValue(t, e.store.invalid); got != 2 {
		t.Errorf("invalid counter = %v, want 2", got)
	}
	if n := strings.Count(e.logs.String(), "not valid UTF-8"); n != 2 {
		t.Errorf("%d log lines say why, want 2:\n%.2000s", n, e.logs.String())
	}
}

// TestExpiredDeleteOfReplacedObject: the delete an expiry publishes names
// the revision that expired. When a create replaced the object before the
// delete reached the applier, the object stays, and clients, which got the
// create and then the delete, get the stored object again as a create that
// the stream does not store. With the current revision, the delete removes
// the object and its descendants.
func TestExpiredDeleteOfReplacedObject(t *testing.T) {
	e, _ := newClockEnv(t)
	msgs := make(chan *nats.Msg, 64)
	sub, err := e.nc.ChanSubscribe(topic.ToSubject(tp+"tmp"), msgs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	revision := func() uint64 {
		t.Helper()
		entry, err := e.store.kv.Get(ctx5s(t), objectKey("ns", "sc", "tmp"))
		if err != nil {
			t.Fatal(err)
		}
		return entry.Revision()
	}
	expiredDelete := func(rev uint64) {
		t.Helper()
		m := &nats.Msg{Subject: topic.ToSubject(tp + "tmp"), Data: []byte(`{"object_id":"tmp","action":"delete"}`), Header: nats.Header{}}
		m.Header.Set(expiredRevisionHeader, strconv.FormatUint(rev, 10))
		if _, err := e.js.PublishMsg(ctx5s(t), m); err != nil {
			t.Fatal(err)
		}
	}

	e.pub(tp+"tmp", `{"object_id":"tmp","action":"create","persist":true,"ttl":60,"data":{"v":1}}`)
	e.pub(tp+"kid", `{"object_id":"kid","action":"create","persist":true,"data":{"parent":"tmp"}}`)
	e.waitObject("ns", "sc", "kid", nil)
	old := revision()
	e.pub(tp+"tmp", `{"object_id":"tmp","action":"create","persist":true,"data":{"v":2}}`)
	expiredDelete(old) // the first version's expiry, after the re-create
	e.barrier("ns", "sc")
	if o, err := e.get("ns", "sc", "tmp"); err != nil || o.Attributes["v"] != 2.0 {
		t.Fatalf("tmp = %+v, %v; want the re-create kept", o, err)
	}
	if _, err := e.get("ns", "sc", "kid"); err != nil {
		t.Fatalf("kid: %v", err)
	}
	// What clients saw: the creates, the delete, then the object again.
	var seen []string
	deadline := time.After(5 * time.Second)
	for len(seen) < 4 {
		select {
		case m := <-msgs:
			seen = append(seen, string(m.Data))
			if len(seen) == 4 && m.Header.Get(nats.ExpectedStreamHdr) == "" {
				t.Errorf("the create published again is not kept out of the stream")
			}
		case <-deadline:
			t.Fatalf("clients got %q, want the object published again after the delete", seen)
		}
	}
	if !strings.Contains(seen[2], `"delete"`) || !strings.Contains(seen[3], `"create"`) || !strings.Contains(seen[3], `"data":{"v":2}`) {
		t.Fatalf("clients got %q", seen)
	}

	expiredDelete(revision()) // the current version's
	e.waitGone("ns", "sc", "tmp")
	e.waitGone("ns", "sc", "kid")
}

// TestSceneDeletePending: a scene delete the applier does not get to in
// time is answered 202; it stays in the log and is applied in its turn,
// after the creates before it and before those after it.
func TestSceneDeletePending(t *testing.T) {
	e := newEnv(t, "", false)
	e.store.deleteWait = 50 * time.Millisecond
	e.pub(tp+"before", `{"object_id":"before","action":"create","persist":true,"data":{}}`)
	srv := httptest.NewServer(e.store.Handler(nil))
	defer srv.Close()
	req, _ := http.NewRequest("DELETE", srv.URL+"/persist/ns/sc", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 202 || !strings.Contains(string(body), `"result":"accepted"`) {
		t.Fatalf("DELETE with no applier: %d %s, want 202 accepted", resp.StatusCode, body)
	}
	e.pub(tp+"after", `{"object_id":"after","action":"create","persist":true,"data":{}}`)
	e.run()
	e.waitObject("ns", "sc", "after", nil)
	if _, err := e.get("ns", "sc", "before"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("before: %v, want deleted", err)
	}
}
