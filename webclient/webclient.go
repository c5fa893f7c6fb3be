// Package webclient serves xrealm's browser client, the Vite build output
// of web/ (web/dist), over HTTP:
//
//	/                          scene list
//	/{namespace}/{scene}       viewer
//	/{namespace}/{scene}/edit  editor
//	/assets/..., other files   the build's static files
//
// The three page routes all answer with the build's index.html; the client
// reads the path to decide what to show. The handler is meant to be mounted
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
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
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
	if IsPagePath(p) {
		h.index(w, r)
		return
	}
	http.Error(w, "404 page not found", http.StatusNotFound)
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

// IsPagePath reports whether p is one of the client's page paths:
// /{namespace}/{scene} or /{namespace}/{scene}/edit, with each name made of
// characters a scene name may hold (no '.', which keeps missing static
// files such as /assets/x.js from being answered with the page).
func IsPagePath(p string) bool {
	parts := strings.Split(strings.TrimSuffix(strings.TrimPrefix(p, "/"), "/"), "/")
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && parts[2] == "edit":
		parts = parts[:2]
	default:
		return false
	}
	for _, s := range parts {
		if s == "" || strings.ContainsAny(s, ".*>+# \t\r\n") {
			return false
		}
	}
	return true
}
