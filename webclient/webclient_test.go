package webclient

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, p string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, p, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestHandler(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "index.html"), []byte("<html>client</html>"), 0o644)
	os.MkdirAll(filepath.Join(dir, "assets"), 0o755)
	os.WriteFile(filepath.Join(dir, "assets", "main-abc.js"), []byte("console.log(1)"), 0o644)
	os.WriteFile(filepath.Join(dir, "favicon.svg"), []byte("<svg/>"), 0o644)
	h := Handler(dir)

	for _, p := range []string{"/", "/index.html", "/public/lobby", "/alice/lab/edit", "/alice/lab/"} {
		res, body := get(t, h, "GET", p)
		if res.StatusCode != 200 || body != "<html>client</html>" {
			t.Errorf("GET %s: %d %q, want the index page", p, res.StatusCode, body)
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("GET %s: content type %q", p, ct)
		}
	}
	res, body := get(t, h, "GET", "/assets/main-abc.js")
	if res.StatusCode != 200 || body != "console.log(1)" || !strings.Contains(res.Header.Get("Cache-Control"), "immutable") {
		t.Errorf("asset: %d %q %v", res.StatusCode, body, res.Header)
	}
	if res, _ := get(t, h, "GET", "/favicon.svg"); res.StatusCode != 200 {
		t.Errorf("favicon: %d", res.StatusCode)
	}
	for _, p := range []string{"/assets/missing.js", "/a/b/c", "/a/b/c/d", "/only", "/x/y/view", "/../etc/passwd", "/assets/"} {
		if res, body := get(t, h, "GET", p); res.StatusCode != 404 {
			t.Errorf("GET %s: %d %q, want 404", p, res.StatusCode, body)
		}
	}
	// A page address that is no page gets a page saying where pages are
	// (it got Go's plain "404 page not found"); a missing file does not.
	for _, p := range []string{"/only", "/a/b/c/d", "/x/y/view", "/only/"} {
		res, body := get(t, h, "GET", p)
		if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, "There is no page at <code>"+p+"</code>") || !strings.Contains(body, `<a href="/">`) || !strings.Contains(body, `rel="icon" href="data:,"`) {
			t.Errorf("GET %s: %q %q, want a page that says there is no page there", p, res.Header.Get("Content-Type"), body)
		}
	}
	for _, p := range []string{"/assets/missing.js", "/assets/", "/favicon.ico", "/a/b/c.png"} {
		if res, body := get(t, h, "GET", p); strings.Contains(body, "<html") {
			t.Errorf("GET %s: %d %q, want a plain 404 for a file", p, res.StatusCode, body)
		}
	}
	if res, _ := get(t, h, "POST", "/"); res.StatusCode != 405 {
		t.Errorf("POST: %d, want 405", res.StatusCode)
	}
	if res, body := get(t, h, "HEAD", "/alice/lab"); res.StatusCode != 200 || body != "" {
		t.Errorf("HEAD: %d %q", res.StatusCode, body)
	}
}

