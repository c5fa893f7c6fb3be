package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/topic"
)

// Config configures the routes.
type Config struct {
	Realm      string
	PublicHost string // host name clients use for MQTT and persistence, e.g. "localhost"
	Access     *Access
	Settings   *auth.SettingsStore
	TokenTTL   time.Duration // lifetime of tokens from /user/v2/mqtt_auth
	Logger     *slog.Logger
}

// API serves the routes of this package.
type API struct {
	cfg Config
	log *slog.Logger
}

// New creates the API.
func New(cfg Config) *API {
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = 12 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &API{cfg: cfg, log: cfg.Logger}
}

// Register adds the routes to mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /conf/defaults.json", a.defaults)
	mux.HandleFunc("POST /user/v2/mqtt_auth", a.mqttAuth)
	mux.HandleFunc("/user/v2/mqtt_auth", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "use POST with form fields scene=namespace/scene and username (and id_auth=anonymous, or a token as Bearer header or mqtt_token cookie); see README.md, \"Connecting a client\"")
	})
	mux.HandleFunc("GET /scenes/{ns}/{scene}/settings", a.getSettings)
	mux.HandleFunc("PUT /scenes/{ns}/{scene}/settings", a.putSettings)
}

// writeJSON answers v as JSON with status. It writes '<', '>' and '&' as
// they are, not as \u003c and the like (encoding/json's escaping for HTML):
// the answer is application/json, which nosniff keeps a browser from
// reading as HTML, and a reason such as "Bearer <token>" stays readable.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// defaults serves what ARENA clients read at start. arena-py 1.6.0 needs
// mqttHost, persistHost, persistPath and latencyTopic.
func (a *API) defaults(w http.ResponseWriter, r *http.Request) {
	host := a.cfg.PublicHost
	if host == "" {
		host = r.Host
		if i := strings.LastIndexByte(host, ':'); i > 0 && !strings.HasSuffix(host, "]") {
			host = host[:i]
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"ARENADefaults": map[string]any{
		"realm":             a.cfg.Realm,
		"mqttHost":          host,
		"mqttPath":          []string{"/mqtt/"},
		"persistHost":       host,
		"persistPath":       "/persist/",
		"latencyTopic":      "$NETWORK/latency",
		"namespace":         auth.PublicNamespace,
		"sceneName":         "default",
		"userName":          "Anonymous",
		"graphTopic":        "$NETWORK",
		"defaultVRMRig":     "",
		"camHeight":         1.6,
		"disableVideo":      true,
		"ATLASurl":          "",
		"headModelPath":     "",
		"jitsiHost":         "",
		"supportDevFolders": false,
	}})
}

// MaxUserClientLen is the longest userclient a token is issued for: it
// becomes a level of the token's topics, which must stay well inside
// topic.MaxSubjectLen.
const MaxUserClientLen = 256

