package persist

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kvKey is what JetStream KV accepts as a key.
var kvKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// FuzzSplitKey reads arbitrary KV keys (any writer of the bucket may have
// made them) as object keys: a key is refused, or split into a namespace,
// scene and object id whose own key is a valid KV key with exactly three
// tokens, and splits back into the same three names.
func FuzzSplitKey(f *testing.F) {
	for _, s := range []string{"ns.sc.box", "a.b.=", "=.=.=", "a.b.a=2Eb", "a.b.=4", "a.b.=ZZ", "a.b.=2e", "a.b", "a.b.c.d", "..", "a.b.c d", "a.b.=00=FF"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		ns, scene, id, err := splitKey(key)
		if err != nil {
			return
		}
		k := objectKey(ns, scene, id)
		if !kvKey.MatchString(k) || strings.Count(k, ".") != 2 {
			t.Fatalf("splitKey(%q) = %q, %q, %q, whose key %q is not a three-token KV key", key, ns, scene, id, k)
		}
		ns2, scene2, id2, err := splitKey(k)
		if err != nil || ns2 != ns || scene2 != scene || id2 != id {
			t.Fatalf("key %q of %q/%q/%q splits into %q/%q/%q, %v", k, ns, scene, id, ns2, scene2, id2, err)
		}
	})
}

// fuzzStore opens and runs a store on an in-process JetStream server.
func fuzzStore(tb testing.TB) *Store {
	tb.Helper()
	srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: tb.TempDir(), DontListen: true, NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	srv.Start()
	tb.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{JS: js, NC: nc, Replicas: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(runCtx) }()
	tb.Cleanup(func() { stop(); <-done }) // before the server stops
	return s
}

type accessCall struct {
	ns, scene string
	write     bool
}

// FuzzHandler sends requests with fuzzed methods, paths and bodies to the
// persistence routes. Access allows reading anything and writing only
// namespace "alice". Whatever the request, the answer is a JSON value with
// a status the routes use; and a DELETE or POST that succeeds was allowed
// to write the scene its path names (and a clone to read its source).
func FuzzHandler(f *testing.F) {
	s := fuzzStore(f)
	var mu sync.Mutex
	var calls []accessCall
	h := s.Handler(func(r *http.Request, ns, scene string, write bool) error {
		mu.Lock()
		calls = append(calls, accessCall{ns, scene, write})
		mu.Unlock()
		if write && ns != "alice" {
			return ErrUnauthenticated
		}
		return nil
	})
	for _, c := range [][3]string{
		{"GET", "/persist/health", ""},
		{"GET", "/persist/!allscenes", ""},
		{"GET", "/persist/alice/!allscenes", ""},
		{"GET", "/persist/alice/room?type=object", ""},
		{"GET", "/persist/alice/room/box", ""},
		{"DELETE", "/persist/alice/room", ""},
		{"DELETE", "/persist/bob/room", ""},
		{"POST", "/persist/alice/room", `{"action":"clone","namespace":"bob","sceneId":"src"}`},
		{"POST", "/persist/alice/room", `{"action":"clone","namespace":"alice","sceneId":"room"}`},
		{"POST", "/persist/alice/room", `{"action":"clone","namespace":"bob","sceneId":"src","allowNonEmptyTarget":true} junk`},
		{"POST", "/persist/alice/room", `{"action":"explode"}`},
		{"POST", "/persist/bob/room", `{"action":"clone","namespace":"alice","sceneId":"x"}`},
		{"POST", "/persist/alice%2Fx/room", `{}`},
		{"PUT", "/persist/alice/room", `{}`},
		{"GET", "/persist/a/b/c/d", ""},
		{"GET", "/persist/%2e%2e/x", ""},
	} {
		f.Add(c[0], c[1], c[2])
	}
	f.Fuzz(func(t *testing.T, method, path, body string) {
		switch method {
		case "GET", "DELETE", "POST", "PUT", "HEAD":
		default:
			return
		}
		u, err := url.ParseRequestURI(path)
		if err != nil || !strings.HasPrefix(u.Path, "/persist/") {
			return
		}
		r := httptest.NewRequest(method, "/", strings.NewReader(body))
		r.URL, r.RequestURI = u, path
		mu.Lock()
		calls = nil
		mu.Unlock()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case 200, 202, 301, 307, 308, 400, 401, 403, 404, 405, 409:
		default:
			t.Fatalf("%s %s %q: status %d: %s", method, path, body, w.Code, w.Body)
		}
		if w.Code < 300 && method != "HEAD" && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %s: answer %q is not JSON", method, path, w.Body)
		}
		if w.Code != 200 || (method != "DELETE" && method != "POST") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if len(calls) == 0 || !calls[0].write || calls[0].ns != "alice" {
			t.Fatalf("%s %s %q succeeded after access checks %+v", method, path, body, calls)
		}
		// The checked scene is the one the path names.
		parts := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/persist/"), "/")
		for i := range parts {
			parts[i], _ = url.PathUnescape(parts[i])
		}
		if len(parts) != 2 || parts[0] != calls[0].ns || parts[1] != calls[0].scene {
			t.Fatalf("%s %s: write checked on %s/%s", method, path, calls[0].ns, calls[0].scene)
		}
		if method == "POST" {
			var req cloneRequest
			_ = json.Unmarshal([]byte(body), &req)
			if len(calls) < 2 || calls[1].write || calls[1].ns != req.Namespace || calls[1].scene != req.SceneID {
				t.Fatalf("POST %s %q cloned without a read check of its source: %+v", path, body, calls)
			}
		}
	})
}
