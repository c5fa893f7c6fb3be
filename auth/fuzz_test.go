package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzVerify feeds arbitrary token strings, seeded with tokens this key
// issued and variants of them, to Verify. Whatever the input, Verify either
// refuses it, or accepts a token whose signed part (header and claims) is
// byte for byte one this key signed: the fuzzer cannot forge a signature,
// so anything else accepted would be a hole in the check. An accepted
// token's claims are exactly those issued, with a subject and an expiry in
// the future. A token longer than MaxTokenLen is refused for its length,
// and no refusal is longer than 1 KiB, whatever the input. The seeds hold
// tokens of other algorithms, truncated ones, and huge or garbage headers.
func FuzzVerify(f *testing.F) {
	k, err := LoadOrCreateKeys(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	other, err := LoadOrCreateKeys(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	issued := map[string]Rights{} // signed part → rights of a valid token
	subject := map[string]string{}
	for _, c := range []struct {
		user string
		r    Rights
	}{
		{"alice", SceneRights("realm", "ns", "sc", RoleEditor, "")},
		{"anonymous-bob", SceneRights("realm", "public", "lobby", RoleViewer, "cam_1")},
		{"sfu-node", ServiceRights("sfu")},
	} {
		tok, err := k.Issue(c.user, c.r, time.Hour)
		if err != nil {
			f.Fatal(err)
		}
		signed := tok[:strings.LastIndexByte(tok, '.')]
		issued[signed], subject[signed] = c.r, c.user
		f.Add(tok)
		f.Add(signed + ".")
		f.Add(signed + "." + strings.Repeat("A", 86))
		f.Add(tok + "=")
		f.Add(" " + tok)
		f.Add(strings.ToUpper(tok[:1]) + tok[1:])
	}
	expired, _ := k.Issue("carol", Rights{}, -time.Minute)
	foreign, _ := other.Issue("mallory", Rights{Publ: []string{"#"}}, time.Hour)
	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "x", "publ": []string{"#"}}).SignedString(k.priv)
	noSub, _ := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"exp": time.Now().Add(time.Hour).Unix()}).SignedString(k.priv)
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "x", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("k"))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "x", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	for _, s := range []string{expired, foreign, noExp, noSub, hs, none, "", ".", "..", "a.b.c", "a.b.c.d", "not a token", "eyJ.eyJ.", "\x00.\xff.\x80"} {
		f.Add(s)
	}
	// Another algorithm's signature, by a key of its own curve.
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	es384, _ := jwt.NewWithClaims(jwt.SigningMethodES384, jwt.MapClaims{"sub": "x", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(p384)
	f.Add(es384)
	// A valid token's header with the algorithm changed, its signature kept.
	valid, _ := k.Issue("dan", SceneRights("realm", "ns", "sc", RoleViewer, ""), time.Hour)
	parts := strings.SplitN(valid, ".", 3)
	b64 := base64.RawURLEncoding.EncodeToString
	for _, alg := range []string{"ES384", "HS256", "none", "es256", ""} {
		f.Add(b64([]byte(`{"alg":"`+alg+`","typ":"JWT"}`)) + "." + parts[1] + "." + parts[2])
	}
	// Truncated: in the signature, at a dot, inside the claims or header.
	for _, n := range []int{len(valid) - 1, len(valid) - 40, len(parts[0]) + 1 + len(parts[1]) + 1, len(parts[0]) + 1 + len(parts[1])/2, len(parts[0]) + 1, len(parts[0]) / 2} {
		f.Add(valid[:n])
	}
	// Huge and garbage headers, within and beyond MaxTokenLen.
	f.Add(b64([]byte(`{"alg":"ES256","x":"`+strings.Repeat("A", 10<<10)+`"}`)) + "." + parts[1] + "." + parts[2])
	f.Add(b64([]byte(strings.Repeat("[", 10<<10))) + "." + parts[1] + "." + parts[2])
	f.Add(b64([]byte(`{"alg":"ES256","kid":`+strings.Repeat(`{"a":`, 2000)+`1`+strings.Repeat(`}`, 2000)+`}`)) + "." + parts[1] + "." + parts[2])
	f.Add(b64(bytes.Repeat([]byte{0xff}, 4<<10)) + "." + parts[1] + "." + parts[2])
	f.Add(strings.Repeat("A", MaxTokenLen+1))
	f.Add(valid + strings.Repeat("=", MaxTokenLen))
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := k.Verify(tok)
		if err != nil {
			if c != nil {
				t.Fatalf("Verify(%q) returned claims with error %v", tok, err)
			}
			if !strings.HasPrefix(err.Error(), "invalid token") {
				t.Fatalf("Verify(%q): error %q does not say the token is invalid", tok, err)
			}
			if len(tok) > MaxTokenLen && !strings.Contains(err.Error(), "more than a token of this server may have") {
				t.Fatalf("Verify of %d bytes: %v, want a refusal for its length", len(tok), err)
			}
			if len(err.Error()) > 1024 {
				t.Fatalf("Verify(%q): an error of %d bytes", tok, len(err.Error()))
			}
			return
		}
		if len(tok) > MaxTokenLen {
			t.Fatalf("Verify accepted a token of %d bytes", len(tok))
		}
		i := strings.LastIndexByte(tok, '.')
		if i < 0 {
			t.Fatalf("Verify accepted %q, which has no signature part", tok)
		}
		r, ok := issued[tok[:i]]
		if !ok {
			t.Fatalf("Verify accepted %q, whose header and claims this key never signed", tok)
		}
		if c.Subject != subject[tok[:i]] || !reflect.DeepEqual(c.Rights(), r) {
			t.Fatalf("Verify(%q) = sub %q rights %+v; issued sub %q rights %+v", tok, c.Subject, c.Rights(), subject[tok[:i]], r)
		}
		if c.ExpiresAt == nil || !c.ExpiresAt.After(time.Now()) {
			t.Fatalf("Verify(%q) accepted a token without a future expiry: %v", tok, c.ExpiresAt)
		}
	})
}

