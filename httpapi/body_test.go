package httpapi

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/auth"
)

// The token endpoint, which anyone may call without a token, reads at
// most maxFormBody of a request: a larger body is refused with 413 before
// it is parsed, not read up to net/http's own bound for a form (10 MB)
// and kept as form values, per request.
func TestMQTTAuthBodyLimit(t *testing.T) {
	dir := t.TempDir()
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	settings := settingsStore(t, dir)
	mux := http.NewServeMux()
	New(Config{Realm: "realm", Access: &Access{Realm: "realm", Keys: keys, Settings: settings}, Settings: settings}).Register(mux)
	form := func(pad int) string {
		v := url.Values{"scene": {"public/lobby"}, "username": {"ann"}, "id_auth": {"anonymous"}}
		if pad > 0 {
			v.Set("padding", strings.Repeat("x", pad))
		}
		return v.Encode()
	}
	for _, tc := range []struct {
		name string
		body string
		want int
	}{
		{"an ARENA client's form", form(0), http.StatusOK},
		{"just under the limit", form(maxFormBody - len(form(1)) + 1), http.StatusOK},
		{"just over the limit", form(maxFormBody - len(form(1)) + 2), http.StatusRequestEntityTooLarge},
		{"a megabyte", form(1 << 20), http.StatusRequestEntityTooLarge},
		{"9 MB", form(9 << 20), http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/user/v2/mqtt_auth", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("%d-byte form: %d %s, want %d", len(tc.body), w.Code, w.Body, tc.want)
			}
			if tc.want == http.StatusRequestEntityTooLarge && !strings.Contains(w.Body.String(), "larger than") {
				t.Errorf("answer %s does not say the form is too large", w.Body)
			}
		})
	}
}

// The token endpoint takes its fields as a URL-encoded form or as
// multipart/form-data (what a browser's FormData sends); another body
// is refused with 415 naming its type. It fails if a multipart form is
// read as no fields at all, and refused as 'scene must be "namespace/scene",
// got ""'.
func TestMQTTAuthContentTypes(t *testing.T) {
	dir := t.TempDir()
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	settings := settingsStore(t, dir)
	mux := http.NewServeMux()
	New(Config{Realm: "realm", Access: &Access{Realm: "realm", Keys: keys, Settings: settings}, Settings: settings}).Register(mux)
	fields := map[string]string{"scene": "public/lobby", "username": "ann", "id_auth": "anonymous"}
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	mw.Close()
	var withFile bytes.Buffer
	fw := multipart.NewWriter(&withFile)
	for k, v := range fields {
		fw.WriteField(k, v)
	}
	part, _ := fw.CreateFormFile("upload", "x.bin")
	part.Write([]byte("data"))
	fw.Close()
	form := url.Values{"scene": {"public/lobby"}, "username": {"ann"}, "id_auth": {"anonymous"}}.Encode()
	for _, tc := range []struct {
		name, contentType, body string
		want                    int
		wantErr                 string
	}{
		{"url-encoded", "application/x-www-form-urlencoded", form, http.StatusOK, ""},
		{"url-encoded with a charset", "application/x-www-form-urlencoded; charset=UTF-8", form, http.StatusOK, ""},
		{"multipart (FormData)", mw.FormDataContentType(), mp.String(), http.StatusOK, ""},
		{"multipart with a file", fw.FormDataContentType(), withFile.String(), http.StatusBadRequest, "file"},
		{"multipart without its boundary", "multipart/form-data", mp.String(), http.StatusBadRequest, "malformed form"},
		{"JSON", "application/json", `{"scene":"public/lobby"}`, http.StatusUnsupportedMediaType, `application/json\": send the fields as`},
		{"no Content-Type", "", form, http.StatusUnsupportedMediaType, "no Content-Type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/user/v2/mqtt_auth", strings.NewReader(tc.body))
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.wantErr) {
				t.Fatalf("%d %s, want %d with %q", w.Code, w.Body, tc.want, tc.wantErr)
			}
		})
	}
}
