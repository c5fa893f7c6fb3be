package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/topic"
)

// CookieName is the cookie that carries a token, as in ARENA.
const CookieName = "mqtt_token"

// RequestToken returns the token a request carries: the one of its
// "Authorization: Bearer <token>" header (the scheme in any case, as RFC
// 9110 has it: "bearer" too), else its mqtt_token cookie's; "" if it has
// neither. An Authorization header is the request's credentials, even
// beside the cookie: one that carries no Bearer token (another scheme
// such as Basic, a bare token, Bearer with nothing after it, an empty
// header, or more than one Authorization header) is an error that says
// what xrealm takes, with HTTPStatus 401 (it wraps ErrUnauthenticated),
// rather than a request without a token. The error never holds the
// header's credentials.
func RequestToken(r *http.Request) (string, error) {
	hs := r.Header.Values("Authorization")
	switch len(hs) {
	case 0:
		if c, err := r.Cookie(CookieName); err == nil {
			return c.Value, nil
		}
		return "", nil
	case 1:
	default:
		return "", wrap(ErrUnauthenticated, fmt.Sprintf("the request has %d Authorization headers: send one, %s", len(hs), takesToken))
	}
	h := strings.TrimSpace(hs[0])
	if h == "" {
		return "", wrap(ErrUnauthenticated, "the Authorization header is empty: leave it out, or send "+takesToken)
	}
	i := strings.IndexAny(h, " \t")
	if i < 0 {
		if strings.EqualFold(h, "Bearer") {
			return "", wrap(ErrUnauthenticated, "the Authorization header is Bearer with no token: send "+takesToken)
		}
		return "", wrap(ErrUnauthenticated, "the Authorization header has no scheme (a token without \"Bearer \" before it?): send "+takesToken)
	}
	scheme, tok := h[:i], strings.TrimSpace(h[i+1:])
	if !strings.EqualFold(scheme, "Bearer") {
		if !schemeName(scheme) {
			return "", wrap(ErrUnauthenticated, "the Authorization header's scheme is not Bearer: send "+takesToken)
		}
		return "", wrap(ErrUnauthenticated, "the Authorization scheme "+quote(scheme)+" is not supported: send "+takesToken)
	}
	return tok, nil // not empty: h is trimmed
}

// takesToken says what credentials xrealm takes, for RequestToken's errors.
const takesToken = "Authorization: Bearer <token> (a JWT from POST /user/v2/mqtt_auth or xrealm token), or the token as the " + CookieName + " cookie"

// schemeName reports whether s can be the name of an authentication
// scheme (RFC 9110's token, at most 32 characters), which an error may
// quote: anything else may be a credential.
func schemeName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ErrUnauthenticated is returned for a request whose token is missing where
// one is needed, or invalid.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrForbidden is returned when a valid token does not allow the action.
var ErrForbidden = errors.New("forbidden")

// ErrUnavailable is returned when the scene settings could not be read
// (the settings store did not answer): the server's failure, not a
// refusal; HTTPStatus 503.
var ErrUnavailable = errors.New("settings store unavailable")

// ErrBadRequest is returned for a request that names no valid scene: a
// namespace or scene name that topic.ValidSceneName refuses.
var ErrBadRequest = errors.New("bad request")

// CheckScene checks the namespace and scene names of a request with
// topic.ValidSceneName. Its error wraps ErrBadRequest, names the bad part,
// and has HTTPStatus 400.
func CheckScene(ns, scene string) error {
	if err := topic.ValidSceneName("namespace", ns); err != nil {
		return wrap(ErrBadRequest, err.Error())
	}
	if err := topic.ValidSceneName("scene", scene); err != nil {
		return wrap(ErrBadRequest, err.Error())
	}
	return nil
}

// Access decides scene access for HTTP routes with the same rules as the
// bus: a token's rights, or the scene's settings for a request without one.
type Access struct {
	Realm    string
	Keys     *auth.Keys
	Settings interface {
		Get(ctx context.Context, ns, scene string) (auth.Settings, error)
	}
	// Insecure refuses nothing for its credentials (xrealm serve
	// --insecure): every request may read and write every scene, the
	// token endpoint gives every caller an editor's token (named for a
	// valid token's user, if one comes), and anyone may change a scene's
	// settings.
	Insecure bool
	// Log and Denials, if not nil, record every refused request: a log line
	// naming the request and the reason (at a bounded rate), and a count.
	Log     *slog.Logger
	Denials prometheus.Counter
	denials auth.DenyLog
}

