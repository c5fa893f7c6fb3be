package httpapi

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/xrealm/xrealm/auth"
)

// A token the server's key signed for a user name longer than
// auth.MaxUserLen (as issued before Issue limited it) is valid, but the
// token endpoint cannot issue its user another: it answers 500 with a
// short message that quotes none of the name, and logs the failure with
// the name clipped. Here the name is 9 KiB, and the scene's names and the
// userclient as long as they may be, so that a token for them would also
// be over auth.MaxTokenLen.
func TestTokenEndpointLongUserName(t *testing.T) {
	e := newRoutesEnv(t)
	var logs bytes.Buffer
	mux := http.NewServeMux()
	New(Config{Realm: "realm", Access: e.access, Settings: e.settings, TokenTTL: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))}).Register(mux)

	b, err := os.ReadFile(filepath.Join(e.dir, "keys", auth.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	key, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	name := "u" + strings.Repeat("x", 9<<10) + "end"
	old, err := jwt.NewWithClaims(jwt.SigningMethodES256, &auth.Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: name, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))},
		Publ:             []string{}, Subs: []string{},
	}).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.keys.Verify(old); err != nil {
		t.Fatalf("the token for the long name: %v", err)
	}

	long := strings.Repeat("n", 128)
	form := url.Values{"scene": {long + "/" + long}, "userclient": {strings.Repeat("c", MaxUserClientLen)}}
	r := httptest.NewRequest(http.MethodPost, "/user/v2/mqtt_auth", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Authorization", "Bearer "+old)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	if w.Code != http.StatusInternalServerError || w.Body.Len() > 200 || strings.Contains(w.Body.String(), "xxxxxxxxxx") {
		t.Fatalf("%d %.300s (%d bytes), want 500 with a short message", w.Code, w.Body, w.Body.Len())
	}
	if !strings.Contains(w.Body.String(), "the token could not be issued") {
		t.Errorf("answer %s does not say that the token could not be issued", w.Body)
	}
	log := logs.String()
	if !strings.Contains(log, `level=ERROR msg="token not issued"`) || !strings.Contains(log, "is longer than the longest, 256") {
		t.Fatalf("log %.500s, want an error saying why the token was not issued", log)
	}
	if strings.Contains(log, "xend") || len(log) > 2000 {
		t.Errorf("the log holds the whole name (%d bytes): %.500s", len(log), log)
	}
}
