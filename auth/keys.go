package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/xrealm/xrealm/topic"
)

// KeyFile is the name of the signing key inside the data directory's keys/.
const KeyFile = "jwt-es256.pem"

// Keys signs and verifies tokens.
type Keys struct {
	priv *ecdsa.PrivateKey
}

// LoadOrCreateKeys reads the signing key from dataDir/keys, generating and
// saving a new one (mode 0600) when there is none.
func LoadOrCreateKeys(dataDir string) (*Keys, error) {
	k, err := LoadKeys(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		dir := filepath.Join(dataDir, "keys")
		return createKeys(dir, filepath.Join(dir, KeyFile))
	}
	return k, err
}

// LoadKeys reads the signing key from dataDir/keys. The error wraps
// os.ErrNotExist when there is none.
func LoadKeys(dataDir string) (*Keys, error) {
	path := filepath.Join(dataDir, "keys", KeyFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read signing key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("signing key %s: no PEM block", path)
	}
	k, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	if k.Curve != elliptic.P256() {
		return nil, fmt.Errorf("signing key %s: curve %s, want P-256 (tokens are ES256)", path, k.Curve.Params().Name)
	}
	return &Keys{priv: k}, nil
}

func createKeys(dir, path string) (*Keys, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encode signing key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create key directory: %w", err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	// Write then link, so that two processes starting at once agree on one
	// key: the first link wins, and the others read its key. Each writes a
	// file of its own (CreateTemp, mode 0600): with one shared name, a
	// process could truncate and rewrite the file another had just linked
	// into place and read back its own key from, and the two would sign
	// with different keys.
	f, err := os.CreateTemp(dir, KeyFile+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write signing key: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(pemBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write signing key %s: %w", tmp, err)
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("save signing key %s: %w", path, err)
	}
	return LoadOrCreateKeys(filepath.Dir(dir))
}

// Claims are the claims of an xrealm token.
type Claims struct {
	jwt.RegisteredClaims
	Publ []string `json:"publ"`
	Subs []string `json:"subs"`
	Evts []string `json:"evts,omitempty"`
}

// Rights returns the topic rights the claims carry.
func (c *Claims) Rights() Rights { return Rights{Publ: c.Publ, Subs: c.Subs, Evts: c.Evts} }

// MaxTokenLen is the longest token, in bytes, that Verify reads: a longer
// one is refused before it is parsed, so that whatever a client sends as a
// token (an HTTP header, a cookie, an MQTT password) costs a bounded
// amount of work. Issue signs none longer. A scene token is a few KiB at
// most (names of at most 128 bytes, a user name and a userclient of at
// most 256).
const MaxTokenLen = 16 << 10

// MaxUserLen is the longest user name, in bytes, that Issue signs a token
// for (its sub), as the token endpoint limits a userclient: the name is
// in the token in base64, 4/3 of its length, and one of a few KiB would
// take a scene token over MaxTokenLen.
const MaxUserLen = 256

// Issue signs a token for user with the given rights, valid for ttl. It
// refuses a user name longer than MaxUserLen, and rights that would make
// a token longer than MaxTokenLen.
func (k *Keys) Issue(user string, r Rights, ttl time.Duration) (string, error) {
	if user == "" {
		return "", errors.New("issue token: empty user name")
	}
	if len(user) > MaxUserLen {
		return "", fmt.Errorf("issue token: user name %s of %d bytes is longer than the longest, %d", topic.Clip(user), len(user), MaxUserLen)
	}
	now := time.Now()
	c := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   user,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			Issuer:    "xrealm",
		},
		Publ: nonNil(r.Publ),
		Subs: nonNil(r.Subs),
		Evts: r.Evts,
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodES256, &c).SignedString(k.priv)
	if err != nil {
		return "", fmt.Errorf("sign token for %q: %w", user, err)
	}
	if len(s) > MaxTokenLen {
		return "", fmt.Errorf("sign token for %q: its %d bytes are more than a token may have (%d): its rights hold %d topic filters of %d bytes in all", user, len(s), MaxTokenLen, len(r.Publ)+len(r.Subs)+len(r.Evts), filtersLen(r))
	}
	return s, nil
}

func filtersLen(r Rights) int {
	n := 0
	for _, fs := range [][]string{r.Publ, r.Subs, r.Evts} {
		for _, f := range fs {
			n += len(f)
		}
	}
	return n
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// tokenAlg is the one algorithm of xrealm's tokens, which Issue signs
// with and Verify accepts.
const tokenAlg = "ES256"

// ErrInvalidToken is wrapped by every error of Keys.Verify: the token
// itself is refused (malformed, expired, in another algorithm, signed with
// another key), whatever it is presented for.
var ErrInvalidToken = errors.New("invalid token")

// Verify checks the token's signature and expiry and returns its claims.
// A token without exp, or longer than MaxTokenLen, is refused. Errors wrap
// ErrInvalidToken.
func (k *Keys) Verify(token string) (*Claims, error) {
	if len(token) > MaxTokenLen {
		return nil, fmt.Errorf("%w: it has %d bytes, more than a token of this server may have (%d)", ErrInvalidToken, len(token), MaxTokenLen)
	}
	var c Claims
	t, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		return &k.priv.PublicKey, nil
	}, jwt.WithValidMethods([]string{tokenAlg}), jwt.WithExpirationRequired())
	if err != nil && t != nil && t.Method != nil && t.Method.Alg() != tokenAlg {
		// the header names an algorithm jwt knows (ParseUnverified
		// refuses others), not the one this server signs with
		return nil, fmt.Errorf("%w: the token's algorithm %q is not accepted: this server takes %s tokens only (from POST /user/v2/mqtt_auth or xrealm token)", ErrInvalidToken, t.Method.Alg(), tokenAlg)
	}
	if errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		return nil, fmt.Errorf("%w: %w (it was signed with another key than this server's: a token from `xrealm token` must name the server's data directory with --data)", ErrInvalidToken, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if c.Subject == "" {
		return nil, fmt.Errorf("%w: no sub claim", ErrInvalidToken)
	}
	return &c, nil
}