// mqttAuth issues a token for one scene, as ARENA's /user/v2/mqtt_auth
// does. It takes ARENA's form fields: username, id_auth ("anonymous" for an
// anonymous user), realm, scene ("ns/scene"), userclient, camid, handleftid,
// handrightid. A caller that sends a valid token (Bearer or cookie) is
// signed in as that token's user; one without a token is anonymous and
// allowed only where the scene allows anonymous users. A token that is not
// valid, or an Authorization header that carries no Bearer token
// (RequestToken), is refused with 401, except with id_auth=anonymous: such
// a request asks as an anonymous user, and its credentials, whatever they
// are, are not read. With Access.Insecure every request asks so.
//
// The token issued has the rights the scene's settings give the user
// (whatever rights the presented token carried, in whatever scene), and
// expires after TokenTTL, or with the presented token if that is sooner.
// A service's token (auth.Rights.IsService) is refused: it is no user's.
func (a *API) mqttAuth(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
	if err := parseTokenForm(r); err != nil {
		var status interface{ HTTPStatus() int }
		if errors.As(err, &status) {
			writeError(w, status.HTTPStatus(), err.Error())
			return
		}
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the form is larger than %d KiB", maxFormBody>>10))
			return
		}
		writeError(w, http.StatusBadRequest, "malformed form: "+err.Error())
		return
	}
	f := r.PostForm
	realm := f.Get("realm")
	if realm == "" {
		realm = a.cfg.Realm
	}
	if realm != a.cfg.Realm {
		writeError(w, http.StatusBadRequest, "unknown realm "+topic.Clip(realm)+"; this server serves "+quote(a.cfg.Realm))
		return
	}
	ns, scene, ok := strings.Cut(f.Get("scene"), "/")
	if !ok {
		writeError(w, http.StatusBadRequest, "scene must be \"namespace/scene\", got "+topic.Clip(f.Get("scene")))
		return
	}
	if err := CheckScene(ns, scene); err != nil {
		writeError(w, http.StatusBadRequest, "scene "+topic.Clip(f.Get("scene"))+": "+err.Error())
		return
	}
	userClient := f.Get("userclient")
	if userClient != "" {
		if err := topic.ValidLevel("userclient", userClient); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if len(userClient) > MaxUserClientLen {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("userclient %s of %d bytes is longer than the longest, %d", topic.Clip(userClient), len(userClient), MaxUserClientLen))
			return
		}
	}
	if a.cfg.Access.Insecure {
		a.issueInsecure(w, r, f, realm, ns, scene, userClient)
		return
	}
	user, anonymous := "", true
	ttl := a.cfg.TokenTTL
	tok := ""
	if f.Get("id_auth") != "anonymous" { // an anonymous request's credentials are not read
		var err error
		if tok, err = RequestToken(r); err != nil {
			writeRefusal(w, a.cfg.Access.Refused(r, err))
			return
		}
	}
	if tok != "" {
		cl, err := a.cfg.Access.Keys.Verify(tok)
		if err != nil {
			writeRefusal(w, a.cfg.Access.Refused(r, tokenRefused(err)))
			return
		}
		if cl.Rights().IsService() {
			// A node's token (xrealm token --role sfu or cluster) signs
			// the node in to the bus; it is no user's sign-in, and would
			// otherwise give its holder its user's role in every scene.
			writeRefusal(w, a.cfg.Access.Refused(r, insufficientScope("the token of user "+quote(cl.Subject)+" is a service's (--role sfu or cluster), not a user's sign-in: ask with a user's token, or with id_auth=anonymous")))
			return
		}
		// A token issued to an anonymous user stays anonymous.
		user, anonymous = cl.Subject, auth.IsAnonymous(cl.Subject)
		if !anonymous && cl.ExpiresAt != nil {
			// The new token is the caller's sign-in for one scene: it
			// expires with it, so that trading a token for a new one,
			// again and again, does not keep a sign-in alive for ever.
			// (Anyone may have an anonymous token at any time.)
			ttl = min(ttl, time.Until(cl.ExpiresAt.Time))
			if ttl < time.Second { // it expired since Verify, or does now
				writeRefusal(w, a.cfg.Access.Refused(r, wrapCode(ErrUnauthenticated, codeInvalidToken, "the token of user "+quote(cl.Subject)+" expires now: sign in with a new one")))
				return
			}
		}
	}
	if user == "" {
		user = anonymousName(f.Get("username"))
	}
	st, err := a.cfg.Settings.Get(r.Context(), ns, scene)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	role, err := st.RoleFor(user, anonymous)
	if err != nil {
		a.cfg.Access.Refused(r, fmt.Errorf("no token for user %s in scene %s/%s: %w", user, ns, scene, err))
		refusal := wrap(ErrForbidden, err.Error()) // no token came: no challenge
		if tok != "" {
			refusal = insufficientScope(err.Error())
		}
		writeRefusal(w, refusal)
		return
	}
	token, err := a.cfg.Access.Keys.Issue(user, auth.SceneRights(realm, ns, scene, role, userClient), ttl)
	if err != nil {
		// Not the request's fault as far as it can tell (a presented
		// token's user name too long to sign again, say): logged, and
		// answered without the names it holds.
		a.log.Error("token not issued", "user", topic.Clip(user), "scene", ns+"/"+scene, "role", role, "err", err)
		writeError(w, http.StatusInternalServerError, "the token could not be issued; the server's log says why")
		return
	}
	a.answerToken(w, f, token, user, role, userClient, ttl)
	a.log.Info("token issued", "user", user, "scene", ns+"/"+scene, "role", role, "anonymous", anonymous)
}

