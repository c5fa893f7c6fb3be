package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
)

// FuzzAnonymousName: whatever display name an anonymous client asks for,
// its user name starts with "anonymous-", holds no topic separator,
// wildcard, '.' or control character, is at most 64 bytes after the
// prefix, and is valid UTF-8 when the name asked for is (it goes into the
// token's sub claim and the JSON answer).
func FuzzAnonymousName(f *testing.F) {
	for _, s := range []string{"", "bob", "anonymous-bob", "anonymous-", "a/b+c#d.e", "\x00\x1f\x7f", strings.Repeat("é", 40), strings.Repeat("x", 100), "日本語の名前", "\xff\xfe", "0####" + strings.Repeat("é", 32)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, want string) {
		got := anonymousName(want)
		rest, ok := strings.CutPrefix(got, "anonymous-")
		if !ok {
			t.Fatalf("anonymousName(%q) = %q", want, got)
		}
		if len(rest) > 64 {
			t.Fatalf("anonymousName(%q) = %q: %d bytes after the prefix", want, got, len(rest))
		}
		for _, r := range rest {
			if r == '/' || r == '+' || r == '#' || r == '.' || r < ' ' {
				t.Fatalf("anonymousName(%q) = %q holds %q", want, got, r)
			}
		}
		if utf8.ValidString(want) && !utf8.ValidString(got) {
			t.Fatalf("anonymousName(%q) = %q, which is not valid UTF-8", want, got)
		}
	})
}

// FuzzTokenAllows: the HTTP routes take {ns} and {scene} from the path. A
// token made for one scene gives access through tokenAllows to that scene
// only (reading as a viewer, reading and writing as an editor), whatever
// names, wildcards included, the route carries.
func FuzzTokenAllows(f *testing.F) {
	f.Add("ns", "sc", "ns", "sc", true, false)
	f.Add("ns", "sc", "ns", "other", true, true)
	f.Add("ns", "sc", "+", "sc", true, false)
	f.Add("ns", "sc", "ns", "#", false, true)
	f.Add("ns", "sc", "ns", "sc/o", true, false)
	f.Fuzz(func(t *testing.T, tokNS, tokScene, ns, scene string, editor, write bool) {
		for _, s := range []string{tokNS, tokScene} {
			if s == "" || strings.ContainsAny(s, "/+#") || !utf8.ValidString(s) {
				return // the token endpoint only issues tokens for plain names
			}
		}
		if strings.Contains(ns, "/") || strings.Contains(scene, "/") {
			return // a route value never holds a '/'
		}
		role := auth.RoleViewer
		if editor {
			role = auth.RoleEditor
		}
		got := tokenAllows(auth.SceneRights("realm", tokNS, tokScene, role, ""), "realm", ns, scene, write)
		want := ns == tokNS && scene == tokScene && (editor || !write)
		if got != want {
			t.Fatalf("token for %s/%s as %s: tokenAllows(%q, %q, write %v) = %v, want %v", tokNS, tokScene, role, ns, scene, write, got, want)
		}
	})
}

// FuzzRequestToken: the token of a request is what follows "Bearer " (in
// any case, trimmed) in its Authorization header. A header that holds no
// such token is refused with 401, and the refusal is one of a few fixed
// texts, but for the name of the header's scheme: it quotes none of the
// header's credentials. A request without the header (header false: even
// an empty one counts as a header) has its mqtt_token cookie's token, or
// none, and no error.
func FuzzRequestToken(f *testing.F) {
	request := func(header bool, authz, cookie string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if header {
			r.Header.Set("Authorization", authz)
		}
		r.Header.Set("Cookie", cookie)
		return r
	}
	refusals := map[string]bool{} // the refusals, with "Basic" for a quoted scheme
	for _, h := range []string{"", "x", "Bearer", "Basic x", "/ x"} {
		if _, err := RequestToken(request(true, h, "")); err != nil {
			refusals[err.Error()] = true
		}
	}
	f.Add(true, "Bearer abc.def.ghi", "")
	f.Add(true, "Bearer  spaced ", "mqtt_token=c")
	f.Add(true, "Basic dXNlcjpwdw==", "mqtt_token=c; other=d")
	f.Add(true, "", "mqtt_token=\"quoted\"")
	f.Add(true, "bearer x", "mqtt_token=")
	f.Add(true, "BEARER y", "mqtt_token=c")
	f.Add(true, "Bearer", "mqtt_token=c")
	f.Add(true, "Bearer\t", "")
	f.Add(true, "Token abc", "")
	f.Add(true, "abc.def.ghi", "")
	f.Add(true, "send", "")
	f.Add(true, "\"quoted\" secret", "")
	f.Add(false, "", "mqtt_token=abc.def.ghi")
	f.Add(false, "", "other=d; mqtt_token=\"quoted\"")
	f.Add(false, "", "mqtt_token=a; mqtt_token=b")
	f.Add(false, "", "mqtt_token")
	f.Add(false, "", "")
	f.Fuzz(func(t *testing.T, header bool, authz, cookie string) {
		r := request(header, authz, cookie)
		got, err := RequestToken(r)
		if !header {
			want := ""
			if c, cerr := r.Cookie(CookieName); cerr == nil {
				want = c.Value
			}
			if err != nil || got != want {
				t.Fatalf("no Authorization, Cookie %q: token %q, %v; want %q and no error", cookie, got, err, want)
			}
			return
		}
		h := strings.TrimSpace(authz)
		i := strings.IndexAny(h, " \t")
		if i < 0 || !strings.EqualFold(h[:i], "Bearer") {
			if err == nil || got != "" || statusOf(err) != http.StatusUnauthorized {
				t.Fatalf("Authorization %q: token %q, %v; want a 401 refusal", authz, got, err)
			}
			msg := err.Error()
			if i > 0 {
				msg = strings.Replace(msg, quote(h[:i]), quote("Basic"), 1)
			}
			if !refusals[msg] {
				t.Fatalf("Authorization %q: the refusal %q is none of RequestToken's texts", authz, err)
			}
			return
		}
		if want := strings.TrimSpace(h[i+1:]); err != nil || got != want {
			t.Fatalf("Authorization %q: token %q, %v; want %q", authz, got, err, want)
		}
	})
}

