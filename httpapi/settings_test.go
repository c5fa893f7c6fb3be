package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/auth"
)

// PUT replaces a scene's settings: the answer is what was stored, fields
// left out included, and a PUT that makes a public scene private, or shuts
// anonymous readers out, is logged at INFO with the fields it left out.
func TestPutSettingsReplaces(t *testing.T) {
	dir := t.TempDir()
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	settings := settingsStore(t, dir)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	mux := http.NewServeMux()
	New(Config{Realm: "realm", Access: &Access{Realm: "realm", Keys: keys, Settings: settings}, Settings: settings, Logger: log}).Register(mux)
	alice, err := keys.Issue("alice", auth.SceneRights("realm", "alice", "grid", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	put := func(scene, body string) auth.Settings {
		t.Helper()
		r := httptest.NewRequest(http.MethodPut, "/scenes/alice/"+scene+"/settings", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+alice)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", body, w.Code, w.Body)
		}
		var st auth.Settings
		if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	const interest = `"interest":{"mode":"grid","cell_size":10}`
	tests := []struct {
		name, scene, body string
		wantPublic        bool
		wantLog           string // "" = no log line
	}{
		{"interest alone makes a public scene private", "grid", `{` + interest + `}`, false,
			"a PUT made a public scene private"},
		{"already private: no line", "grid", `{"editors":["bob"]}`, false, ""},
		{"made public again: no line", "grid", `{"public_read":true,"anonymous_users":true,` + interest + `}`, true, ""},
		{"anonymous readers shut out", "grid", `{"public_read":true}`, true,
			"a PUT took anonymous reading away"},
		{"the whole settings: no line", "lobby", `{"public_read":true,"anonymous_users":true,` + interest + `}`, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs.Reset()
			st := put(tt.scene, tt.body)
			if st.PublicRead != tt.wantPublic || st.Namespace != "alice" || st.Scene != tt.scene {
				t.Fatalf("answer %+v, want public_read %v", st, tt.wantPublic)
			}
			line := logs.String()
			if tt.wantLog == "" {
				if line != "" {
					t.Fatalf("logged %q", line)
				}
				return
			}
			if !strings.Contains(line, "level=INFO") || !strings.Contains(line, tt.wantLog) || !strings.Contains(line, "scene=alice/grid") || !strings.Contains(line, "PUT replaces all settings") {
				t.Fatalf("log %q, want an INFO line saying %q", line, tt.wantLog)
			}
		})
	}
	// The first PUT's line named the fields it left out.
	logs.Reset()
	put("grid", `{"public_read":true,"anonymous_users":true}`)
	put("grid", `{`+interest+`}`)
	if !strings.Contains(logs.String(), "omitted=public_read,anonymous_users,public_write,editors,viewers") {
		t.Fatalf("log %q does not name the fields left out", logs.String())
	}
}

// A PUT whose body is not exactly one settings object, or whose token is
// an anonymous user's or a service's, changes nothing. It fails if a body
// of "null" (or "{}" followed by anything) is stored as all-false
// settings, turning the scene private, or if an anonymous token owns a
// namespace: a user who asks for an anonymous token as "bob" gets the sub
// "anonymous-bob", and anyone can ask for that name. A body over the
// limit is 413, not 400. A service's token (xrealm token --user alice
// --role sfu or cluster) is no user's sign-in: it signs a node in to the
// bus, and accepted here it would change the settings of every scene in
// namespace alice (open a private scene, shut its owner out).
func TestPutSettingsRefusals(t *testing.T) {
	e := newAPIEnv(t)
	alice, err := e.keys.Issue("alice", auth.SceneRights("realm", "alice", "lab", auth.RoleEditor, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	anon, err := e.keys.Issue("anonymous-bob", auth.SceneRights("realm", "anonymous-bob", "lab", auth.RoleViewer, ""), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sfu, err := e.keys.Issue("alice", auth.ServiceRights("sfu"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := e.keys.Issue("alice", auth.ServiceRights("cluster"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, target, body, tok string
		status                  int
		want                    string
	}{
		{"an sfu's token named like the namespace", "/scenes/alice/lab/settings", `{"public_read":false,"editors":["mallory"]}`, sfu, 403, `service`},
		{"a cluster's token named like the namespace", "/scenes/alice/lab/settings", `{"public_read":false,"editors":["mallory"]}`, cluster, 403, `service`},
		{"null", "/scenes/alice/lab/settings", `null`, alice, 400, `a JSON object`},
		{"array", "/scenes/alice/lab/settings", `[]`, alice, 400, `a JSON object`},
		{"empty body", "/scenes/alice/lab/settings", ``, alice, 400, `a JSON object`},
		{"two objects", "/scenes/alice/lab/settings", `{"public_read":false} {"public_read":true}`, alice, 400, `after the settings object`},
		{"trailing garbage", "/scenes/alice/lab/settings", `{"public_read":false} x`, alice, 400, `after the settings object`},
		{"too large", "/scenes/alice/lab/settings", `{"editors":["` + strings.Repeat("a", 70<<10) + `"]}`, alice, 413, `64 KiB`},
		{"anonymous owner", "/scenes/anonymous-bob/lab/settings", `{"public_read":false}`, anon, 403, `anonymous`},
		{"the scene is still public", "/scenes/alice/lab/settings", ``, "", 200, `"public_read":true`},
		{"so is the anonymous one", "/scenes/anonymous-bob/lab/settings", ``, "", 200, `"public_read":true`},
		{"a good PUT still works", "/scenes/alice/lab/settings", ` {"public_read":true,"anonymous_users":true} ` + "\n", alice, 200, `"anonymous_users":true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := http.MethodPut
			if tt.status == 200 && tt.tok == "" {
				method = http.MethodGet
			}
			w := e.do(method, tt.target, tt.body, tt.tok)
			if w.Code != tt.status || !strings.Contains(w.Body.String(), tt.want) {
				t.Fatalf("%s %s %.80q: %d %s; want %d with %s", method, tt.target, tt.body, w.Code, w.Body, tt.status, tt.want)
			}
		})
	}
}
