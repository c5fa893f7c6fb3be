package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/auth"
)

// The routes write '<', '>' and '&' in their JSON answers as they are, not
// as \u003c, \u003e and \u0026 (encoding/json's escaping for HTML), in an
// error's reason, in a name it quotes, and in an answer that is no error;
// the answer is still JSON that decodes to the same text, and says nosniff.
func TestJSONBodiesNotHTMLEscaped(t *testing.T) {
	e := newRoutesEnv(t)
	owner, err := e.keys.Issue("lab", auth.SceneRights("realm", "lab", "room", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	anon, err := e.keys.Issue("anonymous-<x>&", auth.SceneRights("realm", "lab", "room", auth.RoleViewer, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	form := func(v url.Values) string { return v.Encode() }
	for _, tc := range []struct {
		name, method, path, authz, body string
		status                          int
		field, want                     string // the answer's field and a part of its text
	}{
		{"a reason that names <token>", "GET", "/persist/lab/room", "Token abc", "", 401,
			"error", "send Authorization: Bearer <token> (a JWT"},
		{"a quoted realm", "POST", "/user/v2/mqtt_auth", "", form(url.Values{"realm": {"a<b>&c"}, "scene": {"lab/room"}}), 400,
			"error", `unknown realm "a<b>&c"; this server serves "realm"`},
		{"a quoted user", "PUT", "/scenes/lab/room/settings", "Bearer " + anon, "{}", 403,
			"error", `user "anonymous-<x>&" is anonymous`},
		{"a quoted body", "PUT", "/scenes/lab/room/settings", "Bearer " + owner, "<html>&amp;", 400,
			"error", `the body must be a JSON object, got "<html>&amp;"`},
		{"an answer that is no error", "POST", "/user/v2/mqtt_auth", "", form(url.Values{"id_auth": {"anonymous"}, "username": {"<b>&"}, "scene": {"lab/room"}}), 200,
			"username", "anonymous-<b>&"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.method == http.MethodPost {
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			if tc.authz != "" {
				r.Header.Set("Authorization", tc.authz)
			}
			w := httptest.NewRecorder()
			e.mux.ServeHTTP(w, r)
			body := w.Body.String()
			if w.Code != tc.status {
				t.Fatalf("%d %s, want %d", w.Code, body, tc.status)
			}
			if !strings.Contains(body, strings.ReplaceAll(tc.want, `"`, `\"`)) {
				t.Fatalf("answer %s does not have %s as it is", body, tc.want)
			}
			for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
				if strings.Contains(body, esc) {
					t.Fatalf("answer %s has %s", body, esc)
				}
			}
			var got map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatalf("answer %s: %v", body, err)
			}
			if s, _ := got[tc.field].(string); !strings.Contains(s, tc.want) {
				t.Fatalf("field %s = %q, want it to have %q", tc.field, s, tc.want)
			}
			if h := w.Header().Get("X-Content-Type-Options"); h != "nosniff" {
				t.Errorf("X-Content-Type-Options %q, want nosniff", h)
			}
		})
	}
}
