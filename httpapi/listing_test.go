package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/topic"
)

// The scene listings (GET /persist/!allscenes, /persist/{ns}/!allscenes),
// served by the persistence store with this package's Access.Scene as the
// server wires them: a scene the caller may not read is left out, which
// is no refusal (counting one denial and logging one line per private
// scene and listing would let a few listings spend the log's lines); a
// token that is not valid is refused with 401 and its reason (not 200
// with the public scenes only, as if the token were fine), also when
// there is nothing to list; a bad namespace is 400.
func TestSceneListing(t *testing.T) {
	dir := t.TempDir()
	js := embeddedJS(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	settings, err := auth.OpenSettings(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := settings.Put(ctx, auth.Settings{Namespace: "lab", Scene: "secret", Viewers: []string{"carol"}}); err != nil {
		t.Fatal(err)
	}
	store := runStore(t, js)
	scenes := []string{"lab/room", "lab/secret", "other/pub"}
	for _, sc := range scenes {
		subj := topic.ToSubject("realm/s/" + sc + "/o/uc/box")
		if _, err := js.Publish(ctx, subj, []byte(`{"object_id":"box","action":"create","persist":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, err := store.Scenes(ctx)
		if err == nil && len(got) == len(scenes) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scenes stored: %v, %v", got, err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	denials := prometheus.NewCounter(prometheus.CounterOpts{Name: "d"})
	access := &Access{Realm: "realm", Keys: keys, Settings: settings, Log: slog.New(slog.NewTextHandler(&logs, nil)), Denials: denials}
	h := store.Handler(access.Scene)
	token := func(user string, ttl time.Duration) string {
		s, err := keys.Issue(user, auth.SceneRights("realm", "lab", "room", auth.RoleViewer, ""), ttl)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name, path, token string
		status            int
		want              string // the list, or a part of the error
		denied            int
	}{
		{"anonymous", "/persist/!allscenes", "", 200, `["lab/room","other/pub"]`, 0},
		{"a listed viewer", "/persist/!allscenes", token("carol", time.Hour), 200, `["lab/room","lab/secret","other/pub"]`, 0},
		{"another user", "/persist/!allscenes", token("dave", time.Hour), 200, `["lab/room","other/pub"]`, 0},
		{"one namespace", "/persist/lab/!allscenes", "", 200, `["lab/room"]`, 0},
		{"one namespace, a listed viewer", "/persist/lab/!allscenes", token("carol", time.Hour), 200, `["lab/room","lab/secret"]`, 0},
		{"expired token", "/persist/!allscenes", token("carol", -time.Minute), 401, `token is expired`, 1},
		{"garbage token", "/persist/lab/!allscenes", "garbage", 401, `invalid token`, 1},
		{"garbage token, nothing to list", "/persist/nobody/!allscenes", "garbage", 401, `invalid token`, 1},
		{"nothing to list", "/persist/nobody/!allscenes", token("dave", time.Hour), 200, `[]`, 0},
		{"bad namespace", "/persist/la.b/!allscenes", "", 400, `namespace name \"la.b\": '.' is not allowed`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := counter(t, denials)
			logs.Reset()
			r := httptest.NewRequest("GET", tt.path, nil)
			if tt.token != "" {
				r.Header.Set("Authorization", "Bearer "+tt.token)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			body, _ := io.ReadAll(w.Body)
			got := strings.TrimSpace(string(body))
			if w.Code != tt.status {
				t.Fatalf("GET %s: %d %s, want %d", tt.path, w.Code, got, tt.status)
			}
			if tt.status == 200 {
				var list []string
				if err := json.Unmarshal(body, &list); err != nil || !slices.IsSorted(list) {
					t.Fatalf("answer %s is not a sorted list: %v", got, err)
				}
				if got != tt.want {
					t.Fatalf("GET %s = %s, want %s", tt.path, got, tt.want)
				}
			} else if !strings.Contains(got, tt.want) {
				t.Fatalf("GET %s = %s, want it to say %s", tt.path, got, tt.want)
			}
			if d := counter(t, denials) - before; d != float64(tt.denied) {
				t.Errorf("%v denials counted, want %d; log:\n%s", d, tt.denied, logs.String())
			}
			if n := strings.Count(logs.String(), "HTTP request denied"); n != tt.denied {
				t.Errorf("%d denial lines logged, want %d:\n%s", n, tt.denied, logs.String())
			}
		})
	}
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// When the settings store cannot answer, a route that needs the scene's
// settings answers 503 with the reason, not 403 as if the caller were
// refused (and not counted as a refusal): GET /persist/{ns}/{scene} must
// not answer 403 "read settings of ...: nats: connection closed".
func TestSettingsUnavailable(t *testing.T) {
	dir := t.TempDir()
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "t", Insecure: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	nc, err := b.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := b.JetStream(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// The settings store has a connection of its own, which fails; the
	// persistence store's stays up and holds one scene.
	snc, err := b.Connect("settings")
	if err != nil {
		t.Fatal(err)
	}
	sjs, err := b.JetStream(ctx, snc)
	if err != nil {
		t.Fatal(err)
	}
	settings, err := auth.OpenSettings(ctx, sjs, 1)
	if err != nil {
		t.Fatal(err)
	}
	store := runStore(t, js)
	if _, err := js.Publish(ctx, "realm.s.lab.room.o.uc.box", []byte(`{"object_id":"box","action":"create","persist":true}`)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if got, _ := store.Scenes(ctx); len(got) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the create was not applied")
		}
		time.Sleep(10 * time.Millisecond)
	}
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	snc.Close() // the settings store can no longer answer
	denials := prometheus.NewCounter(prometheus.CounterOpts{Name: "d"})
	access := &Access{Realm: "realm", Keys: keys, Settings: settings, Denials: denials}
	mux := http.NewServeMux()
	New(Config{Realm: "realm", Access: access, Settings: settings, Logger: slog.New(slog.DiscardHandler)}).Register(mux)
	mux.Handle("/persist/", store.Handler(access.Scene))
	other, err := keys.Issue("bob", auth.SceneRights("realm", "bob", "x", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ method, path, tok string }{
		{"GET", "/persist/lab/room", ""},
		{"GET", "/persist/lab/room", other},
		{"DELETE", "/persist/lab/room", other},
		{"GET", "/scenes/lab/room/settings", ""},
		{"GET", "/persist/!allscenes", ""},
	} {
		r := httptest.NewRequest(tt.method, tt.path, nil)
		if tt.tok != "" {
			r.Header.Set("Authorization", "Bearer "+tt.tok)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "settings of lab/room") {
			t.Errorf("%s %s with the store down: %d %s, want 503 naming the scene's settings", tt.method, tt.path, w.Code, w.Body)
		}
	}
	if d := counter(t, denials); d != 0 {
		t.Errorf("%v refusals counted, want 0", d)
	}
}
