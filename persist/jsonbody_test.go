package persist

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The persistence routes write '<', '>' and '&' in their JSON answers as
// they are, not as \u003c, \u003e and \u0026 (encoding/json's escaping for
// HTML): in a refusal's reason, in a value an error quotes, and in a path
// it names. The answer still decodes to the same text, and says nosniff.
func TestJSONBodiesNotHTMLEscaped(t *testing.T) {
	h := fuzzStore(t).Handler(func(r *http.Request, ns, scene string, write bool) error {
		if scene == "secret" {
			return accessError("send Authorization: Bearer <token> & try again")
		}
		return nil
	})
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		want                     string // a part of the error's text
	}{
		{"a refusal that names <token>", "GET", "/persist/ns/secret", "", 403, "send Authorization: Bearer <token> & try again"},
		{"a quoted action", "POST", "/persist/ns/sc", `{"action":"<b>&amp;"}`, 400, `unknown action "<b>&amp;"; the only action is "clone"`},
		{"a path", "PUT", "/persist/ns/<sc>&", "", 404, "no such route: PUT /persist/ns/<sc>&"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/", strings.NewReader(tc.body))
			r.URL.Path = tc.path
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
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
			var got struct{ Error string }
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || !strings.Contains(got.Error, tc.want) {
				t.Fatalf("answer %s decodes to %q, %v; want it to have %q", body, got.Error, err, tc.want)
			}
			if h := w.Header().Get("X-Content-Type-Options"); h != "nosniff" {
				t.Errorf("X-Content-Type-Options %q, want nosniff", h)
			}
		})
	}
}

// accessError is a refusal of Access with the text it is given.
type accessError string

func (e accessError) Error() string { return string(e) }