// apiEnv is the API on a real settings store, for a fuzz process.
type apiEnv struct {
	mux    *http.ServeMux
	keys   *auth.Keys
	tokens []string // "", alice's (owner of namespace alice), carol's, an anonymous one, garbage
}

func newAPIEnv(tb testing.TB) *apiEnv {
	tb.Helper()
	dir := tb.TempDir()
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "httpapi-fuzz", Insecure: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Shutdown)
	nc, err := b.Connect("test")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := b.JetStream(ctx, nc)
	if err != nil {
		tb.Fatal(err)
	}
	settings, err := auth.OpenSettings(ctx, js, 1)
	if err != nil {
		tb.Fatal(err)
	}
	if err := settings.Put(ctx, auth.Settings{Namespace: "lab", Scene: "secret", Viewers: []string{"carol"}}); err != nil {
		tb.Fatal(err)
	}
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		tb.Fatal(err)
	}
	e := &apiEnv{mux: http.NewServeMux(), keys: keys, tokens: []string{""}}
	for _, u := range []string{"alice", "carol", "anonymous-dan"} {
		tok, err := keys.Issue(u, auth.SceneRights("realm", "public", "lobby", auth.RoleViewer, ""), time.Hour)
		if err != nil {
			tb.Fatal(err)
		}
		e.tokens = append(e.tokens, tok)
	}
	e.tokens = append(e.tokens, "garbage")
	access := &Access{Realm: "realm", Keys: keys, Settings: settings}
	New(Config{Realm: "realm", Access: access, Settings: settings, TokenTTL: time.Hour, Logger: slog.New(slog.DiscardHandler)}).Register(e.mux)
	return e
}