// TestBadPagePath: a path shaped like a page whose namespace or scene name
// topic.ValidSceneName refuses is answered 400 with an HTML page that names
// the bad name and character and says which characters a name may hold;
// missing static files and other shapes stay 404.
func TestBadPagePath(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "index.html"), []byte("<html>client</html>"), 0o644)
	os.MkdirAll(filepath.Join(dir, "assets"), 0o755)
	h := Handler(dir)
	const allowed = "ASCII letters, digits, &#39;-&#39;, &#39;_&#39; and &#39;=&#39;"
	for _, tt := range []struct {
		path string
		want []string // parts of the page, HTML-escaped
	}{
		{"/alice/la.b", []string{`scene name &#34;la.b&#34;: &#39;.&#39; is not allowed`, "<code>/alice/la.b</code>"}},
		{"/alice/la%20b", []string{`scene name &#34;la b&#34;: &#39; &#39; is not allowed`, "<code>/alice/la%20b</code>"}},
		{"/alice/la.b/edit", []string{`scene name &#34;la.b&#34;`}},
		{"/alice/la.b/", []string{`scene name &#34;la.b&#34;`}},
		{"/al.ice/lab", []string{`namespace name &#34;al.ice&#34;: &#39;.&#39; is not allowed`}},
		{"/alice/a@b", []string{`&#39;@&#39; is not allowed`}},
		{"/alice/a+b", []string{`&#39;+&#39; is not allowed (an MQTT wildcard`}},
		{"/alice/a%23b", []string{`&#39;#&#39; is not allowed (an MQTT wildcard`}},
		{"/alice/la%2Fb", []string{`scene name &#34;la/b&#34;: &#39;/&#39; is not allowed (it separates namespace and scene)`}},
		{"/alice/%C3%A9", []string{`&#39;é&#39; is not allowed`}},
		{"/alice/%3Cscript%3E", []string{`&#39;&lt;&#39; is not allowed`, "<code>/alice/%3Cscript%3E</code>"}},
		{"/alice//edit", []string{"scene name is empty"}},
		{"//lab", []string{"namespace name is empty"}},
	} {
		res, body := get(t, h, "GET", tt.path)
		if res.StatusCode != 400 {
			t.Errorf("GET %s: %d, want 400; body %q", tt.path, res.StatusCode, body)
			continue
		}
		if ct := res.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("GET %s: content type %q", tt.path, ct)
		}
		for _, w := range append(tt.want, allowed, `<a href="/">`) {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: body does not say %q:\n%s", tt.path, w, body)
			}
		}
		if strings.Contains(body, "<script") || strings.Contains(body, "client</html>") {
			t.Errorf("GET %s: body %q", tt.path, body)
		}
		if res, body := get(t, h, "HEAD", tt.path); res.StatusCode != 400 || body != "" {
			t.Errorf("HEAD %s: %d %q", tt.path, res.StatusCode, body)
		}
	}
	// Still 404: missing static files (a directory of the build, or
	// .well-known) and paths of other shapes; and valid names are pages.
	for _, p := range []string{"/assets/missing.js", "/assets/a.b/", "/.well-known/security.txt", "/a/b.c/d", "/favicon.ico", "/alice/la.b/view"} {
		if res, body := get(t, h, "GET", p); res.StatusCode != 404 {
			t.Errorf("GET %s: %d %q, want 404", p, res.StatusCode, body)
		}
	}
	for _, p := range []string{"/alice/a=b", "/Alice_2/room-1=b/edit", "/%61lice/lab"} {
		if res, body := get(t, h, "GET", p); res.StatusCode != 200 || body != "<html>client</html>" {
			t.Errorf("GET %s: %d %q, want the index page", p, res.StatusCode, body)
		}
	}
}

func TestNotBuilt(t *testing.T) {
	h := Handler(filepath.Join(t.TempDir(), "missing"))
	res, body := get(t, h, "GET", "/public/lobby")
	if res.StatusCode != 503 || !strings.Contains(body, "npm run build") {
		t.Errorf("%d %q", res.StatusCode, body)
	}
}

func TestMountedBehindOtherRoutes(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "index.html"), []byte("page"), 0o644)
	mux := http.NewServeMux()
	mux.HandleFunc("/persist/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "persist") })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.Handle("/", Handler(dir))
	for p, want := range map[string]string{"/persist/a/b": "persist", "/healthz": "ok", "/a/b": "page", "/": "page"} {
		if _, body := get(t, mux, "GET", p); body != want {
			t.Errorf("GET %s = %q, want %q", p, body, want)
		}
	}
}

func TestDirEnv(t *testing.T) {
	t.Setenv(EnvDir, "/some/where")
	if d := Dir(); d != "/some/where" {
		t.Errorf("Dir() = %q", d)
	}
}
