package bots

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHTTPTokensMalformedAnswer: an answer of the token endpoint that is
// not a 200 with a JSON object holding a token is an error that names the
// URL and shows (the start of) the answer; a good one gives its user and
// token.
func TestHTTPTokensMalformedAnswer(t *testing.T) {
	long := `{"token":` + strings.Repeat(" ", 70<<10) + `"x"}` // beyond the 64 KiB read
	for _, tt := range []struct {
		name, body string
		status     int
		want       string // in the error
	}{
		{"refused", "scene is private\n", http.StatusForbidden, "403 Forbidden: scene is private"},
		{"not JSON", "<html>proxy error</html>", http.StatusOK, "<html>proxy error</html>"},
		{"empty", "", http.StatusOK, `unexpected answer ""`},
		{"no token", `{"username":"bot"}`, http.StatusOK, `{\"username\":\"bot\"}`},
		{"empty token", `{"username":"bot","token":""}`, http.StatusOK, "unexpected answer"},
		{"token not a string", `{"username":"bot","token":42}`, http.StatusOK, "unexpected answer"},
		{"array", `[{"token":"x"}]`, http.StatusOK, "unexpected answer"},
		{"truncated", `{"username":"bot","tok`, http.StatusOK, "unexpected answer"},
		{"too long", long, http.StatusOK, "unexpected answer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			user, tok, err := (&HTTPTokens{BaseURL: srv.URL}).Token(context.Background(), Identity{User: "bot", Namespace: "public", Scene: "a"})
			if err == nil {
				t.Fatalf("accepted: user %q, token %q", user, tok)
			}
			if !strings.Contains(err.Error(), srv.URL+"/user/v2/mqtt_auth") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not name the URL and %q", err, tt.want)
			}
			if len(err.Error()) > 1000 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
		})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"username":"anonymous-bot","token":"abc.def.ghi","ids":{}}`))
	}))
	defer srv.Close()
	user, tok, err := (&HTTPTokens{BaseURL: srv.URL + "/"}).Token(context.Background(), Identity{User: "bot"})
	if err != nil || user != "anonymous-bot" || tok != "abc.def.ghi" {
		t.Fatalf("Token = %q, %q, %v", user, tok, err)
	}
}
