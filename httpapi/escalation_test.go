package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/auth"
)

// TestMQTTAuthEscalation presents tokens of every kind to the token
// endpoint and asks for a token for some scene. The token it issues has
// exactly the rights the scene's settings give the caller's user there,
// whatever the presented token carried (a token for another scene, an
// editor's, a viewer's bound to one client), and never outlives the token
// it was issued on: exchanging a token for a fresh one must not make a
// short-lived sign-in last for ever. A service's token (sfu, cluster) is a
// node's, not a user's sign-in, and gets no scene token.
func TestMQTTAuthEscalation(t *testing.T) {
	dir := t.TempDir()
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	settings := settingsStore(t, dir)
	ctx := context.Background()
	for _, st := range []auth.Settings{
		{Namespace: "lab", Scene: "secret", Viewers: []string{"carol"}},
		{Namespace: "lab", Scene: "shared", Editors: []string{"carol"}, PublicRead: true},
		{Namespace: "lab", Scene: "closed", PublicRead: true},
	} {
		if err := settings.Put(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	const ttl = time.Hour
	mux := http.NewServeMux()
	New(Config{Realm: "realm", Access: &Access{Realm: "realm", Keys: keys, Settings: settings}, Settings: settings,
		TokenTTL: ttl, Logger: slog.New(slog.DiscardHandler)}).Register(mux)
	issue := func(user string, r auth.Rights, ttl time.Duration) string {
		tok, err := keys.Issue(user, r, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	scene := func(ns, sc string, role auth.Role, uc string) auth.Rights {
		return auth.SceneRights("realm", ns, sc, role, uc)
	}
	carolEditsShared := issue("carol", scene("lab", "shared", auth.RoleEditor, ""), 10*time.Hour)
	for _, tc := range []struct {
		name       string
		token      string
		cookie     bool
		form       url.Values
		wantStatus int
		wantUser   string
		wantRole   auth.Role
		maxLife    time.Duration // the issued token's exp at most this far from now
	}{
		{"an editor's token for one scene is a viewer in another", carolEditsShared, false,
			url.Values{"scene": {"lab/closed"}}, 200, "carol", auth.RoleViewer, ttl},
		{"the same token, as the cookie", carolEditsShared, true,
			url.Values{"scene": {"lab/closed"}}, 200, "carol", auth.RoleViewer, ttl},
		{"an editor's token reads a private scene only as a listed viewer", carolEditsShared, false,
			url.Values{"scene": {"lab/secret"}}, 200, "carol", auth.RoleViewer, ttl},
		{"a token for a public scene does not open a private one", issue("dave", scene("public", "lobby", auth.RoleEditor, ""), ttl), false,
			url.Values{"scene": {"lab/secret"}}, 403, "", "", 0},
		{"a viewer token (any scene) of a listed editor gets editor", issue("carol", scene("public", "lobby", auth.RoleViewer, "c1"), ttl), false,
			url.Values{"scene": {"lab/shared"}, "userclient": {"c1"}}, 200, "carol", auth.RoleEditor, ttl},
		{"an editor token's user is no editor in another namespace", issue("lab", scene("lab", "x", auth.RoleEditor, ""), ttl), false,
			url.Values{"scene": {"alice/room"}}, 200, "lab", auth.RoleViewer, ttl},
		{"an anonymous token stays a viewer even where it was an editor", issue("anonymous-lab", scene("lab", "x", auth.RoleEditor, ""), ttl), false,
			url.Values{"scene": {"lab/x"}}, 200, "anonymous-lab", auth.RoleViewer, ttl},
		{"a short-lived sign-in does not give a longer-lived token", issue("carol", scene("public", "lobby", auth.RoleViewer, ""), 2*time.Minute), false,
			url.Values{"scene": {"lab/shared"}}, 200, "carol", auth.RoleEditor, 2 * time.Minute},
		{"a long-lived sign-in gives a token of --token-ttl", carolEditsShared, false,
			url.Values{"scene": {"lab/shared"}}, 200, "carol", auth.RoleEditor, ttl},
		{"an expired token is refused", issue("carol", scene("lab", "shared", auth.RoleEditor, ""), -time.Minute), false,
			url.Values{"scene": {"lab/shared"}}, 401, "", "", 0},
		{"an sfu node's token is no user's sign-in", issue("lab", auth.ServiceRights("sfu"), ttl), false,
			url.Values{"scene": {"lab/x"}}, 403, "", "", 0},
		{"a cluster token is no user's sign-in", issue("carol", auth.ServiceRights("cluster"), ttl), false,
			url.Values{"scene": {"lab/shared"}}, 403, "", "", 0},
		{"a service token may still ask as anonymous", issue("lab", auth.ServiceRights("sfu"), ttl), false,
			url.Values{"scene": {"lab/x"}, "id_auth": {"anonymous"}, "username": {"lab"}}, 200, "anonymous-lab", auth.RoleViewer, ttl},
		{"no token: anonymous viewer for --token-ttl", "", false,
			url.Values{"scene": {"lab/x"}, "username": {"lab"}}, 200, "anonymous-lab", auth.RoleViewer, ttl},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/user/v2/mqtt_auth", strings.NewReader(tc.form.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tc.token != "" {
				if tc.cookie {
					r.AddCookie(&http.Cookie{Name: CookieName, Value: tc.token})
				} else {
					r.Header.Set("Authorization", "Bearer "+tc.token)
				}
			}
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			if w.Code != tc.wantStatus {
				t.Fatalf("status %d %s, want %d", w.Code, w.Body, tc.wantStatus)
			}
			if w.Code != http.StatusOK {
				if !strings.Contains(w.Body.String(), `"error"`) {
					t.Errorf("refusal %s says nothing", w.Body)
				}
				return
			}
			var resp struct {
				Username string    `json:"username"`
				Token    string    `json:"token"`
				Role     auth.Role `json:"role"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			cl, err := keys.Verify(resp.Token)
			if err != nil {
				t.Fatal(err)
			}
			if cl.Subject != tc.wantUser || resp.Username != tc.wantUser || resp.Role != tc.wantRole {
				t.Fatalf("user %q (answer %q) role %q, want %q %q", cl.Subject, resp.Username, resp.Role, tc.wantUser, tc.wantRole)
			}
			ns, sc, _ := strings.Cut(tc.form.Get("scene"), "/")
			want := scene(ns, sc, tc.wantRole, tc.form.Get("userclient"))
			got := cl.Rights()
			if !slices.Equal(got.Publ, want.Publ) || !slices.Equal(got.Subs, want.Subs) || !slices.Equal(got.Evts, want.Evts) {
				t.Fatalf("rights %+v, want those of a %s in %s/%s: %+v", got, tc.wantRole, ns, sc, want)
			}
			if life := time.Until(cl.ExpiresAt.Time); life > tc.maxLife {
				t.Fatalf("token valid for %s, want at most %s", life, tc.maxLife)
			}
			for _, c := range w.Result().Cookies() {
				if c.Name == CookieName && time.Duration(c.MaxAge)*time.Second > tc.maxLife {
					t.Fatalf("cookie Max-Age %ds, want at most %s", c.MaxAge, tc.maxLife)
				}
			}
		})
	}
}
