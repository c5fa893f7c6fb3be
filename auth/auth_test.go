package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestIssueVerify(t *testing.T) {
	dir := t.TempDir()
	k, err := LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := SceneRights("realm", "ns", "sc", RoleEditor, "")
	tok, err := k.Issue("alice", r, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := k.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "alice" || len(c.Publ) != 1 || c.Publ[0] != "realm/s/ns/sc/#" {
		t.Fatalf("claims = %+v", c)
	}
	// The same key comes back from disk.
	k2, err := LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k2.Verify(tok); err != nil {
		t.Fatalf("reloaded key rejects token: %v", err)
	}
	// Another key does not verify it, and says why.
	otherDir := t.TempDir()
	if _, err := LoadKeys(otherDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadKeys of an empty data directory: %v, want os.ErrNotExist", err)
	}
	other, _ := LoadOrCreateKeys(otherDir)
	if _, err := other.Verify(tok); err == nil || !strings.Contains(err.Error(), "signed with another key") {
		t.Fatalf("token signed with a different key: err = %v", err)
	}
	expired, _ := k.Issue("bob", r, -time.Minute)
	if _, err := k.Verify(expired); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: err = %v", err)
	}
	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "x", "publ": []string{}}).SignedString(k.priv)
	if _, err := k.Verify(noExp); err == nil {
		t.Fatal("token without exp accepted")
	}
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "x", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("k"))
	if _, err := k.Verify(hs); err == nil {
		t.Fatal("HS256 token accepted")
	}
	noSub, _ := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()}).SignedString(k.priv)
	otherTok, _ := other.Issue("alice", r, time.Hour)
	// Every refusal wraps ErrInvalidToken, which the scene listings answer
	// with 401 rather than reading the request as one without a token.
	for _, bad := range []string{"", "a.b.c", "not a token", expired, noExp, hs, noSub, otherTok} {
		if _, err := k.Verify(bad); !errors.Is(err, ErrInvalidToken) || !strings.HasPrefix(err.Error(), "invalid token: ") {
			t.Fatalf("Verify(%.40q) = %v, want an error wrapping ErrInvalidToken", bad, err)
		}
	}
}

func TestSceneRights(t *testing.T) {
	ed := SceneRights("realm", "ns", "sc", RoleEditor, "")
	vw := SceneRights("realm", "ns", "sc", RoleViewer, "")
	vwUC := SceneRights("realm", "ns", "sc", RoleViewer, "me")
	tests := []struct {
		name   string
		r      Rights
		pub    string
		canPub bool
		evOnly bool
	}{
		{"editor creates object", ed, "realm/s/ns/sc/o/pyClient-1/box", true, false},
		{"editor other scene", ed, "realm/s/ns/other/o/uc/box", false, false},
		{"editor other namespace", ed, "realm/s/ns2/sc/o/uc/box", false, false},
		{"viewer camera", vw, "realm/s/ns/sc/u/uc/cam", true, false},
		{"viewer presence", vw, "realm/s/ns/sc/x/uc/id", true, false},
		{"viewer object is event-only", vw, "realm/s/ns/sc/o/uc/box", false, true},
		{"viewer with client id, own camera", vwUC, "realm/s/ns/sc/u/me/cam", true, false},
		{"viewer with client id, other's camera", vwUC, "realm/s/ns/sc/u/you/cam", false, false},
		{"viewer env", vw, "realm/s/ns/sc/e/uc/id", false, false},
	}
	for _, tt := range tests {
		if got := tt.r.CanPublish(tt.pub); got != tt.canPub {
			t.Errorf("%s: CanPublish(%q) = %v, want %v", tt.name, tt.pub, got, tt.canPub)
		}
		if got := tt.r.EventOnly(tt.pub); got != tt.evOnly {
			t.Errorf("%s: EventOnly(%q) = %v, want %v", tt.name, tt.pub, got, tt.evOnly)
		}
	}
	subs := []struct {
		r      Rights
		filter string
		want   bool
	}{
		{vw, "realm/s/ns/sc/+/+/+", true},
		{vw, "realm/s/ns/sc/+/+/+/me/#", true},
		{vw, "realm/s/ns/sc/#", true},
		{vw, "realm/s/ns/+/+/+/+", false},
		{vw, "realm/s/#", false},
		{vw, "#", false},
		{ed, "realm/s/ns2/sc/#", false},
	}
	for _, tt := range subs {
		if got := tt.r.CanSubscribe(tt.filter); got != tt.want {
			t.Errorf("CanSubscribe(%q) = %v, want %v", tt.filter, got, tt.want)
		}
	}
}