// FuzzIsClientEvent checks IsClientEvent, the check behind event-only
// rights, against the reading every other consumer of the payload makes:
// ARENA's browser clients (web/src/protocol.ts) take JSON.parse(payload)
// .action, with exact, case-sensitive keys and the last duplicate winning.
// The model here is a Go decode into a map, which has those semantics. A
// payload that passes as a clientEvent must be one that the clients also
// read as a clientEvent; otherwise a viewer could publish, say, a create
// on an object topic where it may only send events.
//
// A client that reads no valid action drops the message, so only a
// reading of another valid action counts as a disagreement.
func FuzzIsClientEvent(f *testing.F) {
	for _, s := range []string{
		`{"object_id":"b","action":"clientEvent","type":"mousedown","data":{"clickPos":{"x":1}}}`,
		`{"object_id":"b","action":"create","data":{}}`,
		`{"action":"clientEvent","action":"update"}`,
		`{"action":"update","action":"clientEvent"}`,
		`{"action":"clientEvent","action":null}`,
		`{"action":"client\u0045vent"}`,
		`{"\u0061ction":"clientEvent"}`,
		`{"action":"clientEvent"} `,
		`{"action":"clientEvent"}{}`,
		`{"action":"clientEvent",}`,
		`{"action":["clientEvent"]}`,
		`[{"action":"clientEvent"}]`,
		`"clientEvent"`, `null`, ``, `{`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		got := IsClientEvent(payload)
		if !got {
			return
		}
		if !json.Valid(payload) {
			t.Fatalf("IsClientEvent accepted invalid JSON %q", payload)
		}
		if p := bytes.TrimLeft(payload, " \t\r\n"); len(p) == 0 || p[0] != '{' {
			t.Fatalf("IsClientEvent accepted %q, which is not a JSON object", payload)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatalf("IsClientEvent accepted %q, which does not decode as an object: %v", payload, err)
		}
		// A client that reads no string action, or an unknown one, drops
		// the message (harmless); one that reads another action applies it.
		var action string
		if json.Unmarshal(m["action"], &action) == nil && action != "clientEvent" && slices.Contains(arenaActions, action) {
			t.Fatalf("IsClientEvent accepted %q, but a client reading its \"action\" key gets %q", payload, action)
		}
	})
}

// FuzzIsClientEventFields is FuzzIsClientEvent on objects built from two
// fuzzed members, so that the fuzzer varies keys and values rather than
// JSON syntax.
func FuzzIsClientEventFields(f *testing.F) {
	f.Add("action", "clientEvent", "object_id", "box")
	f.Add("action", "update", "action", "clientEvent")
	f.Add("action", "clientEvent", "type", "mousedown")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		b1, _ := json.Marshal(k1)
		b2, _ := json.Marshal(v1)
		b3, _ := json.Marshal(k2)
		b4, _ := json.Marshal(v2)
		payload := []byte("{" + string(b1) + ":" + string(b2) + "," + string(b3) + ":" + string(b4) + "}")
		if !IsClientEvent(payload) {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatalf("IsClientEvent accepted %q, which does not decode as an object: %v", payload, err)
		}
		var action string
		if json.Unmarshal(m["action"], &action) == nil && action != "clientEvent" && slices.Contains(arenaActions, action) {
			t.Fatalf("IsClientEvent accepted %s, but a client reading its \"action\" key gets %q", payload, action)
		}
	})
}

// arenaActions are the actions ARENA clients apply (protocol.ts ACTIONS).
var arenaActions = []string{"create", "update", "delete", "clientEvent", "join", "leave"}