func (e *apiEnv) do(method, target, body, tok string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/", strings.NewReader(body))
	r.URL = &url.URL{Path: target}
	r.RequestURI = target
	if method == http.MethodPost {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	w := httptest.NewRecorder()
	e.mux.ServeHTTP(w, r)
	return w
}

// FuzzMQTTAuth posts a form to /user/v2/mqtt_auth with one of several
// tokens. The answer is 200, 400, 401 or 403; a 200 carries a token that
// this server verifies, for the user it names, whose rights stay inside
// the scene of the form; an anonymous caller gets an "anonymous-" name and
// never the editor role; and nobody but carol (or an editor) reads the
// private scene lab/secret.
func FuzzMQTTAuth(f *testing.F) {
	e := newAPIEnv(f)
	for i := range e.tokens {
		for _, form := range []string{
			"scene=public/lobby&username=bob&userclient=cam_1",
			"scene=alice/room&username=x",
			"scene=lab/secret&username=x",
			"scene=lab/secret&id_auth=anonymous&username=carol",
			"scene=a/b/c", "scene=/x", "realm=other&scene=a/b",
			"realm=realm&scene=public/lobby&userclient=%2B%2F%23&camid=c&username=" + url.QueryEscape(strings.Repeat("é", 40)),
			"%zz", "",
		} {
			f.Add(form, uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, form string, which uint8) {
		tok := e.tokens[int(which)%len(e.tokens)]
		w := e.do(http.MethodPost, "/user/v2/mqtt_auth", form, tok)
		switch w.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden:
			return
		default:
			t.Fatalf("form %q: status %d: %s", form, w.Code, w.Body)
		}
		var resp struct {
			Username string    `json:"username"`
			Token    string    `json:"token"`
			Role     auth.Role `json:"role"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatalf("form %q: answer %q: %v", form, w.Body, err)
		}
		cl, err := e.keys.Verify(resp.Token)
		if err != nil {
			t.Fatalf("form %q: issued token does not verify: %v", form, err)
		}
		if cl.Subject != resp.Username {
			t.Fatalf("form %q: token for %q, answer names %q", form, cl.Subject, resp.Username)
		}
		vals, _ := url.ParseQuery(form)
		ns, scene, _ := strings.Cut(vals.Get("scene"), "/")
		base := "realm/s/" + ns + "/" + scene + "/"
		r := cl.Rights()
		for _, fl := range append(append(append([]string(nil), r.Publ...), r.Subs...), r.Evts...) {
			if !strings.HasPrefix(fl, base) {
				t.Fatalf("form %q: token right %q outside scene %s/%s", form, fl, ns, scene)
			}
		}
		anonymous := tok == "" || tok == e.tokens[3] || vals.Get("id_auth") == "anonymous"
		if anonymous && (!strings.HasPrefix(cl.Subject, "anonymous-") || resp.Role == auth.RoleEditor) {
			t.Fatalf("form %q: anonymous caller got user %q role %q", form, cl.Subject, resp.Role)
		}
		if ns == "lab" && scene == "secret" && cl.Subject != "carol" && cl.Subject != "lab" {
			t.Fatalf("form %q: user %q got a token for the private scene", form, cl.Subject)
		}
	})
}

// FuzzSettingsRoute puts settings through PUT /scenes/{ns}/{scene}/settings
// with one of several tokens, then reads them back. Only the namespace's
// owner may put; what was put is what GET answers; statuses are those the
// routes document.
func FuzzSettingsRoute(f *testing.F) {
	e := newAPIEnv(f)
	for i := range e.tokens {
		for _, c := range [][3]string{
			{"alice", "room", `{"editors":["bob"],"public_read":false}`},
			{"alice", "room", `{"interest":{"mode":"knn","k":3}}`},
			{"alice", "room", `{"interest":{"mode":"grid","rate_hz":1000}}`},
			{"alice", "room", `{"editors":"bob"}`},
			{"alice", "room", `{"unknown":1}`},
			{"alice", "room", `{} trailing`},
			{"alice", "a.b", `{}`},
			{"alice", "+", `{}`},
			{"+", "#", `{}`},
			{"alice", "café", `{}`},
			{"alice", "%2F", `{}`},
			{"lab", "secret", `{"public_read":true}`},
		} {
			f.Add(c[0], c[1], c[2], uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, ns, scene, body string, which uint8) {
		if ns == "" || scene == "" || strings.ContainsAny(ns+scene, "/?#%") || !utf8.ValidString(ns+scene) {
			return // not one route value each (ServeMux redirects "." and "..")
		}
		tok := e.tokens[int(which)%len(e.tokens)]
		path := "/scenes/" + url.PathEscape(ns) + "/" + url.PathEscape(scene) + "/settings"
		bad := CheckScene(ns, scene) != nil
		g := e.do(http.MethodGet, path, "", tok)
		switch {
		case g.Code == http.StatusOK && bad:
			t.Fatalf("GET %s: 200 for names CheckScene refuses", path)
		case g.Code >= 500:
			t.Fatalf("GET %s: status %d: %s", path, g.Code, g.Body)
		}
		w := e.do(http.MethodPut, path, body, tok)
		if w.Code == http.StatusOK && bad {
			t.Fatalf("PUT %s: 200 for names CheckScene refuses", path)
		}
		switch w.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusMovedPermanently, http.StatusTemporaryRedirect:
			return
		default:
			t.Fatalf("PUT %s %q: status %d: %s", path, body, w.Code, w.Body)
		}
		if cl, err := e.keys.Verify(tok); err != nil || cl.Subject != ns {
			t.Fatalf("PUT %s accepted with a token that is not %q's", path, ns)
		}
		var put auth.Settings
		if err := json.Unmarshal(w.Body.Bytes(), &put); err != nil {
			t.Fatalf("PUT answer %q: %v", w.Body, err)
		}
		if put.Namespace != ns || put.Scene != scene {
			t.Fatalf("PUT %s stored settings of %s/%s", path, put.Namespace, put.Scene)
		}
		g = e.do(http.MethodGet, path, "", tok)
		if g.Code != http.StatusOK {
			if g.Code == http.StatusForbidden || g.Code == http.StatusUnauthorized {
				return // the owner made the scene unreadable even to itself
			}
			t.Fatalf("GET %s after PUT: status %d: %s", path, g.Code, g.Body)
		}
		var got auth.Settings
		if err := json.Unmarshal(g.Body.Bytes(), &got); err != nil {
			t.Fatalf("GET answer %q: %v", g.Body, err)
		}
		if !reflect.DeepEqual(got, put) {
			t.Fatalf("PUT %s stored %+v, GET reads %+v", path, put, got)
		}
	})
}
