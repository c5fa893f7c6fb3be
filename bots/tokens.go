package bots

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/xrealm/xrealm/auth"
)

// TokenSource gives a bot the MQTT user name and password (token) it
// connects with.
type TokenSource interface {
	Token(ctx context.Context, id Identity) (user, password string, err error)
}

// HTTPTokens asks the server's POST /user/v2/mqtt_auth for a token, as
// ARENA clients do. Without Bearer the bot is an anonymous viewer, which
// the server allows in scenes open to anonymous users (the default).
type HTTPTokens struct {
	BaseURL string       // e.g. http://127.0.0.1:8080
	Bearer  string       // optional token to sign in with
	Client  *http.Client // nil: a client with a 15 s timeout
}

// Token requests a token for id's scene and user client.
func (h *HTTPTokens) Token(ctx context.Context, id Identity) (string, string, error) {
	form := url.Values{
		"username":   {id.User},
		"realm":      {id.Realm},
		"scene":      {id.Namespace + "/" + id.Scene},
		"userclient": {id.UserClient},
		"camid":      {id.ObjectID},
	}
	if h.Bearer == "" {
		form.Set("id_auth", "anonymous")
	}
	u := strings.TrimRight(h.BaseURL, "/") + "/user/v2/mqtt_auth"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return "", "", fmt.Errorf("token request to %s: %w", u, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if h.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+h.Bearer)
	}
	cl := h.Client
	if cl == nil {
		cl = &http.Client{Timeout: 15 * time.Second}
	}
	resp, err := cl.Do(req)
	if err != nil {
		return "", "", fmt.Errorf("token request to %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("token request to %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	var r struct {
		Username string `json:"username"`
		Token    string `json:"token"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Token == "" {
		return "", "", fmt.Errorf("token request to %s: unexpected answer %.200q", u, body)
	}
	return r.Username, r.Token, nil
}

// KeyTokens signs tokens directly with the server's keys, for a bench that
// owns the server's data directory.
type KeyTokens struct {
	Keys *auth.Keys
	Role auth.Role     // "" = viewer
	TTL  time.Duration // 0 = 1 h
}

// Token signs a token for id.User in id's scene, limited to its user
// client.
func (k *KeyTokens) Token(_ context.Context, id Identity) (string, string, error) {
	role, ttl := k.Role, k.TTL
	if role == "" {
		role = auth.RoleViewer
	}
	if ttl == 0 {
		ttl = time.Hour
	}
	tok, err := k.Keys.Issue(id.User, auth.SceneRights(id.Realm, id.Namespace, id.Scene, role, id.UserClient), ttl)
	if err != nil {
		return "", "", err
	}
	return id.User, tok, nil
}
