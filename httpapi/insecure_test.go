package httpapi

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/auth"
)

// With Access.Insecure no route reads the request's credentials: whatever
// Authorization header or cookie a request has (none, a valid token, a
// bad one, another scheme, Bearer alone, two headers), every route that
// reads a token answers it as it answers a request without one, refuses
// nothing and counts no refusal. The token endpoint issues an editor's
// token, for the presented token's user when that token is valid and for
// the username asked otherwise; anyone may change a scene's settings.
func TestInsecureReadsNoCredentials(t *testing.T) {
	e := newRoutesEnv(t)
	e.access.Insecure = true
	owner, err := e.keys.Issue("lab", auth.SceneRights("realm", "lab", "room", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := e.keys.Issue("lab", auth.SceneRights("realm", "lab", "room", auth.RoleEditor, ""), -time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"scene": {"lab/room"}, "username": {"guest"}}.Encode()
	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/persist/lab/room", ""},
		{http.MethodGet, "/persist/!allscenes", ""},
		{http.MethodDelete, "/persist/lab/room", ""},
		{http.MethodGet, "/scenes/lab/room/settings", ""},
		{http.MethodPut, "/scenes/lab/room/settings", `{"public_read":true,"anonymous_users":true}`},
		{http.MethodPost, "/user/v2/mqtt_auth", form},
	}
	callers := []struct {
		name   string
		authz  []string
		cookie string
	}{
		{"no credentials", nil, ""},
		{"a valid token", []string{"Bearer " + owner}, ""},
		{"a valid token as the cookie", nil, owner},
		{"an expired token", []string{"Bearer " + expired}, ""},
		{"a bad token as the cookie", nil, "garbage"},
		{"Basic", []string{"Basic bGFiOnB3"}, ""},
		{"Basic with the cookie", []string{"Basic bGFiOnB3"}, owner},
		{"a bare token", []string{owner}, ""},
		{"Bearer alone", []string{"Bearer"}, ""},
		{"two headers", []string{"Bearer " + owner, "Basic bGFiOnB3"}, ""},
	}
	for _, rt := range routes {
		for _, c := range callers {
			t.Run(rt.method+" "+rt.path+"/"+c.name, func(t *testing.T) {
				r := credentialedRequest(rt.method, rt.path, rt.body, c.authz, c.cookie)
				before := counter(t, e.denials)
				w := httptest.NewRecorder()
				e.mux.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					t.Fatalf("%d %s, want 200", w.Code, strings.TrimSpace(w.Body.String()))
				}
				if h := w.Header().Values("WWW-Authenticate"); len(h) != 0 {
					t.Errorf("WWW-Authenticate %q on an answer that refuses nothing", h)
				}
				if n := counter(t, e.denials) - before; n != 0 {
					t.Errorf("%v refusals counted, want none", n)
				}
				if strings.HasPrefix(rt.path, "/user/") {
					want := "anonymous-guest"
					if c.name == "a valid token" || c.name == "a valid token as the cookie" {
						want = "lab"
					}
					if !strings.Contains(w.Body.String(), `"username":"`+want+`"`) || !strings.Contains(w.Body.String(), `"role":"editor"`) {
						t.Errorf("token endpoint: %s, want an editor token for %s", w.Body, want)
					}
				}
			})
		}
	}
}

// With Access.Insecure the token endpoint issues an editor's token for a
// scene whose settings let nobody but its owner in: the bus checks no
// rights, and the token says so.
func TestInsecureTokenForPrivateScene(t *testing.T) {
	e := newRoutesEnv(t)
	e.access.Insecure = true
	put := httptest.NewRequest(http.MethodPut, "/scenes/lab/secret/settings", strings.NewReader(`{"public_read":false,"anonymous_users":false}`))
	w := httptest.NewRecorder()
	e.mux.ServeHTTP(w, put)
	if w.Code != http.StatusOK {
		t.Fatalf("settings PUT: %d %s", w.Code, w.Body)
	}
	for _, form := range []url.Values{
		{"scene": {"lab/secret"}, "username": {"guest"}},
		{"scene": {"lab/secret"}, "username": {"guest"}, "id_auth": {"anonymous"}},
	} {
		r := httptest.NewRequest(http.MethodPost, "/user/v2/mqtt_auth", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		e.mux.ServeHTTP(w, r)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"role":"editor"`) {
			t.Errorf("token for %v: %d %s, want 200 with an editor's token", form, w.Code, strings.TrimSpace(w.Body.String()))
		}
	}
}