// issueInsecure answers a token request when the server runs with
// --insecure: the bus checks no rights, so the token says what anyone may
// do, edit the scene, whatever its settings. A valid user token, if the
// request brings one (and id_auth is not anonymous), names the user;
// missing, bad or service credentials are not refused, and the token is an
// anonymous user's.
func (a *API) issueInsecure(w http.ResponseWriter, r *http.Request, f url.Values, realm, ns, scene, userClient string) {
	user, anonymous := anonymousName(f.Get("username")), true
	if f.Get("id_auth") != "anonymous" {
		if tok, err := RequestToken(r); err == nil && tok != "" {
			if cl, err := a.cfg.Access.Keys.Verify(tok); err == nil && !cl.Rights().IsService() {
				user, anonymous = cl.Subject, auth.IsAnonymous(cl.Subject)
			}
		}
	}
	ttl := a.cfg.TokenTTL
	token, err := a.cfg.Access.Keys.Issue(user, auth.SceneRights(realm, ns, scene, auth.RoleEditor, userClient), ttl)
	if err != nil {
		a.log.Error("token not issued", "user", topic.Clip(user), "scene", ns+"/"+scene, "role", auth.RoleEditor, "err", err)
		writeError(w, http.StatusInternalServerError, "the token could not be issued; the server's log says why")
		return
	}
	a.answerToken(w, f, token, user, auth.RoleEditor, userClient, ttl)
	a.log.Info("token issued (--insecure: any caller may edit)", "user", user, "scene", ns+"/"+scene, "anonymous", anonymous)
}

// answerToken sends an issued token as the mqtt_token cookie and as the
// JSON answer ARENA clients read.
func (a *API) answerToken(w http.ResponseWriter, f url.Values, token, user string, role auth.Role, userClient string, ttl time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: token, Path: "/", HttpOnly: false, SameSite: http.SameSiteLaxMode, MaxAge: int(ttl.Seconds())})
	writeJSON(w, http.StatusOK, map[string]any{
		"username": user,
		"token":    token,
		"role":     role,
		"ids": map[string]string{
			"userid":      user,
			"userclient":  userClient,
			"camid":       f.Get("camid"),
			"handleftid":  f.Get("handleftid"),
			"handrightid": f.Get("handrightid"),
		},
	})
}

// formError is an error of parseTokenForm with the status it answers.
type formError struct {
	status int
	msg    string
}

func (e formError) Error() string   { return e.msg }
func (e formError) HTTPStatus() int { return e.status }

// parseTokenForm reads the token request's fields into r.PostForm: a
// URL-encoded form, or multipart/form-data (a browser's FormData), of text
// fields only. Another body, which ParseForm reads as no fields at all, is
// refused with 415 naming its type. Other errors are ParseForm's.
func parseTokenForm(r *http.Request) error {
	const want = "send the fields as application/x-www-form-urlencoded or multipart/form-data"
	h := r.Header.Get("Content-Type")
	if h == "" {
		return formError{http.StatusUnsupportedMediaType, "the form has no Content-Type: " + want}
	}
	ct, _, err := mime.ParseMediaType(h)
	switch {
	case err == nil && ct == "application/x-www-form-urlencoded":
		return r.ParseForm()
	case err == nil && ct == "multipart/form-data":
		if err := r.ParseMultipartForm(maxFormBody); err != nil {
			return err
		}
		defer r.MultipartForm.RemoveAll()
		for name := range r.MultipartForm.File {
			return formError{http.StatusBadRequest, "the form has a file (field " + topic.Clip(name) + "): the token endpoint takes text fields only"}
		}
		return nil
	}
	return formError{http.StatusUnsupportedMediaType, "Content-Type " + topic.Clip(h) + ": " + want}
}

