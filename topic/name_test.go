package topic

import (
	"strings"
	"testing"
)

func TestValidSceneName(t *testing.T) {
	tests := []struct {
		name    string
		wantErr string // "" = valid; else a part of the error
	}{
		{"lab", ""},
		{"Alice_2-room=b", ""},
		{"0", ""},
		{"", "scene name is empty"},
		{"+", `'+' is not allowed (an MQTT wildcard`},
		{"a#", `'#' is not allowed (an MQTT wildcard`},
		{"a.b", `'.' is not allowed`},
		{"a/b", `'/' is not allowed (it separates`},
		{"a b", `' ' is not allowed`},
		{"*", `'*' is not allowed`},
		{">", `'>' is not allowed`},
		{"é", `'é' is not allowed`},
		{"a\x00", `'\x00' is not allowed`},
		{"a%2F", `'%' is not allowed`},
	}
	for _, tt := range tests {
		err := ValidSceneName("scene", tt.name)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("ValidSceneName(%q) = %v, want nil", tt.name, err)
		case tt.wantErr != "" && err == nil:
			t.Errorf("ValidSceneName(%q) = nil, want an error", tt.name)
		case err != nil && !strings.Contains(err.Error(), tt.wantErr):
			t.Errorf("ValidSceneName(%q) = %v, want it to say %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestParseSceneName(t *testing.T) {
	tests := []struct {
		in, ns, scene string
		wantErr       string
	}{
		{"alice/lab", "alice", "lab", ""},
		{"alice", "", "", "want namespace/scene"},
		{"alice/+", "", "", `scene name "+"`},
		{"+/+", "", "", `namespace name "+"`},
		{"a/#", "", "", `scene name "#"`},
		{"a/b/c", "", "", `scene name "b/c"`},
		{"/lab", "", "", "namespace name is empty"},
		{"alice/", "", "", "scene name is empty"},
		{"alice/a.b", "", "", `'.' is not allowed`},
	}
	for _, tt := range tests {
		ns, scene, err := ParseSceneName(tt.in)
		if tt.wantErr == "" {
			if err != nil || ns != tt.ns || scene != tt.scene {
				t.Errorf("ParseSceneName(%q) = %q, %q, %v; want %q, %q", tt.in, ns, scene, err, tt.ns, tt.scene)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.in) {
			t.Errorf("ParseSceneName(%q) = %v, want an error naming %q and saying %q", tt.in, err, tt.in, tt.wantErr)
		}
	}
}

func TestValidLevel(t *testing.T) {
	for _, ok := range []string{"realm", "cam_1", "a.b", "é"} {
		if err := ValidLevel("x", ok); err != nil {
			t.Errorf("ValidLevel(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "+", "a#", "a/b", "a\fb", "a\tb", "\x00", "a\x7f", "a\u0085b"} {
		if err := ValidLevel("x", bad); err == nil {
			t.Errorf("ValidLevel(%q) = nil, want an error", bad)
		}
	}
}
