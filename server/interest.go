package server

import (
	"context"
	"time"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/interest"
)

// sceneInterest returns the interest policy a scene's settings ask for.
func (s *Server) sceneInterest(ns, scene string) (interest.Policy, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := s.Settings.Get(ctx, ns, scene)
	if err != nil {
		s.log.Warn("scene settings unreadable; no interest management", "scene", ns+"/"+scene, "err", err)
		return nil, 0
	}
	if st.Interest == nil {
		return nil, 0
	}
	return policyOf(*st.Interest)
}

func policyOf(in auth.InterestSettings) (interest.Policy, time.Duration) {
	rate := in.RateHz
	if rate <= 0 {
		rate = 5
	}
	period := time.Duration(float64(time.Second) / rate)
	switch in.Mode {
	case "knn":
		return interest.NewKNNPolicy(interest.KNNConfig{K: in.K, Hysteresis: time.Duration(in.HysteresisMs) * time.Millisecond}), period
	case "grid":
		size, radius := in.CellSize, in.Radius
		if size <= 0 {
			size = 20
		}
		if radius <= 0 {
			radius = 1
		}
		return interest.NewGridPolicy(interest.Grid{Size: size}, radius), period
	}
	return nil, 0
}