// quote returns s as a JSON string, for a name in a message: '<', '>' and
// '&' as they are, as writeJSON writes them.
func quote(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// anonymousName keeps a client's chosen display name but marks it
// anonymous, so that it can never equal a signed-in user's name.
func anonymousName(want string) string {
	clean := strings.Map(func(r rune) rune {
		if r == '/' || r == '+' || r == '#' || r == '.' || r < ' ' {
			return -1
		}
		return r
	}, want)
	if len(clean) > 64 {
		// Cut at a character boundary: the name goes into the token's sub
		// and the JSON answer, which must stay valid UTF-8.
		n := 64
		for n > 0 && !utf8.RuneStart(clean[n]) {
			n--
		}
		clean = clean[:n]
	}
	if clean == "" {
		b := make([]byte, 4)
		rand.Read(b)
		clean = hex.EncodeToString(b)
	}
	return auth.AnonymousPrefix + strings.TrimPrefix(clean, auth.AnonymousPrefix)
}

// getSettings returns a scene's settings to anyone who may read it.
func (a *API) getSettings(w http.ResponseWriter, r *http.Request) {
	ns, scene := r.PathValue("ns"), r.PathValue("scene")
	if err := a.cfg.Access.Scene(r, ns, scene, false); err != nil {
		writeRefusal(w, err)
		return
	}
	st, err := a.cfg.Settings.Get(r.Context(), ns, scene)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// internalError answers 503 for a failure that is not the client's (the
// settings store unavailable), and logs it.
func (a *API) internalError(w http.ResponseWriter, r *http.Request, err error) {
	a.log.Error("HTTP request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusServiceUnavailable, err.Error())
}

// maxFormBody is the largest body of a token request (its form fields
// are a few short names).
const maxFormBody = 64 << 10

// maxSettingsBody is the largest body of a settings PUT.
const maxSettingsBody = 64 << 10

// putSettings replaces a scene's settings; only the namespace's owner (the
// user named like the namespace, signed in with a user's token, not a
// service's) may. It replaces all of them: a field the
// body leaves out is false or empty, so {"interest":{...}} alone makes a
// public scene private. The answer is the settings as stored; a PUT that
// takes public or anonymous reading away is logged (logLostAccess). With
// Access.Insecure the request's credentials are not read: anyone may.
func (a *API) putSettings(w http.ResponseWriter, r *http.Request) {
	ns, scene := r.PathValue("ns"), r.PathValue("scene")
	if err := CheckScene(ns, scene); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !a.cfg.Access.Insecure && !a.settingsOwner(w, r, ns, scene) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSettingsBody))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, "the settings are larger than 64 KiB")
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the settings: "+err.Error())
		return
	}
	// PUT replaces every field: only one whole JSON object may do that,
	// not null (which decodes as all fields false) or an object followed
	// by more.
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		writeError(w, http.StatusBadRequest, "malformed settings: the body must be a JSON object, got "+topic.Clip(string(body)))
		return
	}
	var st auth.Settings
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		writeError(w, http.StatusBadRequest, "malformed settings: "+err.Error())
		return
	}
	if rest := bytes.TrimSpace(body[dec.InputOffset():]); len(rest) > 0 {
		writeError(w, http.StatusBadRequest, "malformed settings: "+topic.Clip(string(rest))+" after the settings object")
		return
	}
	st.Namespace, st.Scene = ns, scene
	if st.Interest != nil {
		if err := st.Interest.Validate(); err != nil {
			writeError(w, http.StatusBadRequest, "settings of "+ns+"/"+scene+": "+err.Error())
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	before, beforeErr := a.cfg.Settings.Get(ctx, ns, scene)
	if err := a.cfg.Settings.Put(ctx, st); err != nil {
		a.internalError(w, r, err)
		return
	}
	if beforeErr == nil {
		a.logLostAccess(before, st, body)
	}
	writeJSON(w, http.StatusOK, st)
}

// settingsOwner reports whether r comes from the owner of namespace ns
// (see putSettings), signed in with a user's token; when not, it answers
// the refusal.
func (a *API) settingsOwner(w http.ResponseWriter, r *http.Request, ns, scene string) bool {
	tok, err := RequestToken(r)
	if err != nil {
		writeRefusal(w, a.cfg.Access.Refused(r, err))
		return false
	}
	if tok == "" {
		writeRefusal(w, a.cfg.Access.Refused(r, wrap(ErrUnauthenticated, "changing the settings of scene "+ns+"/"+scene+" needs a token of user "+quote(ns)+" (Bearer header or mqtt_token cookie)")))
		return false
	}
	cl, err := a.cfg.Access.Keys.Verify(tok)
	if err != nil {
		writeRefusal(w, a.cfg.Access.Refused(r, tokenRefused(err)))
		return false
	}
	if cl.Rights().IsService() {
		// A node's token (xrealm token --role sfu or cluster) signs the
		// node in to the bus; it is no user's sign-in (as at the token
		// endpoint and in Access.Scene), so it owns no namespace.
		writeRefusal(w, a.cfg.Access.Refused(r, insufficientScope("the token of user "+quote(cl.Subject)+" is a service's (--role sfu or cluster), not a user's sign-in: changing the settings of scene "+ns+"/"+scene+" needs a token of user "+quote(ns))))
		return false
	}
	if auth.IsAnonymous(cl.Subject) {
		// Anyone may ask for an anonymous token of any name: such a user
		// owns no namespace, as it edits no scene (auth.Settings.RoleFor).
		writeRefusal(w, a.cfg.Access.Refused(r, insufficientScope("user "+quote(cl.Subject)+" is anonymous; anonymous users may not change the settings of any scene")))
		return false
	}
	if cl.Subject != ns {
		writeRefusal(w, a.cfg.Access.Refused(r, insufficientScope("only user "+quote(ns)+" may change the settings of scenes in namespace "+quote(ns))))
		return false
	}
	return true
}

// logLostAccess logs, at INFO, a PUT that took public or anonymous reading
// away from a scene, with the fields its body left out: PUT replaces the
// settings, so a body with only "interest" makes a public scene private.
func (a *API) logLostAccess(before, after auth.Settings, body []byte) {
	lostPublic := before.PublicRead && !after.PublicRead
	lostAnonymous := before.PublicRead && before.AnonymousUsers && !(after.PublicRead && after.AnonymousUsers)
	if !lostPublic && !lostAnonymous {
		return
	}
	var given map[string]json.RawMessage
	_ = json.NewDecoder(bytes.NewReader(body)).Decode(&given)
	var omitted []string
	for _, f := range []string{"public_read", "anonymous_users", "public_write", "editors", "viewers", "interest"} {
		if _, ok := given[f]; !ok {
			omitted = append(omitted, f)
		}
	}
	msg := "scene settings: a PUT took anonymous reading away from the scene"
	if lostPublic {
		msg = "scene settings: a PUT made a public scene private"
	}
	a.log.Info(msg, "scene", after.Namespace+"/"+after.Scene,
		"public_read", after.PublicRead, "anonymous_users", after.AnonymousUsers,
		"omitted", strings.Join(omitted, ","),
		"hint", "PUT replaces all settings; fields left out are false or empty (GET, change, PUT to keep the others)")
}

func statusOf(err error) int {
	var hs interface{ HTTPStatus() int }
	if errors.As(err, &hs) {
		return hs.HTTPStatus()
	}
	return http.StatusInternalServerError
}
