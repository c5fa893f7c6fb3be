package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xrealm/xrealm/topic"
)

// SettingsBucket is the JetStream KV bucket that holds scene settings.
const SettingsBucket = "XREALM_SCENES"

// SettingsStore keeps scene settings in JetStream KV.
type SettingsStore struct {
	kv jetstream.KeyValue
}

// OpenSettings creates or opens the settings bucket.
func OpenSettings(ctx context.Context, js jetstream.JetStream, replicas int) (*SettingsStore, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: SettingsBucket, Replicas: replicas, History: 1,
		Description: "xrealm scene access settings",
	})
	if err != nil {
		return nil, fmt.Errorf("open scene settings bucket: %w", err)
	}
	return &SettingsStore{kv: kv}, nil
}

// settingsKey is the KV key of a scene's settings. The names must pass
// topic.ValidSceneName, which the HTTP routes check before they get here.
func settingsKey(ns, scene string) (string, error) {
	if err := topic.ValidSceneName("namespace", ns); err != nil {
		return "", err
	}
	if err := topic.ValidSceneName("scene", scene); err != nil {
		return "", err
	}
	return ns + "." + scene, nil
}

// Get returns the settings of ns/scene, or DefaultSettings when none are
// stored.
func (s *SettingsStore) Get(ctx context.Context, ns, scene string) (Settings, error) {
	key, err := settingsKey(ns, scene)
	if err != nil {
		return Settings{}, err
	}
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return DefaultSettings(ns, scene), nil
	}
	if err != nil {
		return Settings{}, fmt.Errorf("read settings of %s/%s: %w", ns, scene, err)
	}
	var st Settings
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return Settings{}, fmt.Errorf("decode settings of %s/%s: %w", ns, scene, err)
	}
	st.Namespace, st.Scene = ns, scene
	return st, nil
}

// Put stores the settings of a scene.
func (s *SettingsStore) Put(ctx context.Context, st Settings) error {
	key, err := settingsKey(st.Namespace, st.Scene)
	if err != nil {
		return err
	}
	if st.Interest != nil {
		if err := st.Interest.Validate(); err != nil {
			return fmt.Errorf("settings of %s/%s: %w", st.Namespace, st.Scene, err)
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("store settings of %s/%s: %w", st.Namespace, st.Scene, err)
	}
	return nil
}

// List returns the stored settings of every configured scene.
func (s *SettingsStore) List(ctx context.Context) ([]Settings, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list scene settings: %w", err)
	}
	var out []Settings
	for k := range lister.Keys() {
		ns, scene, ok := strings.Cut(k, ".")
		if !ok {
			continue
		}
		st, err := s.Get(ctx, ns, scene)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}
