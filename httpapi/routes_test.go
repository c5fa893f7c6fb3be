package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/auth"
)

// Every route that reads or changes a scene, wired as the server wires
// them, checks the caller's rights in a private scene (lab/secret, whose
// settings list carol as a viewer): without a token, with the token of a
// user the settings do not list, of a listed viewer and of the
// namespace's owner. Reads need the viewer's rights, writes the owner's
// (or an editor's), a clone reads its source too, and the token endpoint
// gives the same users a token.
func TestRoutesCheckRights(t *testing.T) {
	e := newRoutesEnv(t)
	if err := e.settings.Put(context.Background(), auth.Settings{Namespace: "lab", Scene: "secret", Viewers: []string{"carol"}}); err != nil {
		t.Fatal(err)
	}
	issue := func(user, ns, scene string, role auth.Role) string {
		tok, err := e.keys.Issue(user, auth.SceneRights("realm", ns, scene, role, ""), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	callers := []struct{ name, token string }{
		{"no token", ""},
		{"dave", issue("dave", "dave", "copy", auth.RoleEditor)},
		{"carol", issue("carol", "carol", "copy", auth.RoleEditor)},
		{"the owner", issue("lab", "lab", "room", auth.RoleEditor)},
	}
	form := url.Values{"scene": {"lab/secret"}, "username": {"x"}}.Encode()
	const (
		ok        = http.StatusOK
		noToken   = http.StatusUnauthorized
		forbidden = http.StatusForbidden
		empty     = http.StatusNotFound // a clone of the empty scene: allowed
	)
	for _, rt := range []struct {
		method, path, body string
		want               [4]int // for each caller
	}{
		{"GET", "/persist/lab/secret", "", [4]int{noToken, forbidden, ok, ok}},
		{"GET", "/persist/lab/secret/box", "", [4]int{noToken, forbidden, ok, ok}},
		{"GET", "/scenes/lab/secret/settings", "", [4]int{noToken, forbidden, ok, ok}},
		{"DELETE", "/persist/lab/secret", "", [4]int{noToken, forbidden, forbidden, ok}},
		{"POST", "/persist/lab/secret", `{"action":"clone","namespace":"lab","sceneId":"room"}`, [4]int{noToken, forbidden, forbidden, empty}},
		{"POST", "/persist/dave/copy", `{"action":"clone","namespace":"lab","sceneId":"secret"}`, [4]int{noToken, forbidden, forbidden, forbidden}},
		{"POST", "/persist/carol/copy", `{"action":"clone","namespace":"lab","sceneId":"secret"}`, [4]int{noToken, forbidden, empty, forbidden}},
		{"PUT", "/scenes/lab/secret/settings", `{"viewers":["carol"]}`, [4]int{noToken, forbidden, forbidden, ok}},
		{"POST", "/user/v2/mqtt_auth", form, [4]int{forbidden, forbidden, ok, ok}},
	} {
		for i, c := range callers {
			r := httptest.NewRequest(rt.method, rt.path, strings.NewReader(rt.body))
			if strings.HasPrefix(rt.path, "/user/") {
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			if c.token != "" {
				r.Header.Set("Authorization", "Bearer "+c.token)
			}
			w := httptest.NewRecorder()
			e.mux.ServeHTTP(w, r)
			if w.Code != rt.want[i] {
				t.Errorf("%s %s by %s: %d %s, want %d", rt.method, rt.path, c.name, w.Code, strings.TrimSpace(w.Body.String()), rt.want[i])
			}
		}
	}
}
