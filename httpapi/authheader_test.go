package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/auth"
)

// routesEnv is this package's routes and the persistence routes on a
// real bus, wired as the server wires them.
type routesEnv struct {
	dir      string // the data directory: the signing key is in keys/
	mux      *http.ServeMux
	keys     *auth.Keys
	settings *auth.SettingsStore
	access   *Access
	denials  prometheus.Counter
}

func newRoutesEnv(t *testing.T) *routesEnv {
	t.Helper()
	dir := t.TempDir()
	js := embeddedJS(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	settings, err := auth.OpenSettings(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	store := runStore(t, js)
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := &routesEnv{dir: dir, mux: http.NewServeMux(), keys: keys, settings: settings, denials: prometheus.NewCounter(prometheus.CounterOpts{Name: "d"})}
	e.access = &Access{Realm: "realm", Keys: keys, Settings: settings, Denials: e.denials}
	New(Config{Realm: "realm", Access: e.access, Settings: settings, TokenTTL: time.Hour, Logger: slog.New(slog.DiscardHandler)}).Register(e.mux)
	e.mux.Handle("/persist/", store.Handler(e.access.Scene))
	return e
}

// An Authorization header that carries no Bearer token (Basic, another
// scheme, a bare token, Bearer alone, an empty header, two headers) is
// refused with 401 by every route that reads a token, with a reason that
// says what xrealm takes and quotes no credentials, and counts as a
// refusal: not answered as a request without a token (the public scene's
// routes as to an anonymous caller, the token endpoint with an anonymous
// token, PUT saying that the request "needs a token"). A valid Bearer
// token is answered as the owner's, and a request without the header as
// an anonymous caller's.
func TestAuthorizationHeaderRoutes(t *testing.T) {
	e := newRoutesEnv(t)
	owner, err := e.keys.Issue("lab", auth.SceneRights("realm", "lab", "room", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"scene": {"lab/room"}, "username": {"guest"}}.Encode()
	routes := []struct {
		method, path, body string
		noHeader           int // the status without an Authorization header
	}{
		{http.MethodGet, "/persist/lab/room", "", http.StatusOK},
		{http.MethodGet, "/persist/lab/room/box", "", http.StatusOK},
		{http.MethodGet, "/persist/!allscenes", "", http.StatusOK},
		{http.MethodGet, "/persist/lab/!allscenes", "", http.StatusOK},
		{http.MethodDelete, "/persist/lab/room", "", http.StatusUnauthorized},
		{http.MethodPost, "/persist/lab/room", `{"action":"clone","namespace":"lab","sceneId":"other"}`, http.StatusUnauthorized},
		{http.MethodGet, "/scenes/lab/room/settings", "", http.StatusOK},
		{http.MethodPut, "/scenes/lab/room/settings", `{"public_read":true,"anonymous_users":true}`, http.StatusUnauthorized},
		{http.MethodPost, "/user/v2/mqtt_auth", form, http.StatusOK},
	}
	headers := []struct {
		name    string
		authz   []string
		cookie  string
		wantErr string // "" = answered as noHeader (nil authz) or as the owner
	}{
		{"no header", nil, "", ""},
		{"Bearer", []string{"Bearer " + owner}, "", ""},
		{"bearer in lower case", []string{"bearer " + owner}, "", ""},
		{"Basic", []string{"Basic bGFiOnB3"}, "", `the Authorization scheme \"Basic\" is not supported`},
		{"Basic with the cookie", []string{"Basic bGFiOnB3"}, CookieName + "=" + owner, `the Authorization scheme \"Basic\" is not supported`},
		{"Token", []string{"Token " + owner}, "", `the Authorization scheme \"Token\" is not supported`},
		{"a bare token", []string{owner}, "", "the Authorization header has no scheme"},
		{"Bearer alone", []string{"Bearer"}, "", "the Authorization header is Bearer with no token"},
		{"Bearer and spaces", []string{"Bearer   "}, "", "the Authorization header is Bearer with no token"},
		{"an empty header", []string{""}, "", "the Authorization header is empty"},
		{"two headers", []string{"Bearer " + owner, "Basic bGFiOnB3"}, "", "the request has 2 Authorization headers"},
	}
	for _, rt := range routes {
		for _, h := range headers {
			t.Run(rt.method+" "+rt.path+"/"+h.name, func(t *testing.T) {
				r := httptest.NewRequest(rt.method, rt.path, strings.NewReader(rt.body))
				if rt.method == http.MethodPost && strings.HasPrefix(rt.path, "/user/") {
					r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				for _, v := range h.authz {
					r.Header.Add("Authorization", v)
				}
				if h.cookie != "" {
					r.Header.Set("Cookie", h.cookie)
				}
				before := counter(t, e.denials)
				w := httptest.NewRecorder()
				e.mux.ServeHTTP(w, r)
				refused := counter(t, e.denials) - before
				switch {
				case h.wantErr != "":
					if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), h.wantErr) {
						t.Fatalf("%d %s, want 401 saying %s", w.Code, w.Body, h.wantErr)
					}
					if !strings.Contains(w.Body.String(), `Authorization: Bearer <token>`) {
						t.Errorf("the refusal %s does not say what xrealm takes", w.Body)
					}
					if strings.Contains(w.Body.String(), owner) || strings.Contains(w.Body.String(), "bGFiOnB3") {
						t.Errorf("the refusal %s quotes the credentials", w.Body)
					}
					if refused != 1 {
						t.Errorf("%v refusals counted, want 1", refused)
					}
				case h.authz == nil:
					if w.Code != rt.noHeader {
						t.Fatalf("%d %s, want %d", w.Code, w.Body, rt.noHeader)
					}
				default: // the owner's token
					if w.Code >= 400 && w.Code != http.StatusNotFound { // the clone's source is empty
						t.Fatalf("%d %s with the owner's token", w.Code, w.Body)
					}
				}
			})
		}
	}
}

// A token request with id_auth=anonymous reads no credentials: it is
// answered with an anonymous viewer's token whatever Authorization header
// it has (a valid token, an invalid one or any other), so a client behind
// a proxy that adds its own Authorization header can still ask as a
// guest. Without id_auth=anonymous, the same headers are refused.
func TestMQTTAuthAnonymousIgnoresCredentials(t *testing.T) {
	e := newRoutesEnv(t)
	owner, err := e.keys.Issue("lab", auth.SceneRights("realm", "lab", "room", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		authz []string
		asked int // the status without id_auth=anonymous
	}{
		{"no header", nil, http.StatusOK},
		{"a valid token", []string{"Bearer " + owner}, http.StatusOK},
		{"an invalid token", []string{"Bearer garbage"}, http.StatusUnauthorized},
		{"Basic", []string{"Basic bGFiOnB3"}, http.StatusUnauthorized},
		{"a bare token", []string{owner}, http.StatusUnauthorized},
		{"Bearer alone", []string{"Bearer"}, http.StatusUnauthorized},
		{"two headers", []string{"Basic bGFiOnB3", "Bearer " + owner}, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, anonymous := range []bool{true, false} {
				v := url.Values{"scene": {"lab/room"}, "username": {"guest"}}
				if anonymous {
					v.Set("id_auth", "anonymous")
				}
				r := httptest.NewRequest(http.MethodPost, "/user/v2/mqtt_auth", strings.NewReader(v.Encode()))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				for _, h := range tc.authz {
					r.Header.Add("Authorization", h)
				}
				w := httptest.NewRecorder()
				e.mux.ServeHTTP(w, r)
				want := tc.asked
				if anonymous {
					want = http.StatusOK
				}
				if w.Code != want {
					t.Fatalf("id_auth=anonymous %v: %d %s, want %d", anonymous, w.Code, w.Body, want)
				}
				if anonymous && !strings.Contains(w.Body.String(), `"username":"anonymous-guest"`) {
					t.Fatalf("id_auth=anonymous: %s, want an anonymous token for anonymous-guest", w.Body)
				}
			}
		})
	}
}

// The SFU WebSocket's check (Access.SceneClients, which the server's
// sfuAccess calls) refuses an Authorization header that carries no Bearer
// token when the offer brings none, and does not read the header when the
// offer brings a token.
func TestSceneClientsAuthorizationHeader(t *testing.T) {
	e := newRoutesEnv(t)
	viewer, err := e.keys.Issue("carol", auth.SceneRights("realm", "lab", "room", auth.RoleViewer, "cam_1"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, authz, offer string
		wantErr            string // "" = allowed
		wantIDs            []string
	}{
		{"no header, no token: the public scene's settings", "", "", "", nil},
		{"Basic, no token", "Basic bGFiOnB3", "", `the Authorization scheme "Basic" is not supported`, nil},
		{"a bare token, no token", viewer, "", "the Authorization header has no scheme", nil},
		{"Bearer alone, no token", "Bearer", "", "the Authorization header is Bearer with no token", nil},
		{"Bearer, no token", "Bearer " + viewer, "", "", []string{"cam_1"}},
		{"Basic, with the offer's token", "Basic bGFiOnB3", viewer, "", []string{"cam_1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/sfu/ws?scene=lab/room", nil)
			if tc.authz != "" {
				r.Header.Set("Authorization", tc.authz)
			}
			b, err := e.access.SceneClients(r, tc.offer, "lab", "room")
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) || statusOf(err) != http.StatusUnauthorized {
					t.Fatalf("binding %+v, %v; want a 401 error starting %q", b, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantIDs == nil && !b.Any || tc.wantIDs != nil && (b.Any || strings.Join(b.IDs, ",") != strings.Join(tc.wantIDs, ",")) {
				t.Fatalf("binding %+v, want ids %q", b, tc.wantIDs)
			}
		})
	}
}

// A token that is too long (over auth.MaxTokenLen), in the Authorization
// header or the cookie, or a JWT whose header is huge or garbage, is
// refused with 401 and a short reason by every route that reads a token:
// the long one for its length, before it is parsed. The answer quotes
// none of it.
func TestMalformedTokenRoutes(t *testing.T) {
	e := newRoutesEnv(t)
	valid, err := e.keys.Issue("lab", auth.SceneRights("realm", "lab", "room", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(valid, ".", 3)
	b64 := base64.RawURLEncoding.EncodeToString
	const tooLong = "more than a token of this server may have (16384)"
	tokens := []struct {
		name, token string
		cookie      bool
		want        string
	}{
		{"one byte too long", strings.Repeat("A", auth.MaxTokenLen+1), false, tooLong},
		{"a valid token with 16 KiB after it", valid + strings.Repeat("A", 16<<10), false, tooLong},
		{"900 KiB", strings.Repeat("eyJ.", 900<<8), false, tooLong},
		{"too long, as the cookie", strings.Repeat("A", 20<<10), true, tooLong},
		{"a 10 KiB header", b64([]byte(`{"alg":"ES256","x":"`+strings.Repeat("A", 10<<10)+`"}`)) + "." + parts[1] + "." + parts[2], false, "signature is invalid"},
		{"a header nested 3000 deep", b64([]byte(`{"alg":"ES256","x":`+strings.Repeat("[", 3000)+strings.Repeat("]", 3000)+`}`)) + "." + parts[1] + "." + parts[2], false, "signature is invalid"},
		{"a header of garbage bytes", b64(bytes.Repeat([]byte{0xfe, 0x00}, 4<<10)) + "." + parts[1] + "." + parts[2], false, "could not JSON decode header"},
		{"a header that is not base64", strings.Repeat("*", 8<<10) + "." + parts[1] + "." + parts[2], false, "could not base64 decode header"},
		{"a truncated token", valid[:len(valid)/2], false, "invalid token"},
		{"another algorithm", b64([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + parts[1] + "." + parts[2], false, `the token's algorithm \"HS256\" is not accepted: this server takes ES256 tokens only`},
	}
	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/persist/lab/room", ""},
		{http.MethodGet, "/persist/!allscenes", ""},
		{http.MethodGet, "/scenes/lab/room/settings", ""},
		{http.MethodPut, "/scenes/lab/room/settings", `{"public_read":true,"anonymous_users":true}`},
		{http.MethodPost, "/user/v2/mqtt_auth", "scene=lab%2Froom"},
	}
	for _, tc := range tokens {
		for _, rt := range routes {
			t.Run(tc.name+"/"+rt.method+" "+rt.path, func(t *testing.T) {
				r := httptest.NewRequest(rt.method, rt.path, strings.NewReader(rt.body))
				if rt.method == http.MethodPost {
					r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				if tc.cookie {
					r.AddCookie(&http.Cookie{Name: CookieName, Value: tc.token})
				} else {
					r.Header.Set("Authorization", "Bearer "+tc.token)
				}
				w := httptest.NewRecorder()
				e.mux.ServeHTTP(w, r)
				if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), tc.want) {
					t.Fatalf("%d %.300s, want 401 saying %q", w.Code, w.Body, tc.want)
				}
				if w.Body.Len() > 1024 {
					t.Fatalf("an answer of %d bytes: %.300s", w.Body.Len(), w.Body)
				}
			})
		}
	}
}

// credentialedRequest is a request for method and path with body (a form
// for the token endpoint's /user/ routes), the Authorization headers authz
// and, unless cookie is "", the mqtt_token cookie.
func credentialedRequest(method, path, body string, authz []string, cookie string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if strings.HasPrefix(path, "/user/") {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, h := range authz {
		r.Header.Add("Authorization", h)
	}
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: CookieName, Value: cookie})
	}
	return r
}
