package webclient

import (
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/topic"
)

// FuzzServeHTTP requests arbitrary paths from the web client handler,
// serving a build directory next to which lies a secret file. The answer
// never holds the secret; it is the index page, a file of the build, a
// redirect or an error; only page paths and the root get the index page;
// and a 400 (a page path with a bad name) quotes no markup from the path.
func FuzzServeHTTP(f *testing.F) {
	root := f.TempDir()
	dir := filepath.Join(root, "dist")
	for p, body := range map[string]string{
		"index.html":         "<html>INDEX</html>",
		"favicon.svg":        "<svg>FAVICON</svg>",
		"assets/main-abc.js": "ASSET",
		"sub/dir/file.txt":   "NESTED",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "secret.txt"), []byte("SECRET"), 0o600); err != nil {
		f.Fatal(err)
	}
	h := Handler(dir)
	for _, p := range []string{"/", "/index.html", "/public/lobby", "/alice/lab/edit", "/alice/lab/", "/assets/main-abc.js", "/favicon.svg",
		"/../secret.txt", "/..%2fsecret.txt", "/assets/../../secret.txt", "/sub/dir/file.txt", "/sub/dir/", "/sub", "//secret.txt", "/a/b/c", "/x.y/z", "/%00",
		"/alice/la.b", "/alice/%3Cscript%3E", "/alice/<b>x</b>/edit", "/alice/la%2Fb"} {
		f.Add("GET", p)
	}
	f.Add("HEAD", "/")
	f.Add("POST", "/public/lobby")
	f.Fuzz(func(t *testing.T, method, p string) {
		if method != "GET" && method != "HEAD" && method != "POST" {
			return
		}
		u, err := url.ParseRequestURI(p)
		if err != nil {
			return
		}
		r := httptest.NewRequest(method, "/", nil)
		r.URL, r.RequestURI = u, p
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		body := w.Body.String()
		if strings.Contains(body, "SECRET") {
			t.Fatalf("%s %q served the file outside the build directory", method, p)
		}
		switch w.Code {
		case 200, 206, 301, 304, 400, 404, 405, 416:
		default:
			t.Fatalf("%s %q: status %d", method, p, w.Code)
		}
		if method == "POST" && w.Code != 405 {
			t.Fatalf("POST %q: status %d", p, w.Code)
		}
		// (a page path decoded may have been no page path before: "/a/b%2F" names the scene "b/")
		if w.Code == 400 && (IsPagePath(u.Path) && !strings.Contains(u.EscapedPath(), "%") || strings.Contains(body, "<script") || strings.Contains(body, "<b>")) {
			t.Fatalf("%s %q (path %q): 400 for a page path, or with markup from the path: %s", method, p, u.Path, body)
		}
		if strings.Contains(body, "INDEX") && u.Path != "/" && u.Path != "/index.html" && !IsPagePath(u.Path) {
			t.Fatalf("%s %q (path %q) answered with the index page", method, p, u.Path)
		}
	})
}

// FuzzIsPagePath: a page path has two or three non-empty segments (the
// third "edit"), the first two names topic.ValidSceneName accepts, so none
// holding '.', a wildcard or white space.
func FuzzIsPagePath(f *testing.F) {
	for _, p := range []string{"/public/lobby", "/alice/lab/edit", "/alice/lab/", "/a/b/c", "/x.y/z", "/a//b", "/+/#", "a/b", "/a/b/edit/"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !IsPagePath(p) {
			return
		}
		parts := strings.Split(strings.Trim(p, "/"), "/")
		if len(parts) == 3 && parts[2] == "edit" {
			parts = parts[:2]
		}
		if len(parts) != 2 {
			t.Fatalf("IsPagePath(%q) with segments %q", p, parts)
		}
		for _, s := range parts {
			if s == "" || strings.ContainsAny(s, ".*>+# \t\r\n/") || topic.ValidSceneName("scene", s) != nil {
				t.Fatalf("IsPagePath(%q) with segment %q", p, s)
			}
		}
	})
}
