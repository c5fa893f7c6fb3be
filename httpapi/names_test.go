package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/auth"
)

// Namespace and scene names that cannot name one scene (wildcards, dots,
// slashes, non-ASCII) are the client's error: 400 with a message naming
// the bad part, on every route, never 500 and never an internal error text.
func TestSceneNamesAtTheBoundary(t *testing.T) {
	e := newAPIEnv(t)
	alice, err := e.keys.Issue("alice", auth.SceneRights("realm", "public", "lobby", auth.RoleViewer, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 6000)
	tests := []struct {
		name       string
		method     string
		target     string
		body       string
		tok        string
		wantStatus int
		wantMsg    string // part of the answer
	}{
		{"get: valid", "GET", "/scenes/alice/lab/settings", "", "", 200, `"public_read":true`},
		{"get: wildcard scene", "GET", "/scenes/alice/+/settings", "", "", 400, `scene name \"+\": '+' is not allowed (an MQTT wildcard`},
		{"get: wildcard namespace", "GET", "/scenes/+/lab/settings", "", "", 400, `namespace name \"+\"`},
		{"get: hash", "GET", "/scenes/alice/#/settings", "", "", 400, `scene name \"#\"`},
		{"get: dot", "GET", "/scenes/alice/a.b/settings", "", "", 400, `scene name \"a.b\": '.' is not allowed`},
		{"get: non-ASCII", "GET", "/scenes/alice/caf\u00e9/settings", "", "", 400, `is not allowed`},
		{"get: star", "GET", "/scenes/alice/*/settings", "", alice, 400, `scene name \"*\"`},
		{"put: valid", "PUT", "/scenes/alice/lab/settings", `{"public_read":true}`, alice, 200, `"scene":"lab"`},
		{"put: wildcard", "PUT", "/scenes/alice/+/settings", `{}`, alice, 400, `scene name \"+\"`},
		{"put: dot", "PUT", "/scenes/alice/a.b/settings", `{}`, alice, 400, `'.' is not allowed`},
		{"put: bad name before the missing token", "PUT", "/scenes/alice/+/settings", `{}`, "", 400, `scene name \"+\"`},
		{"put: bad interest", "PUT", "/scenes/alice/lab/settings", `{"interest":{"mode":"cube"}}`, alice, 400, `interest mode`},
		{"mqtt_auth: valid", "POST", "/user/v2/mqtt_auth", "id_auth=anonymous&username=g&scene=alice/room", "", 200, `"role":"viewer"`},
		{"mqtt_auth: wildcard", "POST", "/user/v2/mqtt_auth", "id_auth=anonymous&username=g&scene=alice/%2B", "", 400, `scene \"alice/+\": scene name \"+\"`},
		{"mqtt_auth: all wildcards", "POST", "/user/v2/mqtt_auth", "scene=%2B/%2B", alice, 400, `namespace name \"+\"`},
		{"mqtt_auth: hash", "POST", "/user/v2/mqtt_auth", "scene=alice/%23", alice, 400, `scene name \"#\"`},
		{"mqtt_auth: dot", "POST", "/user/v2/mqtt_auth", "scene=alice/a.b", "", 400, `'.' is not allowed`},
		{"mqtt_auth: three levels", "POST", "/user/v2/mqtt_auth", "scene=alice/lab/x", "", 400, `scene name \"lab/x\"`},
		{"mqtt_auth: no slash", "POST", "/user/v2/mqtt_auth", "scene=alice", "", 400, `namespace/scene`},
		{"mqtt_auth: empty namespace", "POST", "/user/v2/mqtt_auth", "scene=/lab", "", 400, `namespace name is empty`},
		{"mqtt_auth: wildcard userclient", "POST", "/user/v2/mqtt_auth", "scene=alice/lab&userclient=%23", "", 400, `userclient \"#\"`},
		{"mqtt_auth: userclient with a slash", "POST", "/user/v2/mqtt_auth", "scene=alice/lab&userclient=a/b", "", 400, `userclient \"a/b\"`},
		// Names too long for a NATS protocol line are refused without a
		// request to the bus: sent there, they would make the bus's
		// server close the settings store's connection, and every later
		// request would fail.
		{"get: long scene", "GET", "/scenes/alice/" + long + "/settings", "", "", 400, `of 6000 bytes is longer than the longest, 128`},
		{"get: long namespace", "GET", "/scenes/" + long + "/lab/settings", "", alice, 400, `namespace name`},
		{"put: long scene", "PUT", "/scenes/alice/" + long + "/settings", `{}`, alice, 400, `scene name`},
		{"mqtt_auth: long scene", "POST", "/user/v2/mqtt_auth", "id_auth=anonymous&scene=alice/" + long, "", 400, `is longer than the longest`},
		{"mqtt_auth: long userclient", "POST", "/user/v2/mqtt_auth", "scene=alice/lab&userclient=" + long, "", 400, `userclient \"aaaa`},
		{"get: valid after the long names", "GET", "/scenes/alice/lab/settings", "", alice, 200, `"public_read":true`},
		{"mqtt_auth: valid after the long names", "POST", "/user/v2/mqtt_auth", "id_auth=anonymous&username=g&scene=alice/room", "", 200, `"role":"viewer"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := e.do(tt.method, tt.target, tt.body, tt.tok)
			if w.Code != tt.wantStatus || !strings.Contains(w.Body.String(), tt.wantMsg) {
				t.Fatalf("%s %.100s: %d %.300s; want %d with %s", tt.method, tt.target, w.Code, w.Body, tt.wantStatus, tt.wantMsg)
			}
			if w.Code >= 400 && w.Body.Len() > 600 {
				t.Errorf("answer of %d bytes quotes the whole input: %.200s...", w.Body.Len(), w.Body)
			}
			if strings.Contains(w.Body.String(), "nats:") {
				t.Fatalf("answer %s shows an internal error", w.Body)
			}
			var v map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
				t.Fatalf("answer %q is not JSON: %v", w.Body, err)
			}
		})
	}
}

// Access.Scene, which the persistence and SFU routes use too, refuses bad
// names with a 400 error, with or without authentication, and does not
// count them as denials.
func TestAccessSceneBadNames(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		a := &Access{Realm: "realm", Insecure: insecure}
		r := httptest.NewRequest("GET", "/persist/alice/+", nil)
		for _, c := range [][2]string{{"alice", "+"}, {"+", "lab"}, {"alice", "a.b"}, {"alice", "#"}, {"", "lab"}} {
			err := a.Scene(r, c[0], c[1], false)
			if !errors.Is(err, ErrBadRequest) || statusOf(err) != http.StatusBadRequest {
				t.Errorf("insecure %v, %s/%s: %v (status %d), want ErrBadRequest and 400", insecure, c[0], c[1], err, statusOf(err))
			}
		}
	}
}
