package httpapi

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
)

// settingsStore returns a real settings store on an embedded bus.
func settingsStore(t *testing.T, dir string) *auth.SettingsStore {
	t.Helper()
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "t", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	nc, err := b.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := b.JetStream(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := auth.OpenSettings(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestAccessScene(t *testing.T) {
	dir := t.TempDir()
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	settings := settingsStore(t, dir)
	private := auth.Settings{Namespace: "lab", Scene: "secret", Viewers: []string{"carol"}}
	if err := settings.Put(context.Background(), private); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	denials := prometheus.NewCounter(prometheus.CounterOpts{Name: "d"})
	a := &Access{Realm: "realm", Keys: keys, Settings: settings, Log: slog.New(slog.NewTextHandler(&logs, nil)), Denials: denials}
	tok := func(user, scene string, role auth.Role) string {
		ns, sc, _ := cut(scene)
		s, err := keys.Issue(user, auth.SceneRights("realm", ns, sc, role, ""), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	svc := func(user, service string) string {
		s, err := keys.Issue(user, auth.ServiceRights(service), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	expired, _ := keys.Issue("ed", auth.SceneRights("realm", "lab", "room", auth.RoleEditor, ""), -time.Minute)
	tests := []struct {
		name    string
		token   string
		scene   string
		write   bool
		wantErr error
	}{
		{"no token reads a public scene", "", "lab/room", false, nil},
		{"no token may not write", "", "lab/room", true, ErrUnauthenticated},
		{"no token may not read a private scene", "", "lab/secret", false, ErrUnauthenticated},
		{"editor writes its scene", tok("ed", "lab/room", auth.RoleEditor), "lab/room", true, nil},
		{"viewer may not write", tok("vi", "lab/room", auth.RoleViewer), "lab/room", true, ErrForbidden},
		{"a token for one scene reads another public scene", tok("vi", "lab/room", auth.RoleViewer), "lab/other", false, nil},
		{"but may not write it", tok("ed", "lab/room", auth.RoleEditor), "lab/other", true, ErrForbidden},
		{"the namespace owner writes any of its scenes", tok("lab", "lab/room", auth.RoleEditor), "lab/other", true, nil},
		{"a listed viewer reads a private scene", tok("carol", "lab/room", auth.RoleViewer), "lab/secret", false, nil},
		{"others may not", tok("dave", "lab/room", auth.RoleViewer), "lab/secret", false, ErrForbidden},
		// A node's token is no user's sign-in: its user's role in the
		// scene's settings gave an SFU token named like a namespace write
		// access to all of it.
		{"a service's token does not write its user's namespace", svc("lab", "sfu"), "lab/room", true, ErrForbidden},
		{"nor read a private scene its user may", svc("carol", "cluster"), "lab/secret", false, ErrForbidden},
		{"it reads a public scene, as anyone may", svc("lab", "sfu"), "lab/room", false, nil},
		{"expired token", expired, "lab/room", false, ErrUnauthenticated},
		{"garbage token", "abc", "lab/room", false, ErrUnauthenticated},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/persist/"+tt.scene, nil)
		if tt.token != "" {
			r.Header.Set("Authorization", "Bearer "+tt.token)
		}
		ns, sc, _ := cut(tt.scene)
		err := a.Scene(r, ns, sc, tt.write)
		if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.wantErr)
		}
	}
	// Every refusal is counted and logged with its path and reason.
	refused := 0
	for _, tt := range tests {
		if tt.wantErr != nil {
			refused++
		}
	}
	var m dto.Metric
	if err := denials.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != float64(refused) {
		t.Errorf("denials counted %v, want %d", got, refused)
	}
	if n := strings.Count(logs.String(), `msg="HTTP request denied" method=GET path=/persist/lab/secret`); n != 3 {
		t.Errorf("%d log lines for the three refusals of lab/secret, want 3:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `reason="user dave may not read scene lab/secret"`) {
		t.Errorf("no reason in the log:\n%s", logs.String())
	}
	// The cookie works like the header.
	r := httptest.NewRequest("GET", "/persist/lab/room", nil)
	r.Header.Set("Cookie", CookieName+"="+tok("ed", "lab/room", auth.RoleEditor))
	if err := a.Scene(r, "lab", "room", true); err != nil {
		t.Errorf("cookie token: %v", err)
	}
}

func cut(scene string) (string, string, bool) {
	for i := 0; i < len(scene); i++ {
		if scene[i] == '/' {
			return scene[:i], scene[i+1:], true
		}
	}
	return scene, "", false
}

// The Authorization scheme is case-insensitive (RFC 9110, 11.1): a client
// that sends "bearer" is signed in, not read as one without a token (which
// it was, and then told that it "needs a token").
func TestRequestToken(t *testing.T) {
	tests := []struct{ authz, cookie, want string }{
		{"Bearer abc", "", "abc"},
		{"bearer abc", "", "abc"},
		{"BEARER abc", CookieName + "=c", "abc"},
		{"Bearer  abc ", "", "abc"},
		{"Basic dXNlcjpwdw==", CookieName + "=c", "c"},
		{"Bearer", CookieName + "=c", "c"},
		{"Bearerabc", "", ""},
		{"", CookieName + "=c", "c"},
		{"", "", ""},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		if tt.authz != "" {
			r.Header.Set("Authorization", tt.authz)
		}
		if tt.cookie != "" {
			r.Header.Set("Cookie", tt.cookie)
		}
		if got := RequestToken(r); got != tt.want {
			t.Errorf("Authorization %q, Cookie %q: token %q, want %q", tt.authz, tt.cookie, got, tt.want)
		}
	}
}
