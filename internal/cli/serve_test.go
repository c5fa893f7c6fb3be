package cli

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/ubiq"
)

func TestApplyConfigFile(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		args    []string
		want    map[string]string
		wantErr string
	}{
		{name: "file sets flags", file: `{"http-addr": ":80", "insecure": true, "max-payload": 2048}`,
			want: map[string]string{"http-addr": ":80", "insecure": "true", "max-payload": "2048"}},
		{name: "command line wins", file: `{"http-addr": ":80"}`, args: []string{"--http-addr", ":81"},
			want: map[string]string{"http-addr": ":81"}},
		{name: "empty string turns a listener off", file: `{"nats-addr": ""}`, want: map[string]string{"nats-addr": ""}},
		{name: "unknown key", file: `{"htp-addr": ":80"}`, wantErr: `unknown setting "htp-addr"`},
		{name: "bad value", file: `{"max-payload": "lots"}`, wantErr: `setting "max-payload"`},
		{name: "not JSON", file: `http-addr = ":80"`, wantErr: "invalid character"},
		{name: "nested value", file: `{"http-addr": {"port": 80}}`, wantErr: "unsupported type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "xrealm.json")
			os.WriteFile(path, []byte(tt.file), 0o600)
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.String("http-addr", ":8080", "")
			fs.String("nats-addr", ":4222", "")
			fs.Bool("insecure", false, "")
			fs.Int("max-payload", 1, "")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := applyConfigFile(fs, path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if got := fs.Lookup(k).Value.String(); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
	if err := applyConfigFile(flag.NewFlagSet("x", flag.ContinueOnError), "/nonexistent/xrealm.json"); err == nil {
		t.Error("missing file accepted")
	}
}

func TestMainUsage(t *testing.T) {
	var out strings.Builder
	if code := Main([]string{"nope"}, &out); code != 2 || !strings.Contains(out.String(), `unknown command "nope"`) {
		t.Fatalf("code %d, output %q", code, out.String())
	}
	out.Reset()
	if code := Main([]string{"token", "--user", "u", "--scene", "bad"}, &out); code != 1 || !strings.Contains(out.String(), "namespace/scene") {
		t.Fatalf("code %d, output %q", code, out.String())
	}
}

func TestParseICEServers(t *testing.T) {
	tests := []struct {
		in      string
		want    []ubiq.ICEServer
		wantErr string
	}{
		{"none", []ubiq.ICEServer{}, ""},
		{"stun:a.example:3478", []ubiq.ICEServer{{URI: "stun:a.example:3478"}}, ""},
		{"stun:a.example, turn:b.example:3478?transport=udp", []ubiq.ICEServer{{URI: "stun:a.example"}, {URI: "turn:b.example:3478?transport=udp"}}, ""},
		{`[{"uri":"turns:t.example:5349","username":"u","password":"p"}]`, []ubiq.ICEServer{{URI: "turns:t.example:5349", Username: "u", Password: "p"}}, ""},
		{"http://a.example", nil, `ice server "http://a.example"`},
		{"stun:", nil, `ice server "stun:"`},
		{`[{"uri":"turn:x","user":"u"}]`, nil, `unknown field "user"`},
		{`[{"uri":"ftp:x"}]`, nil, `ice server "ftp:x"`},
	}
	for _, tt := range tests {
		got, err := parseICEServers(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseICEServers(%q): err %v, want containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseICEServers(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}
