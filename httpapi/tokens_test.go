package httpapi

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/persist"
)

// embeddedJS starts an embedded bus with its data in dir, for as long as
// the test runs, and returns JetStream on it.
func embeddedJS(t *testing.T, dir string) jetstream.JetStream {
	t.Helper()
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "t", Insecure: true, Logger: slog.New(slog.DiscardHandler)})
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
	return js
}

// runStore opens the scene store on js and runs it until the test ends.
func runStore(t *testing.T, js jetstream.JetStream) *persist.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := persist.Open(ctx, persist.Config{JS: js, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); store.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	return store
}

// settingsStore returns a real settings store on an embedded bus.
func settingsStore(t *testing.T, dir string) *auth.SettingsStore {
	t.Helper()
	js := embeddedJS(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
		// scene's settings would give an SFU token named like a namespace
		// write access to all of it.
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
// that sends "bearer" is signed in, not read as one without a token. An
// Authorization header that carries no Bearer token is refused with 401
// saying what xrealm takes, not read as no header (which would make the
// request anonymous, or one that "needs a token"), also when the request
// has the cookie, and the refusal never quotes the credentials.
func TestRequestToken(t *testing.T) {
	const jwtLike = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln"
	tests := []struct {
		authz   []string
		cookie  string
		want    string
		wantErr string // "" = no error
	}{
		{[]string{"Bearer abc"}, "", "abc", ""},
		{[]string{"bearer abc"}, "", "abc", ""},
		{[]string{"BEARER abc"}, CookieName + "=c", "abc", ""},
		{[]string{"Bearer  abc "}, "", "abc", ""},
		{[]string{"Bearer\tabc"}, "", "abc", ""},
		{nil, CookieName + "=c", "c", ""},
		{nil, "", "", ""},
		{[]string{"Basic dXNlcjpwdw=="}, "", "", `the Authorization scheme "Basic" is not supported`},
		{[]string{"Basic dXNlcjpwdw=="}, CookieName + "=c", "", `the Authorization scheme "Basic" is not supported`},
		{[]string{"Token " + jwtLike}, "", "", `the Authorization scheme "Token" is not supported`},
		{[]string{"JWT " + jwtLike}, "", "", `the Authorization scheme "JWT" is not supported`},
		{[]string{"Digest username=\"a\", response=\"b\""}, "", "", `the Authorization scheme "Digest" is not supported`},
		{[]string{jwtLike}, "", "", "the Authorization header has no scheme"},
		{[]string{"Bearerabc"}, "", "", "the Authorization header has no scheme"},
		{[]string{"Bearer:" + jwtLike}, "", "", "the Authorization header has no scheme"},
		{[]string{"Bearer"}, CookieName + "=c", "", "the Authorization header is Bearer with no token"},
		{[]string{"bearer   "}, "", "", "the Authorization header is Bearer with no token"},
		{[]string{""}, CookieName + "=c", "", "the Authorization header is empty"},
		{[]string{"   "}, "", "", "the Authorization header is empty"},
		{[]string{"Bearer abc", "Basic dXNlcjpwdw=="}, "", "", "the request has 2 Authorization headers"},
		// a first word that is no scheme name may be a credential: not quoted
		{[]string{"secret/key=1 more"}, "", "", "the Authorization header's scheme is not Bearer"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		for _, h := range tt.authz {
			r.Header.Add("Authorization", h)
		}
		if tt.cookie != "" {
			r.Header.Set("Cookie", tt.cookie)
		}
		got, err := RequestToken(r)
		if tt.wantErr == "" {
			if err != nil || got != tt.want {
				t.Errorf("Authorization %q, Cookie %q: token %q, %v; want %q", tt.authz, tt.cookie, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) || got != "" {
			t.Errorf("Authorization %q, Cookie %q: token %q, %v; want an error starting %q", tt.authz, tt.cookie, got, err, tt.wantErr)
			continue
		}
		if !errors.Is(err, ErrUnauthenticated) || statusOf(err) != http.StatusUnauthorized {
			t.Errorf("Authorization %q: error %v is not ErrUnauthenticated with status 401 (status %d)", tt.authz, err, statusOf(err))
		}
		if !strings.Contains(err.Error(), "Authorization: Bearer <token>") || !strings.Contains(err.Error(), CookieName) {
			t.Errorf("Authorization %q: error %q does not say what xrealm takes", tt.authz, err)
		}
		for _, secret := range []string{"dXNlcjpwdw", jwtLike, "secret", "response="} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Authorization %q: error %q quotes the credentials", tt.authz, err)
			}
		}
	}
}