func TestIsClientEvent(t *testing.T) {
	for in, want := range map[string]bool{
		`{"object_id":"b","action":"clientEvent","type":"mousedown"}`: true,
		`{"object_id":"b","action":"create"}`:                         false,
		`{"action":`:                                                  false,
		`[]`:                                                          false,
		// Browsers read the exact key: a create to them.
		`{"object_id":"b","action":"create","Action":"clientEvent"}`: false,
		`{"object_id":"b","ACTION":"clientEvent"}`:                   false,
	} {
		if got := IsClientEvent([]byte(in)); got != want {
			t.Errorf("IsClientEvent(%s) = %v", in, got)
		}
	}
}

func TestRoleFor(t *testing.T) {
	def := DefaultSettings("alice", "lab")
	private := Settings{Namespace: "alice", Scene: "lab", Viewers: []string{"carol"}, Editors: []string{"bob"}}
	tests := []struct {
		s       Settings
		user    string
		anon    bool
		want    Role
		wantErr error
	}{
		{def, "alice", false, RoleEditor, nil},
		{def, "zed", false, RoleViewer, nil},
		{def, "anonymous-1", true, RoleViewer, nil},
		{private, "bob", false, RoleEditor, nil},
		{private, "carol", false, RoleViewer, nil},
		{private, "zed", false, RoleNone, ErrNotAllowed},
		{private, "anonymous-1", true, RoleNone, ErrAnonymousNotAllowed},
		{Settings{Namespace: "n", Scene: "s", PublicRead: true, PublicWrite: true, AnonymousUsers: true}, "anonymous-2", true, RoleViewer, nil},
		{Settings{Namespace: "n", Scene: "s", PublicRead: true, PublicWrite: true}, "zed", false, RoleEditor, nil},
	}
	for i, tt := range tests {
		got, err := tt.s.RoleFor(tt.user, tt.anon)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("%d: RoleFor(%q, %v) = %q, %v; want %q, %v", i, tt.user, tt.anon, got, err, tt.want, tt.wantErr)
		}
	}
}

// DenyLog logs at most Burst lines per Interval and says how many it left
// out on the next line it logs.
func TestDenyLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	d := &DenyLog{Burst: 3, Interval: 50 * time.Millisecond}
	for i := range 10 {
		d.Deny(log, "denied", "n", i)
	}
	if got := strings.Count(buf.String(), "msg=denied"); got != 3 {
		t.Fatalf("%d lines in the first interval, want 3:\n%s", got, buf.String())
	}
	time.Sleep(60 * time.Millisecond)
	d.Deny(log, "denied", "n", 10)
	if !strings.Contains(buf.String(), "n=10 unlogged_refusals_before=7") {
		t.Fatalf("the first line of the next interval does not count the 7 left out:\n%s", buf.String())
	}
}

