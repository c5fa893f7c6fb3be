package persist

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// challengeError is an Access error with its own WWW-Authenticate header,
// as httpapi's errors have.
type challengeError struct {
	error
	challenge string
}

func (e challengeError) WWWAuthenticate() string { return e.challenge }
func (e challengeError) Unwrap() error           { return e.error }

// A refusal of Access answers with the WWW-Authenticate header its error
// gives (WWWAuthenticate), on a 401 and a 403 alike, also when the error
// wraps it; a 401 whose error gives none has DefaultChallenge, the realm
// alone (RFC 9110 §11.6.1 requires a challenge, RFC 6750 §3 a parameter
// in it); a 403 whose error gives none has no header. Every route that asks Access does so.
func TestRefusalChallenge(t *testing.T) {
	const scoped = `Bearer realm="xrealm", error="insufficient_scope", error_description="no rights"`
	const invalid = `Bearer realm="xrealm", error="invalid_token", error_description="expired"`
	h := fuzzStore(t).Handler(func(r *http.Request, ns, scene string, write bool) error {
		switch r.Header.Get("X-Refuse") {
		case "plain 401":
			return fmt.Errorf("no token: %w", ErrUnauthenticated)
		case "401 with a challenge":
			return fmt.Errorf("wrapped: %w", challengeError{fmt.Errorf("expired: %w", ErrUnauthenticated), invalid})
		case "plain 403":
			return errors.New("not allowed")
		case "403 with a challenge":
			return challengeError{errors.New("no rights"), scoped}
		}
		return nil
	})
	refusals := []struct {
		name      string
		status    int
		challenge string
	}{
		{"plain 401", http.StatusUnauthorized, `Bearer realm="xrealm"`},
		{"401 with a challenge", http.StatusUnauthorized, invalid},
		{"plain 403", http.StatusForbidden, ""},
		{"403 with a challenge", http.StatusForbidden, scoped},
		{"allowed", 0, ""},
	}
	for _, rt := range []struct{ method, path string }{
		{"GET", "/persist/!allscenes"},
		{"GET", "/persist/ns/!allscenes"},
		{"GET", "/persist/ns/sc"},
		{"GET", "/persist/ns/sc/box"},
		{"DELETE", "/persist/ns/sc"},
		{"POST", "/persist/ns/sc"},
	} {
		for _, rf := range refusals {
			t.Run(rt.method+" "+rt.path+"/"+rf.name, func(t *testing.T) {
				r := httptest.NewRequest(rt.method, rt.path, nil)
				r.Header.Set("X-Refuse", rf.name)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				got := w.Header().Values("WWW-Authenticate")
				if rf.status == 0 {
					if w.Code == http.StatusUnauthorized || w.Code == http.StatusForbidden || len(got) != 0 {
						t.Fatalf("allowed: %d %s, WWW-Authenticate %q", w.Code, w.Body, got)
					}
					return
				}
				if w.Code != rf.status {
					t.Fatalf("%d %s, want %d", w.Code, w.Body, rf.status)
				}
				switch {
				case rf.challenge == "" && len(got) != 0:
					t.Fatalf("WWW-Authenticate %q, want none", got)
				case rf.challenge != "" && (len(got) != 1 || got[0] != rf.challenge):
					t.Fatalf("WWW-Authenticate %q, want %q", got, rf.challenge)
				}
			})
		}
	}
}
