package persist

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/topic"
)

// Access decides whether the HTTP request may read (write=false) or write
// the scene ns/scene. It returns nil to allow, or an error whose text is
// safe to show to the client. The handler answers 401 when the error wraps
// ErrUnauthenticated (no or bad credentials) and 403 otherwise, unless the
// error has a method HTTPStatus() int, whose value is used. The scene
// listings ask about every stored scene with a request whose context is
// marked by auth.Probe, whose refusals are no denials; an error wrapping
// auth.ErrInvalidToken refuses the listing as a whole. Called with ns and
// scene both empty, it checks only the request's credentials (the
// listings ask so first, so that a bad token is refused even when there is
// nothing to list).
//
// A 401 carries a WWW-Authenticate header (RFC 9110 §11.6.1): the value of
// the error's method WWWAuthenticate() string when it has one (as
// httpapi's errors do), else DefaultChallenge. A 403 carries the header
// when that method gives one.
type Access func(r *http.Request, ns, scene string, write bool) error

// ErrUnauthenticated, wrapped by an Access error, makes the handler answer
// 401 rather than 403.
var ErrUnauthenticated = errors.New("authentication required")

// DefaultChallenge is the WWW-Authenticate header of a 401 whose Access
// error gives none: a Bearer challenge with the realm of httpapi's
// (httpapi.AuthRealm), as RFC 6750 §3 asks for at least one parameter.
const DefaultChallenge = `Bearer realm="xrealm"`

