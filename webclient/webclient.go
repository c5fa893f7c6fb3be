// Package webclient serves xrealm's browser client, the Vite build output
// of web/ (web/dist), over HTTP:
//
//	/                          scene list
//	/{namespace}/{scene}       viewer
//	/{namespace}/{scene}/edit  editor
//	/assets/..., other files   the build's static files
//
// The three page routes all answer with the build's index.html; the client
// reads the path to decide what to show. A path shaped like a page whose
// namespace or scene name topic.ValidSceneName refuses (/alice/la.b,
// /alice/la%20b) is answered 400 with a page that names the bad part and
// the characters a name may hold; other unknown paths get 404, with a page
// that says where pages are unless the path names a file. The handler is meant to be mounted
// with the pattern "/" on a mux whose other routes (/persist/, /user/, /mqtt,
// ...) are more specific and therefore win.
//
// The files are read from a directory at request time, so a fresh clone
// builds without the web client, and `npm run build` in web/ takes effect
// without rebuilding the server. When the directory holds no index.html the
// page routes answer 503 with a message that says how to build it.
package webclient

import (
	"errors"
	"fmt"
	"html"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/xrealm/xrealm/topic"
)

// EnvDir is the environment variable that overrides the directory Dir
// returns.
const EnvDir = "XREALM_WEB_DIR"

// Dir returns the directory the web client is served from: $XREALM_WEB_DIR
// when set; else web/dist under the working directory when it exists; else
// web/dist next to the executable's parent directory (bin/xrealm in a
// checkout finds bin/../web/dist); else "web/dist".
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	const rel = "web/dist"
	if isDir(rel) {
		return rel
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			d := filepath.Join(filepath.Dir(filepath.Dir(exe)), rel)
			if isDir(d) {
				return d
			}
		}
	}
	return rel
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// Handler serves the web client from dir. See the package documentation
// for the routes.
func Handler(dir string) http.Handler {
	return &handler{root: os.DirFS(dir), dir: dir}
}

type handler struct {
	root fs.FS
	dir  string
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	p := r.URL.Path
	if p == "/" || p == "/index.html" {
		h.index(w, r)
		return
	}
	name := strings.TrimPrefix(path.Clean(p), "/")
	if fs.ValidPath(name) && !strings.HasSuffix(p, "/") {
		if st, err := fs.Stat(h.root, name); err == nil && !st.IsDir() {
			if strings.HasPrefix(name, "assets/") {
				// Vite names these files by content hash.
				w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
			} else {
				w.Header().Set("Cache-Control", "no-cache")
			}
			http.ServeFileFS(w, r, h.root, name)
			return
		}
	}
	if ns, scene, ok := pageNames(r.URL); ok {
		err := topic.ValidSceneName("namespace", ns)
		if err == nil {
			err = topic.ValidSceneName("scene", scene)
		}
		if err == nil {
			h.index(w, r)
			return
		}
		if !h.staticDir(ns) {
			badPage(w, r, err)
			return
		}
	}
	if looksLikePage(p) && !h.staticDir(strings.SplitN(name, "/", 2)[0]) {
		// Someone typed or followed an address: say where pages are.
		htmlPage(w, r, http.StatusNotFound, "No page here", fmt.Sprintf(
			`<p>There is no page at <code>%s</code>.</p>
<p>Scenes are at <code>/namespace/scene</code>, and their editor at <code>/namespace/scene/edit</code>.</p>`,
			html.EscapeString(r.URL.EscapedPath())))
		return
	}
	http.Error(w, "404 page not found", http.StatusNotFound)
}

// looksLikePage reports whether p, a path no file or page answers, is one
// a person would have typed or followed as a page address rather than a
// file a page asked for: its last level names no file (has no '.').
func looksLikePage(p string) bool {
	last := p[strings.LastIndexByte(strings.TrimSuffix(p, "/"), '/')+1:]
	return !strings.Contains(last, ".")
}

// pageNames returns the names of a path shaped like a page path,
// /{namespace}/{scene}, /{namespace}/{scene}/ or /{namespace}/{scene}/edit,
// each percent-decoded on its own (so that "la%2Fb" is the name "la/b", as
// the client reads it); ok is false for paths of other shapes.
func pageNames(u *url.URL) (ns, scene string, ok bool) {
	p, found := strings.CutPrefix(u.EscapedPath(), "/")
	if !found {
		return "", "", false
	}
	parts := strings.Split(strings.TrimSuffix(p, "/"), "/")
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && parts[2] == "edit":
	default:
		return "", "", false
	}
	ns, err1 := url.PathUnescape(parts[0])
	scene, err2 := url.PathUnescape(parts[1])
	if err1 != nil || err2 != nil {
		return "", "", false
	}
	return ns, scene, true
}

// staticDir reports whether a path whose first level is name is one of
// static files rather than a page: a directory of the build (assets/), or
// /.well-known/ (RFC 8615). A missing file there is a 404, not a bad
// scene name.
func (h *handler) staticDir(name string) bool {
	if name == ".well-known" {
		return true
	}
	if !fs.ValidPath(name) || name == "." {
		return false
	}
	st, err := fs.Stat(h.root, name)
	return err == nil && st.IsDir()
}

// badPage answers a page path with a name ValidSceneName refuses: 400, and
// a short page for the person who typed or followed the address.
func badPage(w http.ResponseWriter, r *http.Request, err error) {
	// the page says which characters a name may hold once, for every error
	why, _, _ := strings.Cut(err.Error(), "; a name may contain only")
	htmlPage(w, r, http.StatusBadRequest, "Not a scene address", fmt.Sprintf(
		`<p><code>%s</code> is not the address of a scene: the %s.</p>
<p>Scenes are at <code>/namespace/scene</code>, and their editor at <code>/namespace/scene/edit</code>. A namespace or scene name may contain only %s.</p>`,
		html.EscapeString(r.URL.EscapedPath()), html.EscapeString(why), html.EscapeString(topic.SceneNameChars)))
}

// htmlPage answers with status and a short HTML page: the heading title,
// then body (HTML, escaped by the caller), then a link to the scene list.
// The page names no icon file, so a browser asks for none (it would be
// one more 404 in its console).
func htmlPage(w http.ResponseWriter, r *http.Request, status int, title, body string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	fmt.Fprintf(w, `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>%s · xrealm</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40em; margin: 2em auto; padding: 0 1em; line-height: 1.5">
<h1>%s</h1>
%s
<p><a href="/">All scenes</a></p>
</body>
</html>
`, html.EscapeString(title), html.EscapeString(title), body)
}

func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	b, err := fs.ReadFile(h.root, "index.html")
	if errors.Is(err, fs.ErrNotExist) {
		http.Error(w, "The xrealm web client is not built: no index.html in "+h.dir+
			". Build it with `npm ci && npm run build` in web/ (scripts/setup.sh does), "+
			"or point "+EnvDir+" at a build.", http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		http.Error(w, "read index.html: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
}

// IsPagePath reports whether p, a decoded path, is one of the client's page
// paths: /{namespace}/{scene} or /{namespace}/{scene}/edit, with names that
// topic.ValidSceneName accepts (so no '.', which also keeps missing static
// files such as /assets/x.js from being answered with the page).
func IsPagePath(p string) bool {
	u := &url.URL{Path: p}
	ns, scene, ok := pageNames(u)
	return ok && topic.ValidSceneName("namespace", ns) == nil && topic.ValidSceneName("scene", scene) == nil
}