// Refused records a refused request (see Access.Log) and returns err.
func (a *Access) Refused(r *http.Request, err error) error {
	if a.Denials != nil {
		a.Denials.Inc()
	}
	if a.Log != nil {
		a.denials.Deny(a.Log, "HTTP request denied", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err.Error())
	}
	return err
}

// Scene reports whether r may read (write=false) or write scene ns/scene.
// A token's rights for the scene allow it; so does the role the scene's
// settings give the token's user (or an anonymous caller), the same rule the
// token endpoint applies: a token for one scene never reads less than no
// token at all. The error says why not; it wraps ErrUnauthenticated or
// ErrForbidden, or ErrBadRequest for names CheckScene refuses (also with
// Insecure), or ErrUnavailable when the settings could not be read.
//
// An Authorization header that carries no Bearer token is refused
// (RequestToken), not read as a request without a token; with Insecure the
// request's credentials are not read.
//
// With ns and scene both empty it checks only the request's credentials:
// nil without a token, or with a valid one (for any scene).
func (a *Access) Scene(r *http.Request, ns, scene string, write bool) error {
	if ns != "" || scene != "" {
		if err := CheckScene(ns, scene); err != nil {
			return err
		}
	}
	if a.Insecure {
		return nil
	}
	tok, err := RequestToken(r)
	if err != nil {
		return a.refusedIf(r, err)
	}
	if ns == "" && scene == "" {
		return a.refusedIf(r, a.credentials(tok))
	}
	return a.refusedIf(r, a.scene(r, tok, ns, scene, write))
}

// ClientBinding is who a request is in a scene and which client ids it may
// take there (Access.SceneClients).
type ClientBinding struct {
	User string   // the token's subject; "" for a request without one
	Any  bool     // no binding: any client id
	IDs  []string // otherwise the userclients its token binds it to
}

// SceneClients reports whether r may read scene ns/scene, presenting token,
// and which client ids it may take there. A token given here is checked in
// place of the request's credentials, which are then not read; with token
// "" they are (RequestToken). The rules are Scene's; in addition, a token
// whose rights name the scene binds its holder to the userclients it may
// publish presence as (realm/s/ns/scene/x/{userclient}/...), as the bus
// binds its topics: the one it was issued for (auth.SceneRights), any for
// an editor or a token issued without one. A request that the scene's
// settings alone allow (no token, or one for another scene) names no
// client and may take any.
//
// The token endpoint issues a token for whatever userclient its caller
// asks, as ARENA's does, so this keeps a client to the one id its token
// names, on the bus and beside it; it does not stop a user who may read
// the scene from asking for a token for another user's id.
func (a *Access) SceneClients(r *http.Request, token, ns, scene string) (ClientBinding, error) {
	if err := CheckScene(ns, scene); err != nil {
		return ClientBinding{}, err
	}
	if a.Insecure {
		return ClientBinding{Any: true}, nil
	}
	if token == "" {
		var err error
		if token, err = RequestToken(r); err != nil {
			return ClientBinding{}, a.refusedIf(r, err)
		}
	}
	if err := a.scene(r, token, ns, scene, false); err != nil {
		return ClientBinding{}, a.refusedIf(r, err)
	}
	if token == "" {
		return ClientBinding{Any: true}, nil
	}
	cl, err := a.Keys.Verify(token)
	if err != nil { // not reached: scene verified it
		return ClientBinding{}, a.refusedIf(r, tokenRefused(err))
	}
	if !tokenAllows(cl.Rights(), a.Realm, ns, scene, false) {
		return ClientBinding{User: cl.Subject, Any: true}, nil // allowed by the scene's settings
	}
	presence := a.Realm + "/s/" + ns + "/" + scene + "/" + topic.MsgPresence + "/"
	b := ClientBinding{User: cl.Subject, Any: coversAll(cl.Rights().Publ, presence+"+/+")}
	if !b.Any {
		for _, f := range cl.Rights().Publ {
			if rest, ok := strings.CutPrefix(f, presence); ok {
				if id, _, _ := strings.Cut(rest, "/"); id != "" && !strings.ContainsAny(id, "+#") && !slices.Contains(b.IDs, id) {
					b.IDs = append(b.IDs, id)
				}
			}
		}
	}
	return b, nil
}

// refusedIf records err as a refusal (Refused) when it is one, unless the
// request is a probe (auth.Probe): a listing leaves out what the caller
// may not read, and refuses nothing.
func (a *Access) refusedIf(r *http.Request, err error) error {
	if auth.IsProbe(r.Context()) {
		return err
	}
	if errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrForbidden) {
		return a.Refused(r, err)
	}
	return err
}

