package bus

import (
	"crypto/subtle"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/topic"
)

// TokenVerifier checks an xrealm token; *auth.Keys is one.
type TokenVerifier interface {
	Verify(token string) (*auth.Claims, error)
}

// authenticator is NATS's pluggable client authentication for xrealm:
// internal services present the process secret; everyone else presents an
// xrealm token as auth token or password, with the user name equal to sub.
type authenticator struct {
	secret string
	// sysSecret admits an in-process connection to NATS's system
	// account (Bus.ConnectSystem); sys returns that account.
	sysSecret string
	sys       func() *server.Account
	verify    TokenVerifier
	log       *slog.Logger
	onDeny    func()
	denials   *auth.DenyLog // logs each refusal, a bounded number of lines
}

func (a *authenticator) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o.Token != "" && subtle.ConstantTimeCompare([]byte(o.Token), []byte(a.secret)) == 1 {
		c.RegisterUser(&server.User{Username: "xrealm-internal"})
		return true
	}
	if o.Token != "" && a.sysSecret != "" && subtle.ConstantTimeCompare([]byte(o.Token), []byte(a.sysSecret)) == 1 {
		if acc := a.sys(); acc != nil {
			c.RegisterUser(&server.User{Username: "xrealm-system", Account: acc})
			return true
		}
	}
	deny := func(reason string) bool {
		a.denials.Deny(a.log, "NATS client refused", "remote", c.RemoteAddress(), "user", o.Username, "reason", reason)
		if a.onDeny != nil {
			a.onDeny()
		}
		return false
	}
	if a.verify == nil {
		return deny("no token verifier configured")
	}
	tok := o.Token
	if tok == "" {
		tok = o.Password
	}
	if tok == "" {
		return deny("no token")
	}
	cl, err := a.verify.Verify(tok)
	if err != nil {
		return deny(err.Error())
	}
	if o.Username != "" && o.Username != cl.Subject {
		return deny("user name " + o.Username + " does not match token sub " + cl.Subject)
	}
	c.RegisterUser(&server.User{
		Username:           cl.Subject,
		Permissions:        Permissions(cl.Rights()),
		ConnectionDeadline: cl.ExpiresAt.Time,
	})
	a.log.Debug("NATS client authenticated", "user", cl.Subject, "expires", cl.ExpiresAt.Time.Format(time.RFC3339))
	return true
}

// Permissions maps token rights to NATS permissions. Event-only rights are
// not granted over NATS: NATS permissions cannot look at payloads.
//
// Only a service (rights that subscribe to auth.Inboxes) may answer the
// requests it receives, one reply each. A scene's users may not: the front
// ends publish a scene's object messages to JetStream as requests, whose
// reply subject everyone subscribed to the scene receives, and a user's
// answer could arrive before the stream's and forge its acknowledgement
// (a success for a message not stored, or an error that fails the
// sender's publish).
func Permissions(r auth.Rights) *server.Permissions {
	p := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{}},
		Subscribe: &server.SubjectPermission{Allow: []string{}},
	}
	if r.CanSubscribe(auth.Inboxes) {
		p.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	}
	for _, f := range r.Publ {
		p.Publish.Allow = append(p.Publish.Allow, topic.ToSubject(f))
	}
	for _, f := range r.Subs {
		p.Subscribe.Allow = append(p.Subscribe.Allow, topic.ToSubject(f))
	}
	return p
}
