package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/persist"
)

// bearerChallenge is the form of every WWW-Authenticate header the routes
// send (RFC 6750 §3): the realm, and optionally an error code with a
// description of printable ASCII without '"' and '\'.
var bearerChallenge = regexp.MustCompile(`^Bearer realm="xrealm"(, error="(invalid_token|insufficient_scope)", error_description="([\x20\x21\x23-\x5b\x5d-\x7e]{1,120})")?$`)

// Every 401 of every route that reads a token, wired as the server wires
// them, carries a Bearer challenge in WWW-Authenticate (RFC 9110 §11.6.1):
// the realm alone when no credentials came, only another scheme's, or a
// malformed Authorization header (Bearer alone, two headers: no
// invalid_request, which RFC 6750 §3.1 pairs with 400), with
// error="invalid_token" and the reason when a token came and was refused
// (garbage, expired, in the header or the cookie). A valid
// token without the rights gets 403 with error="insufficient_scope"; other
// answers have no challenge. No challenge quotes the credentials.
func TestChallengeRoutes(t *testing.T) {
	e := newRoutesEnv(t)
	if err := e.settings.Put(context.Background(), auth.Settings{Namespace: "lab", Scene: "secret", Viewers: []string{"carol"}}); err != nil {
		t.Fatal(err)
	}
	expired, err := e.keys.Issue("carol", auth.SceneRights("realm", "lab", "secret", auth.RoleViewer, ""), -time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dave, err := e.keys.Issue("dave", auth.SceneRights("realm", "dave", "copy", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const (
		none    = ""
		realm   = `Bearer realm="xrealm"`
		invalid = `Bearer realm="xrealm", error="invalid_token", error_description="`
		scope   = `Bearer realm="xrealm", error="insufficient_scope", error_description="`
	)
	type want struct {
		status    int
		challenge string // the header, or its start when it ends with `description="`
	}
	callers := []struct {
		name   string
		authz  []string
		cookie string
		reason string // in the description of an invalid_token
	}{
		{"no token", nil, "", ""},
		{"a bad token", []string{"Bearer garbage"}, "", "token is malformed"},
		{"a bad token as the cookie", nil, "garbage", "token is malformed"},
		{"an expired token", []string{"Bearer " + expired}, "", "token is expired"},
		{"Basic", []string{"Basic bGFiOnB3"}, "", ""},
		{"a token without Bearer", []string{dave}, "", ""},
		{"Bearer alone", []string{"Bearer"}, "", ""},
		{"two headers", []string{"Bearer " + dave, "Bearer " + dave}, "", ""},
		{"a valid token without the rights", []string{"Bearer " + dave}, "", ""},
	}
	// For each route, what each caller gets, in the order of callers.
	refusedToken := want{401, invalid}
	refusedScheme := want{401, realm}
	malformed := want{401, realm}
	read := func(noToken, noRights want) [9]want {
		return [9]want{noToken, refusedToken, refusedToken, refusedToken, refusedScheme, refusedScheme, malformed, malformed, noRights}
	}
	form := url.Values{"scene": {"lab/secret"}, "username": {"x"}}.Encode()
	listed := want{200, none}
	for _, rt := range []struct {
		method, path, body string
		want               [9]want
	}{
		{"GET", "/persist/lab/secret", "", read(want{401, realm}, want{403, scope})},
		{"GET", "/persist/lab/secret/box", "", read(want{401, realm}, want{403, scope})},
		{"GET", "/persist/!allscenes", "", read(listed, listed)},
		{"GET", "/persist/lab/!allscenes", "", read(listed, listed)},
		{"DELETE", "/persist/lab/secret", "", read(want{401, realm}, want{403, scope})},
		{"POST", "/persist/lab/secret", `{"action":"clone","namespace":"lab","sceneId":"room"}`, read(want{401, realm}, want{403, scope})},
		{"POST", "/persist/dave/copy", `{"action":"clone","namespace":"lab","sceneId":"secret"}`, read(want{401, realm}, want{403, scope})},
		{"GET", "/scenes/lab/secret/settings", "", read(want{401, realm}, want{403, scope})},
		{"PUT", "/scenes/lab/secret/settings", `{"viewers":["carol"]}`, read(want{401, realm}, want{403, scope})},
		// the token endpoint refuses a caller without a token in a
		// private scene with 403: no token came to be refused
		{"POST", "/user/v2/mqtt_auth", form, read(want{403, none}, want{403, scope})},
	} {
		for i, c := range callers {
			t.Run(rt.method+" "+rt.path+"/"+c.name, func(t *testing.T) {
				r := credentialedRequest(rt.method, rt.path, rt.body, c.authz, c.cookie)
				w := httptest.NewRecorder()
				e.mux.ServeHTTP(w, r)
				wt := rt.want[i]
				got := w.Header().Values("WWW-Authenticate")
				if w.Code != wt.status {
					t.Fatalf("%d %s (WWW-Authenticate %q), want %d", w.Code, strings.TrimSpace(w.Body.String()), got, wt.status)
				}
				if wt.challenge == none {
					if len(got) != 0 {
						t.Fatalf("WWW-Authenticate %q on a %d, want none", got, w.Code)
					}
					return
				}
				if len(got) != 1 {
					t.Fatalf("WWW-Authenticate %q, want one header", got)
				}
				h := got[0]
				if !bearerChallenge.MatchString(h) {
					t.Fatalf("WWW-Authenticate %q is not an RFC 6750 Bearer challenge", h)
				}
				if strings.HasSuffix(wt.challenge, `description="`) {
					if !strings.HasPrefix(h, wt.challenge) {
						t.Fatalf("WWW-Authenticate %q, want it to start %s", h, wt.challenge)
					}
				} else if h != wt.challenge {
					t.Fatalf("WWW-Authenticate %q, want %s", h, wt.challenge)
				}
				if wt.challenge == invalid && !strings.Contains(h, c.reason) {
					t.Errorf("WWW-Authenticate %q does not say %q", h, c.reason)
				}
				for _, secret := range []string{dave, expired, "bGFiOnB3", "garbage"} {
					if strings.Contains(h, secret) {
						t.Errorf("WWW-Authenticate %q quotes the credentials", h)
					}
				}
			})
		}
	}
}

// The description of a refusal is its reason made fit for a quoted
// error_description: printable ASCII, no '"' or '\', at most
// maxDescription bytes, cut at a space.
func TestDescription(t *testing.T) {
	long := strings.Repeat("word ", 40)
	for _, tc := range []struct{ msg, want string }{
		{"invalid token: token has invalid claims: token is expired", "invalid token: token has invalid claims: token is expired"},
		{`the Authorization scheme "Basic" is not supported: send Authorization: Bearer <token>`, `the Authorization scheme 'Basic' is not supported: send Authorization: Bearer <token>`},
		{`a\b`, "a/b"},
		{"line\none\ttab\rcr", "line one tab cr"},
		{"bell\x07 del\x7f nul\x00", "bell? del? nul?"},
		{"ünï ☃", "?n? ?"},
		{"bad \xff\xfe utf-8", "bad ?? utf-8"},
		{"", ""},
		{strings.Repeat("x", maxDescription), strings.Repeat("x", maxDescription)},
		{strings.Repeat("x", maxDescription+1), strings.Repeat("x", maxDescription-3) + "..."},
		{long, strings.Repeat("word ", 22) + "word..."},
	} {
		got := description(tc.msg)
		if got != tc.want {
			t.Errorf("description(%q) = %q, want %q", tc.msg, got, tc.want)
		}
		if len(got) > maxDescription {
			t.Errorf("description(%q) has %d bytes, more than %d", tc.msg, len(got), maxDescription)
		}
	}
}

// An error of Access carries its challenge for a handler of another
// package (persist's) through WWWAuthenticate, also wrapped further: a
// refused token's and a missing token's 401, a valid token's 403; other
// errors have none.
func TestWWWAuthenticate(t *testing.T) {
	e := newRoutesEnv(t)
	dave, err := e.keys.Issue("dave", auth.SceneRights("realm", "dave", "copy", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.settings.Put(context.Background(), auth.Settings{Namespace: "lab", Scene: "secret"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token, ns, scene string
		want                   string
	}{
		{"no token", "", "lab", "secret", `Bearer realm="xrealm"`},
		{"a bad token", "garbage", "lab", "secret", `Bearer realm="xrealm", error="invalid_token", error_description="invalid token: token is malformed: token contains an invalid number of segments"`},
		{"no rights", dave, "lab", "secret", `Bearer realm="xrealm", error="insufficient_scope", error_description="user dave may not read scene lab/secret"`},
		{"a bad name", dave, "lab", "a b", ""},
		{"allowed", dave, "dave", "copy", "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			err := e.access.Scene(r, tc.ns, tc.scene, false)
			if tc.want == "-" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var c interface{ WWWAuthenticate() string }
			if !errors.As(errors.Join(errors.New("context"), err), &c) {
				t.Fatalf("error %v has no WWWAuthenticate", err)
			}
			if got := c.WWWAuthenticate(); got != tc.want {
				t.Fatalf("WWWAuthenticate() = %q, want %q", got, tc.want)
			}
		})
	}
}

// A 401 without an error code has the same challenge here as persist's
// handler gives one whose error brings none (persist.DefaultChallenge):
// the realm alone.
func TestDefaultChallenge(t *testing.T) {
	if got := challenge(wrap(ErrUnauthenticated, "no token")); got != persist.DefaultChallenge {
		t.Fatalf("challenge of a 401 without a code: %q, persist.DefaultChallenge %q", got, persist.DefaultChallenge)
	}
}