// credentials returns why tok is not a valid token of this server, or nil
// (also for no token). Its callers return before it with Insecure.
func (a *Access) credentials(tok string) error {
	if tok == "" {
		return nil
	}
	if _, err := a.Keys.Verify(tok); err != nil {
		return tokenRefused(err)
	}
	return nil
}

// scene returns why a request presenting tok (or none, for "") may not
// read (write=false) or write scene ns/scene, or nil; see Scene. Its
// callers return before it with Insecure.
func (a *Access) scene(r *http.Request, tok, ns, scene string, write bool) error {
	user, anonymous, service := "", true, ""
	if tok != "" {
		cl, err := a.Keys.Verify(tok)
		if err != nil {
			return tokenRefused(err)
		}
		if tokenAllows(cl.Rights(), a.Realm, ns, scene, write) {
			return nil
		}
		if cl.Rights().IsService() {
			// A node's token is no user's sign-in (as at the token
			// endpoint): it reads what anyone may, and no more.
			service = cl.Subject
		} else {
			user, anonymous = cl.Subject, auth.IsAnonymous(cl.Subject)
		}
	}
	st, err := a.Settings.Get(r.Context(), ns, scene)
	if err != nil {
		return wrapCause(ErrUnavailable, err) // 503, no refusal
	}
	role, err := st.RoleFor(user, anonymous)
	switch {
	case err == nil && (!write || role == auth.RoleEditor):
		return nil
	case service != "":
		verb := "read"
		if write {
			verb = "write"
		}
		return insufficientScope("the token of user " + quote(service) + " is a service's (--role sfu or cluster), not a user's sign-in: it may not " + verb + " scene " + ns + "/" + scene)
	case anonymous && user == "":
		what := "reading"
		if write {
			what = "writing"
		}
		return wrap(ErrUnauthenticated, what+" scene "+ns+"/"+scene+" needs a token (Bearer header or mqtt_token cookie)")
	case write:
		return insufficientScope("user " + user + " may not write scene " + ns + "/" + scene)
	}
	return insufficientScope("user " + user + " may not read scene " + ns + "/" + scene)
}

// tokenAllows reports whether rights cover reading (subscribing to the
// whole scene) or writing (publishing any object message) scene ns/scene.
func tokenAllows(r auth.Rights, realm, ns, scene string, write bool) bool {
	if write {
		return coversAll(r.Publ, realm+"/s/"+ns+"/"+scene+"/o/+/+")
	}
	return r.CanSubscribe(topic.SceneFilter(realm, ns, scene))
}

func coversAll(filters []string, f string) bool {
	for _, p := range filters {
		if topic.Covers(p, f) {
			return true
		}
	}
	return false
}

type wrapped struct {
	kind  error
	code  string // the error code of its challenge (challenge); "" for none
	msg   string
	cause error // may be nil
}

func (w wrapped) Error() string { return w.msg }
func (w wrapped) Unwrap() []error {
	if w.cause == nil {
		return []error{w.kind}
	}
	return []error{w.kind, w.cause}
}

func wrap(kind error, msg string) error { return wrapped{kind: kind, msg: msg} }

// wrapCode is wrap with the error code of the refusal's challenge.
func wrapCode(kind error, code, msg string) error { return wrapped{kind: kind, code: code, msg: msg} }

// tokenRefused is the refusal of a token that Keys.Verify refused with
// err: 401 with error="invalid_token" in its challenge.
func tokenRefused(err error) error {
	return wrapped{kind: ErrUnauthenticated, code: codeInvalidToken, msg: err.Error(), cause: err}
}

// insufficientScope is the refusal of a valid token without the rights
// to do what it asks: 403 with error="insufficient_scope" in its challenge.
func insufficientScope(msg string) error {
	return wrapped{kind: ErrForbidden, code: codeInsufficientScope, msg: msg}
}

// wrapCause is wrap with cause's text, keeping cause in the chain.
func wrapCause(kind, cause error) error { return wrapped{kind: kind, msg: cause.Error(), cause: cause} }

// WWWAuthenticate is the WWW-Authenticate header of the answer to this
// error (the Bearer challenge of RFC 6750 §3), or "" for an answer that
// has none: persist's handler and others that answer with another
// package's errors set it.
func (w wrapped) WWWAuthenticate() string { return challenge(w) }

// HTTPStatus is the status a handler answers with for this error.
func (w wrapped) HTTPStatus() int {
	switch {
	case errors.Is(w.kind, ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(w.kind, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(w.kind, ErrUnavailable):
		return http.StatusServiceUnavailable
	}
	return http.StatusForbidden
}