// FuzzSettings decodes a request body as PUT /scenes/{ns}/{scene}/settings
// does (unknown fields refused) and checks what the store would keep:
// settings whose interest part validates survive a JSON round trip
// unchanged, and RoleFor never makes an anonymous user an editor nor gives
// a role together with an error.
func FuzzSettings(f *testing.F) {
	for _, s := range []string{
		`{"editors":["bob"],"viewers":["carol"],"public_read":false,"anonymous_users":false}`,
		`{"public_read":true,"public_write":true,"anonymous_users":true}`,
		`{"interest":{"mode":"knn","k":10,"rate_hz":5,"hysteresis_ms":500}}`,
		`{"interest":{"mode":"grid","cell_size":20,"radius":1}}`,
		`{"interest":{"mode":"grid","rate_hz":1000}}`,
		`{"interest":{"mode":"knn","k":-1}}`,
		`{"interest":{"mode":"box"}}`,
		`{"interest":null}`,
		`{"editor":["x"]}`,
		`{"editors":"bob"}`,
		`{"interest":{"mode":"knn","rate_hz":1e400}}`,
		`{}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s), "bob")
	}
	f.Fuzz(func(t *testing.T, body []byte, user string) {
		var st Settings
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if dec.Decode(&st) != nil {
			return
		}
		st.Namespace, st.Scene = "ns", "sc"
		if st.Interest != nil {
			if err := st.Interest.Validate(); err != nil {
				return // Put refuses it
			}
			i := st.Interest
			if (i.Mode != "knn" && i.Mode != "grid") || i.K < 0 || i.RateHz < 0 || i.RateHz > 100 || i.HysteresisMs < 0 || i.CellSize < 0 || i.Radius < 0 {
				t.Fatalf("Validate accepted %+v", *i)
			}
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("settings %+v decoded from %q do not encode: %v", st, body, err)
		}
		var back Settings
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("stored settings %s do not decode: %v", b, err)
		}
		back.Editors, st.Editors = nonNilSlice(back.Editors), nonNilSlice(st.Editors)
		back.Viewers, st.Viewers = nonNilSlice(back.Viewers), nonNilSlice(st.Viewers)
		if !reflect.DeepEqual(back, st) {
			t.Fatalf("settings do not survive the store: %+v, read back %+v", st, back)
		}
		for _, anon := range []bool{false, true} {
			role, err := st.RoleFor(user, anon)
			if err != nil && role != RoleNone {
				t.Fatalf("RoleFor(%q, %v) = %q with error %v", user, anon, role, err)
			}
			if anon && role == RoleEditor {
				t.Fatalf("RoleFor made an anonymous user an editor of %+v", st)
			}
			if !anon && user != "" && (user == st.Namespace || slices.Contains(st.Editors, user)) && role != RoleEditor {
				t.Fatalf("RoleFor(%q) = %q, though the user owns the namespace or is a listed editor", user, role)
			}
		}
	})
}

func nonNilSlice(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// FuzzSettingsKey: the KV key of a scene's settings is made of the route's
// {ns} and {scene}; a pair is refused, or gives a key that splits back
// into exactly that pair, so that two scenes never share settings.
func FuzzSettingsKey(f *testing.F) {
	for _, p := range [][2]string{{"ns", "sc"}, {"a.b", "c"}, {"a", "b.c"}, {"", "x"}, {"x", ""}, {"a/b", "c"}, {"*", ">"}, {"+", "#"}, {"é", "ü"}} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, ns, scene string) {
		key, err := settingsKey(ns, scene)
		if err != nil {
			return
		}
		a, b, ok := strings.Cut(key, ".")
		if !ok || a != ns || b != scene || strings.Contains(b, ".") {
			t.Fatalf("settingsKey(%q, %q) = %q, which does not split back", ns, scene, key)
		}
		if strings.ContainsAny(key, "*> \t\r\n/") {
			t.Fatalf("settingsKey(%q, %q) = %q holds a wildcard, space or slash", ns, scene, key)
		}
	})
}

// FuzzLoadKeys writes the input as the data directory's signing key file.
// LoadKeys refuses it, or returns keys that sign tokens their own Verify
// accepts: a key file the server starts with must be one it can use.
func FuzzLoadKeys(f *testing.F) {
	good, err := LoadOrCreateKeys(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(good.priv)
	if err != nil {
		f.Fatal(err)
	}
	block := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	f.Add(block)
	f.Add(append([]byte("junk before\n"), block...))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der[:len(der)-1]}))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{0x30, 0x00}}))
	f.Add([]byte("-----BEGIN EC PRIVATE KEY-----\n-----END EC PRIVATE KEY-----\n"))
	f.Add([]byte{})
	dir := f.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o700); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		if err := os.WriteFile(filepath.Join(dir, "keys", KeyFile), file, 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := LoadKeys(dir)
		if err != nil {
			if k != nil {
				t.Fatalf("LoadKeys returned keys with error %v", err)
			}
			return
		}
		tok, err := k.Issue("alice", Rights{Publ: []string{"a/#"}}, time.Minute)
		if err != nil {
			t.Fatalf("LoadKeys accepted a key that cannot sign: %v", err)
		}
		if c, err := k.Verify(tok); err != nil || c.Subject != "alice" {
			t.Fatalf("a token signed with the loaded key does not verify: %v", err)
		}
	})
}