// The settings store refuses names the KV bucket cannot key with the
// name rule's message, never NATS's "invalid key".
func TestSettingsKey(t *testing.T) {
	tests := []struct {
		ns, scene, key, wantErr string
	}{
		{"alice", "lab", "alice.lab", ""},
		{"a-b_c", "x=1", "a-b_c.x=1", ""},
		{"alice", "+", "", `scene name "+": '+' is not allowed`},
		{"+", "lab", "", `namespace name "+"`},
		{"alice", "a.b", "", `'.' is not allowed`},
		{"alice", "café", "", `'é' is not allowed`},
		{"alice", "a~b", "", `'~' is not allowed`},
		{"", "lab", "", "namespace name is empty"},
	}
	for _, tt := range tests {
		key, err := settingsKey(tt.ns, tt.scene)
		if tt.wantErr == "" {
			if err != nil || key != tt.key {
				t.Errorf("settingsKey(%q, %q) = %q, %v; want %q", tt.ns, tt.scene, key, err, tt.key)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("settingsKey(%q, %q) = %v, want an error saying %q", tt.ns, tt.scene, err, tt.wantErr)
		}
	}
}

// Processes that start at once on a fresh data directory (a server and
// `xrealm token`, the nodes of a cluster sharing one directory's keys)
// must all end with the one key that is on disk: each writes its new key
// to a file of its own before linking it into place, never into a file
// another may be linking or reading.
func TestLoadOrCreateKeysConcurrently(t *testing.T) {
	const dirs, callers = 20, 8
	for range dirs {
		dir := t.TempDir()
		keys := make([]*Keys, callers)
		errs := make([]error, callers)
		done := make(chan int)
		for i := range callers {
			go func() {
				keys[i], errs[i] = LoadOrCreateKeys(dir)
				done <- i
			}()
		}
		for range callers {
			<-done
		}
		onDisk, err := LoadKeys(dir)
		if err != nil {
			t.Fatal(err)
		}
		for i := range callers {
			if errs[i] != nil {
				t.Fatalf("caller %d of %d: %v", i, callers, errs[i])
			}
			if !keys[i].priv.Equal(onDisk.priv) {
				t.Fatalf("caller %d of %d got a key other than the one in %s", i, callers, dir)
			}
		}
		left, err := os.ReadDir(dir + "/keys")
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 1 || left[0].Name() != KeyFile {
			var names []string
			for _, e := range left {
				names = append(names, e.Name())
			}
			t.Fatalf("keys/ holds %q, want only %s", names, KeyFile)
		}
	}
}

// A token longer than MaxTokenLen is refused before it is parsed, with
// its length, even one this key signed; Issue signs none, and says why.
// The longest scene token the server issues (names of 128 bytes, a
// userclient of 256) is far inside the limit.
func TestTokenLength(t *testing.T) {
	k, err := LoadOrCreateKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 128)
	longest, err := k.Issue(strings.Repeat("u", 256), SceneRights("realm", long, long, RoleViewer, strings.Repeat("c", 256)), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(longest) > MaxTokenLen/2 {
		t.Errorf("the longest scene token has %d bytes, near MaxTokenLen (%d)", len(longest), MaxTokenLen)
	}
	if _, err := k.Verify(longest); err != nil {
		t.Fatalf("the longest scene token: %v", err)
	}
	many := Rights{Subs: make([]string, 200)}
	for i := range many.Subs {
		many.Subs[i] = "realm/s/ns/" + strings.Repeat("x", 80) + "/#"
	}
	if tok, err := k.Issue("alice", many, time.Hour); err == nil || !strings.Contains(err.Error(), "more than a token may have (16384)") {
		t.Fatalf("Issue of a %d-byte token: %v, want a refusal naming MaxTokenLen", len(tok), err)
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodES256, &Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: "alice", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))},
		Publ:             []string{}, Subs: many.Subs,
	}).SignedString(k.priv)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{signed, strings.Repeat("A", MaxTokenLen+1), longest + strings.Repeat("A", MaxTokenLen), strings.Repeat(".", 1<<20)} {
		want := fmt.Sprintf("invalid token: it has %d bytes, more than a token of this server may have (16384)", len(tok))
		if c, err := k.Verify(tok); c != nil || err == nil || err.Error() != want || !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Verify of %d bytes: %v, %v; want %q", len(tok), c, err, want)
		}
	}
}

