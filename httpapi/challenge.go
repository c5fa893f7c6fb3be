package httpapi

import (
	"errors"
	"net/http"
	"strings"
)

// AuthRealm is the realm of the Bearer challenge (RFC 6750 §3) that every
// refusal for credentials carries in its WWW-Authenticate header.
const AuthRealm = "xrealm"

// The error codes of a Bearer challenge (RFC 6750 §3.1). A malformed
// Authorization header (Bearer with no token, two headers) has none: RFC
// 6750 gives it invalid_request with 400, and xrealm answers it with 401.
const (
	codeInvalidToken      = "invalid_token"      // a token that came and was refused
	codeInsufficientScope = "insufficient_scope" // a valid token without the rights
)

// maxDescription is the longest error_description of a challenge, in bytes.
const maxDescription = 120

// challenge returns the WWW-Authenticate header of the answer to err, or ""
// for an answer that has none. Every 401 (err wraps ErrUnauthenticated) has
// one: `Bearer realm="xrealm"` when no credentials came, only another
// scheme's, or a malformed Authorization header (Bearer with no token, two
// headers): RFC 6750 §3 asks for no error code for the first two, and its
// invalid_request goes with 400, not the 401 xrealm answers; the realm
// says what the server takes. It has error="invalid_token" and an
// error_description when a token came and was refused (expired, signed
// with another key, too long, malformed). A 403 whose err is a valid
// token's lack of rights has error="insufficient_scope".
func challenge(err error) string {
	var w wrapped
	code := ""
	if errors.As(err, &w) {
		code = w.code
	}
	switch {
	case errors.Is(err, ErrUnauthenticated):
	case errors.Is(err, ErrForbidden) && code == codeInsufficientScope:
	default:
		return ""
	}
	c := `Bearer realm="` + AuthRealm + `"`
	if code != "" {
		c += `, error="` + code + `", error_description="` + description(err.Error()) + `"`
	}
	return c
}

// description makes msg an error_description, which RFC 6750 §3 limits to
// printable ASCII without '"' and '\': those two become an apostrophe and
// '/', a tab or line break a space, and any other character '?'. A msg
// longer than maxDescription is cut at a space, with "..." after it.
func description(msg string) string {
	var b strings.Builder
	for _, r := range msg {
		switch {
		case r == '"':
			r = '\''
		case r == '\\':
			r = '/'
		case r == '\t' || r == '\n' || r == '\r':
			r = ' '
		case r < ' ' || r > '~':
			r = '?'
		}
		b.WriteRune(r)
	}
	s := b.String()
	if len(s) <= maxDescription {
		return s
	}
	s = s[:maxDescription-len("...")]
	if i := strings.LastIndexByte(s, ' '); i > maxDescription/2 {
		s = s[:i]
	}
	return s + "..."
}

// writeRefusal answers err with its status (statusOf), its text as the
// JSON error, and its challenge, if it has one, as the WWW-Authenticate
// header.
func writeRefusal(w http.ResponseWriter, err error) {
	if c := challenge(err); c != "" {
		w.Header().Set("WWW-Authenticate", c)
	}
	writeError(w, statusOf(err), err.Error())
}