// Handler serves the persistence REST routes under /persist/ (the request
// path must keep that prefix):
//
//	GET    /persist/health                   {"status":"ok"} when the store answers
//	GET    /persist/!allscenes               ["ns/scene", ...] the caller may read
//	GET    /persist/{ns}/!allscenes          the same, for one namespace
//	GET    /persist/{ns}/{scene}[?type=T]    [object, ...], [] when none
//	GET    /persist/{ns}/{scene}/{id}        [object], 404 when absent
//	DELETE /persist/{ns}/{scene}             removes the scene's objects (202 if not applied yet)
//	POST   /persist/{ns}/{scene}             {"action":"clone","namespace":SRC_NS,"sceneId":SRC_SCENE[,"allowNonEmptyTarget":true]}
//
// Errors are {"error":"..."} with a fitting status. A nil access allows
// everything.
func (s *Store) Handler(access Access) http.Handler {
	if access == nil {
		access = func(*http.Request, string, string, bool) error { return nil }
	}
	h := &handler{s: s, access: access}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /persist/health", h.health)
	mux.HandleFunc("GET /persist/{ns}", h.allScenes) // only "!allscenes"
	mux.HandleFunc("GET /persist/{ns}/{scene}", h.list)
	mux.HandleFunc("GET /persist/{ns}/{scene}/{id}", h.get)
	mux.HandleFunc("DELETE /persist/{ns}/{scene}", h.deleteScene)
	mux.HandleFunc("POST /persist/{ns}/{scene}", h.post)
	mux.HandleFunc("/persist/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such route: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

type handler struct {
	s      *Store
	access Access
}

// writeJSON answers v as JSON with status. It writes '<', '>' and '&' as
// they are, not as \u003c and the like (encoding/json's escaping for HTML):
// the answer is application/json, which nosniff keeps a browser from
// reading as HTML, and an error's reason or an object's markup stays as
// it was.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// allowed calls access and writes the refusal when it denies.
func (h *handler) allowed(w http.ResponseWriter, r *http.Request, ns, scene string, write bool) bool {
	err := h.access(r, ns, scene, write)
	if err == nil {
		return true
	}
	writeRefusal(w, err)
	return false
}

// writeRefusal answers an error of access with its status (accessStatus)
// and its WWW-Authenticate header (see Access).
func writeRefusal(w http.ResponseWriter, err error) {
	status := accessStatus(err)
	var c interface{ WWWAuthenticate() string }
	challenge := ""
	if errors.As(err, &c) {
		challenge = c.WWWAuthenticate()
	}
	if challenge == "" && status == http.StatusUnauthorized {
		challenge = DefaultChallenge
	}
	if challenge != "" && (status == http.StatusUnauthorized || status == http.StatusForbidden) {
		w.Header().Set("WWW-Authenticate", challenge)
	}
	writeError(w, status, err.Error())
}

func accessStatus(err error) int {
	var hs interface{ HTTPStatus() int }
	if errors.As(err, &hs) {
		return hs.HTTPStatus()
	}
	if errors.Is(err, ErrUnauthenticated) {
		return http.StatusUnauthorized
	}
	return http.StatusForbidden
}

// storeError answers for an error of the store: 400 for a name it refuses
// (when access did not check names), 404 for an absent object, 503 when
// the store could not read a complete, current view in time (a cluster
// without a stream leader, replicas catching up), else 500.
func storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrBadName):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

func (h *handler) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := contextTimeout(r, 2*time.Second)
	defer cancel()
	if _, err := h.s.kv.Status(ctx); err != nil {
		writeError(w, http.StatusServiceUnavailable, "persistence store unavailable: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *handler) allScenes(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("ns") != "!allscenes" {
		writeError(w, http.StatusNotFound, "no such route: GET "+r.URL.Path)
		return
	}
	h.scenes(w, r, "")
}

// scenes lists the scenes the caller may read, within namespace ns if not
// "". It asks access about each scene as a probe (auth.Probe): a scene
// left out is no refusal. A token that is not valid at all
// (auth.ErrInvalidToken) is refused, with its reason, rather than read as
// no token.
func (h *handler) scenes(w http.ResponseWriter, r *http.Request, ns string) {
	if ns != "" {
		if err := topic.ValidSceneName("namespace", ns); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	if !h.allowed(w, r, "", "", false) { // a token that is not valid at all
		return
	}
	all, err := h.s.Scenes(r.Context())
	if err != nil {
		storeError(w, err)
		return
	}
	probe := r.WithContext(auth.Probe(r.Context()))
	out := []string{}
	for _, sc := range all {
		n, name, _ := strings.Cut(sc, "/")
		if ns != "" && n != ns {
			continue
		}
		err := h.access(probe, n, name, false)
		if err != nil && accessStatus(err) >= 500 {
			writeError(w, accessStatus(err), err.Error()) // the server's failure: no partial list
			return
		}
		if errors.Is(err, auth.ErrInvalidToken) {
			if !h.allowed(w, r, n, name, false) { // refused again, and recorded
				return
			}
			err = nil
		}
		if err == nil {
			out = append(out, sc)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	ns, scene := r.PathValue("ns"), r.PathValue("scene")
	if scene == "!allscenes" {
		h.scenes(w, r, ns)
		return
	}
	if !h.allowed(w, r, ns, scene, false) {
		return
	}
	objs, err := h.s.List(r.Context(), ns, scene, r.URL.Query().Get("type"))
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, objs)
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	ns, scene, id := r.PathValue("ns"), r.PathValue("scene"), r.PathValue("id")
	if !h.allowed(w, r, ns, scene, false) {
		return
	}
	// ARENA answers with the array of matching objects, [] for none: not
	// 404, on which arena-py's get_persisted_obj ends the program.
	o, err := h.s.Get(r.Context(), ns, scene, id)
	switch {
	case errors.Is(err, ErrNotFound) && !errors.Is(err, ErrBadName):
		writeJSON(w, http.StatusOK, []Object{})
	case err != nil:
		storeError(w, err)
	default:
		writeJSON(w, http.StatusOK, []Object{o})
	}
}

func (h *handler) deleteScene(w http.ResponseWriter, r *http.Request) {
	ns, scene := r.PathValue("ns"), r.PathValue("scene")
	if !h.allowed(w, r, ns, scene, true) {
		return
	}
	n, err := h.s.DeleteScene(r.Context(), ns, scene)
	if errors.Is(err, ErrPending) {
		writeJSON(w, http.StatusAccepted, map[string]any{"result": "accepted", "detail": err.Error()})
		return
	}
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": "success", "deletedCount": n})
}

// cloneRequest is ARENA's body for POST /persist/{ns}/{scene}.
type cloneRequest struct {
	Action              string `json:"action"`
	Namespace           string `json:"namespace"`
	SceneID             string `json:"sceneId"`
	AllowNonEmptyTarget bool   `json:"allowNonEmptyTarget"`
}

func (h *handler) post(w http.ResponseWriter, r *http.Request) {
	ns, scene := r.PathValue("ns"), r.PathValue("scene")
	if !h.allowed(w, r, ns, scene, true) {
		return
	}
	var req cloneRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	err := dec.Decode(&req)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than 64 KiB")
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "request body is not a JSON object: "+err.Error())
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "request body has more after its JSON object")
		return
	}
	if req.Action != "clone" {
		writeError(w, http.StatusBadRequest, "unknown action "+strconvQuote(req.Action)+"; the only action is \"clone\"")
		return
	}
	if req.Namespace == "" || req.SceneID == "" {
		writeError(w, http.StatusBadRequest, "clone needs the source \"namespace\" and \"sceneId\"")
		return
	}
	if !h.allowed(w, r, req.Namespace, req.SceneID, false) {
		return
	}
	if req.Namespace == ns && req.SceneID == scene {
		writeError(w, http.StatusBadRequest, "source and target scene are the same")
		return
	}
	if !req.AllowNonEmptyTarget {
		existing, err := h.s.List(r.Context(), ns, scene, "")
		if err != nil {
			storeError(w, err)
			return
		}
		if len(existing) > 0 {
			writeError(w, http.StatusConflict, "target scene "+ns+"/"+scene+" is not empty")
			return
		}
	}
	n, err := h.s.Clone(r.Context(), req.Namespace, req.SceneID, ns, scene)
	if errors.Is(err, ErrSceneEmpty) {
		writeError(w, http.StatusNotFound, "source scene "+req.Namespace+"/"+req.SceneID+" is empty")
		return
	}
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": "success", "objectsCloned": n})
}

// strconvQuote returns s as a JSON string, for a value in a message: '<',
// '>' and '&' as they are, as writeJSON writes them.
func strconvQuote(s string) string {
	b, _ := encode(s)
	return string(b)
}

func contextTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}
