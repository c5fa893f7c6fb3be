package cli

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/topic"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    auth.Rights // when wantErr is ""
		wantErr string
	}{
		{"editor", []string{"--user", "alice", "--scene", "alice/lab", "--role", "editor"},
			auth.SceneRights("realm", "alice", "lab", auth.RoleEditor, ""), ""},
		{"viewer with client id", []string{"--user", "bob", "--scene", "alice/lab", "--userclient", "cam_1"},
			auth.SceneRights("realm", "alice", "lab", auth.RoleViewer, "cam_1"), ""},
		{"sfu needs no scene", []string{"--user", "sfu-2", "--role", "sfu"}, auth.ServiceRights("sfu"), ""},
		{"every scene", []string{"--user", "eve", "--scene", "+/+", "--role", "editor"}, auth.Rights{}, `namespace name "+": '+' is not allowed (an MQTT wildcard`},
		{"every scene of a namespace", []string{"--user", "eve", "--scene", "alice/+", "--role", "editor"}, auth.Rights{}, `scene name "+"`},
		{"hash", []string{"--user", "eve", "--scene", "a/#"}, auth.Rights{}, `scene name "#"`},
		{"three levels", []string{"--user", "eve", "--scene", "a/b/c"}, auth.Rights{}, `scene name "b/c"`},
		{"dot", []string{"--user", "eve", "--scene", "a/b.c"}, auth.Rights{}, `'.' is not allowed`},
		{"no namespace", []string{"--user", "eve", "--scene", "lab"}, auth.Rights{}, "want namespace/scene"},
		{"no scene", []string{"--user", "eve"}, auth.Rights{}, "--scene is required"},
		{"wildcard realm", []string{"--user", "eve", "--scene", "a/b", "--realm", "+"}, auth.Rights{}, `--realm: realm "+"`},
		{"realm the server refuses", []string{"--user", "eve", "--scene", "a/b", "--realm", "a.b"}, auth.Rights{}, `--realm: realm "a.b" contains '.'`},
		{"sfu with a scene", []string{"--user", "sfu-2", "--role", "sfu", "--scene", "a/b"}, auth.Rights{}, "--scene does not apply to --role sfu"},
		{"cluster with a realm", []string{"--user", "ops", "--role", "cluster", "--realm", "r"}, auth.Rights{}, "--realm does not apply to --role cluster"},
		{"wildcard userclient", []string{"--user", "eve", "--scene", "a/b", "--userclient", "#"}, auth.Rights{}, `--userclient "#"`},
		{"no user", []string{"--scene", "a/b"}, auth.Rights{}, "--user is required"},
		{"the longest user name", []string{"--user", strings.Repeat("u", auth.MaxUserLen), "--scene", "a/b"},
			auth.SceneRights("realm", "a", "b", auth.RoleViewer, ""), ""},
		// parseToken refuses it (auth.MaxUserLen); the error clips it (topic.Clip: 100 bytes).
		{"a user name too long", []string{"--user", strings.Repeat("u", 9<<10), "--scene", "a/b"}, auth.Rights{},
			`--user "` + strings.Repeat("u", 100) + `"... of 9216 bytes is longer than the longest, 256`},
		// Taken and ignored: an editor publishes as any client.
		{"editor with a client id", []string{"--user", "alice", "--scene", "alice/lab", "--role", "editor", "--userclient", "cam_1"}, auth.Rights{}, "--userclient limits a viewer's own topics"},
		// Anyone may ask the token endpoint for the name anonymous-bob.
		{"anonymous user", []string{"--user", "anonymous-bob", "--scene", "a/b", "--role", "editor"}, auth.Rights{}, `--user "anonymous-bob": names starting "anonymous-"`},
		{"bad role", []string{"--user", "eve", "--scene", "a/b", "--role", "admin"}, auth.Rights{}, "--role must be"},
		{"stray argument", []string{"--user", "eve", "--scene", "a/b", "extra"}, auth.Rights{}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := parseToken(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tt.wantErr)
				}
				if ue := (*usageError)(nil); !errors.As(err, &ue) {
					t.Errorf("%v is not a usage error (exit code 2)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(req.rights, tt.want) {
				t.Fatalf("rights %+v, want %+v", req.rights, tt.want)
			}
			for _, f := range append(append(append([]string(nil), req.rights.Publ...), req.rights.Subs...), req.rights.Evts...) {
				if err := topic.ValidFilter(f); err != nil {
					t.Fatalf("right %q: %v", f, err)
				}
			}
		})
	}
}