// Issue signs a token for a user name of up to MaxUserLen bytes, and
// refuses a longer one with an error that says so and clips the name: a
// name of 9 KiB made a scene token longer than MaxTokenLen, and its error
// quoted the whole name.
func TestIssueUserLen(t *testing.T) {
	k, err := LoadOrCreateKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 128)
	rights := SceneRights("realm", long, long, RoleViewer, strings.Repeat("c", 256))
	for _, tc := range []struct {
		n       int
		wantErr string // "" = issued
	}{
		{1, ""},
		{MaxUserLen, ""},
		{MaxUserLen + 1, "of 257 bytes is longer than the longest, 256"},
		{9 << 10, "of 9216 bytes is longer than the longest, 256"},
	} {
		user := strings.Repeat("u", tc.n-1) + "Z"
		tok, err := k.Issue(user, rights, time.Hour)
		if tc.wantErr == "" {
			if err != nil {
				t.Fatalf("a name of %d bytes: %v", tc.n, err)
			}
			if c, err := k.Verify(tok); err != nil || c.Subject != user {
				t.Fatalf("a name of %d bytes: the token verifies as %v, %v", tc.n, c, err)
			}
			continue
		}
		if tok != "" || err == nil || !strings.HasPrefix(err.Error(), "issue token: user name \"uuu") || !strings.Contains(err.Error(), tc.wantErr) {
			t.Fatalf("a name of %d bytes: %q, %v; want an error saying %q", tc.n, tok, err, tc.wantErr)
		}
		if strings.Contains(err.Error(), "Z") || len(err.Error()) > 200 {
			t.Fatalf("a name of %d bytes: the error quotes the whole name: %.300s", tc.n, err)
		}
	}
}

// A token in another algorithm than ES256 is refused with an error that
// names its algorithm and the one accepted, not one that blames its key
// (it wraps ErrInvalidToken, not jwt.ErrTokenSignatureInvalid, by which
// the server tells a cluster node with another key); an ES256 token of
// another key is still refused for its key.
func TestVerifyAlgorithm(t *testing.T) {
	k, err := LoadOrCreateKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := LoadOrCreateKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{"sub": "x", "exp": time.Now().Add(time.Hour).Unix()}
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte("k"))
	es384, _ := jwt.NewWithClaims(jwt.SigningMethodES384, claims).SignedString(p384)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	valid, err := k.Issue("dan", Rights{}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(valid, ".", 3)
	relabelled := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS512","typ":"JWT"}`)) + "." + parts[1] + "." + parts[2]
	foreign, err := other.Issue("dan", Rights{}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const accepted = `is not accepted: this server takes ES256 tokens only`
	for _, tc := range []struct {
		name, token, want string
		signature         bool // wraps jwt.ErrTokenSignatureInvalid
	}{
		{"HS256", hs, `invalid token: the token's algorithm "HS256" ` + accepted, false},
		{"ES384", es384, `invalid token: the token's algorithm "ES384" ` + accepted, false},
		{"none", none, `invalid token: the token's algorithm "none" ` + accepted, false},
		{"an ES256 token relabelled HS512", relabelled, `invalid token: the token's algorithm "HS512" ` + accepted, false},
		{"another key", foreign, "signed with another key than this server's", true},
	} {
		c, err := k.Verify(tc.token)
		if c != nil || err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: %v, %v; want an error saying %q", tc.name, c, err, tc.want)
			continue
		}
		if errors.Is(err, jwt.ErrTokenSignatureInvalid) != tc.signature {
			t.Errorf("%s: %v wraps jwt.ErrTokenSignatureInvalid: %v, want %v", tc.name, err, !tc.signature, tc.signature)
		}
		if !tc.signature && strings.Contains(err.Error(), "another key") {
			t.Errorf("%s: %v blames the key", tc.name, err)
		}
	}
}
