package auth

import (
	"errors"
	"fmt"
	"slices"
)

// PublicNamespace is the namespace whose scenes anyone may read, so that a
// fresh server is usable at once.
const PublicNamespace = "public"

// Settings are the access settings of one scene.
type Settings struct {
	Namespace      string   `json:"namespace"`
	Scene          string   `json:"scene"`
	Editors        []string `json:"editors"`
	Viewers        []string `json:"viewers"`
	PublicRead     bool     `json:"public_read"`
	PublicWrite    bool     `json:"public_write"`
	AnonymousUsers bool     `json:"anonymous_users"`
	// Interest, when set, makes user (pose) messages reach only the
	// subscribers interested in their sender.
	Interest *InterestSettings `json:"interest,omitempty"`
}

// InterestSettings configure interest management of a scene.
type InterestSettings struct {
	Mode         string  `json:"mode"`                    // "knn" or "grid"
	K            int     `json:"k,omitempty"`             // knn: set size (default 20)
	RateHz       float64 `json:"rate_hz,omitempty"`       // recompute rate (default 5)
	HysteresisMs int     `json:"hysteresis_ms,omitempty"` // knn: removal hysteresis (default 500)
	CellSize     float64 `json:"cell_size,omitempty"`     // grid: hex size in metres (default 20)
	Radius       int     `json:"radius,omitempty"`        // grid: observed rings (default 1)
}

// Validate checks the settings.
func (i *InterestSettings) Validate() error {
	switch {
	case i.Mode != "knn" && i.Mode != "grid":
		return fmt.Errorf("interest mode %q: want knn or grid", i.Mode)
	case i.K < 0, i.RateHz < 0, i.HysteresisMs < 0, i.CellSize < 0, i.Radius < 0:
		return errors.New("interest settings must not be negative")
	case i.RateHz > 100:
		return fmt.Errorf("interest rate %g Hz is above 100 Hz", i.RateHz)
	case i.RateHz != 0 && i.RateHz < 0.1:
		return fmt.Errorf("interest rate %g Hz is below 0.1 Hz", i.RateHz)
	case i.HysteresisMs > 3_600_000:
		return fmt.Errorf("interest hysteresis %d ms is above an hour", i.HysteresisMs)
	}
	return nil
}

// DefaultSettings returns the settings of a scene nobody has configured:
// readable by anyone, anonymous users allowed, writable by the namespace's
// owner (the user whose name is the namespace).
func DefaultSettings(ns, scene string) Settings {
	return Settings{Namespace: ns, Scene: scene, PublicRead: true, AnonymousUsers: true}
}

// Errors of RoleFor.
var (
	ErrAnonymousNotAllowed = errors.New("anonymous users are not allowed in this scene")
	ErrNotAllowed          = errors.New("user may not read this scene")
)

// RoleFor returns the role user gets in the scene. Anonymous users get at
// most viewer. The namespace's owner and listed editors are editors; with
// public_write everyone signed in is.
func (s Settings) RoleFor(user string, anonymous bool) (Role, error) {
	if anonymous {
		if !s.AnonymousUsers || !s.PublicRead {
			return RoleNone, fmt.Errorf("scene %s/%s: %w", s.Namespace, s.Scene, ErrAnonymousNotAllowed)
		}
		return RoleViewer, nil
	}
	switch {
	case user == s.Namespace, slices.Contains(s.Editors, user), s.PublicWrite:
		return RoleEditor, nil
	case s.PublicRead, slices.Contains(s.Viewers, user):
		return RoleViewer, nil
	}
	return RoleNone, fmt.Errorf("scene %s/%s, user %q: %w", s.Namespace, s.Scene, user, ErrNotAllowed)
}
