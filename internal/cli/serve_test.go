package cli

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testnet"
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
		{name: "duration", file: `{"write-linger": "5ms"}`, want: map[string]string{"write-linger": "5ms"}},
		{name: "bad value", file: `{"max-payload": "lots"}`, wantErr: `setting "max-payload": "lots" is not valid; want a whole number, e.g. 4096 (parse error)`},
		{name: "fraction for a whole number", file: `{"max-payload": 1.5}`, wantErr: `setting "max-payload": 1.5 is not valid; want a whole number`},
		{name: "number for a duration", file: `{"write-linger": 10}`, wantErr: `setting "write-linger": 10 is not valid; want a duration string with a unit, e.g. "10ms"`},
		{name: "bad duration", file: `{"write-linger": "10 ms"}`, wantErr: `setting "write-linger": "10 ms" is not valid; want a duration string`},
		{name: "bad boolean", file: `{"insecure": "yes"}`, wantErr: `setting "insecure": "yes" is not valid; want true or false`},
		{name: "not JSON", file: `http-addr = ":80"`, wantErr: "invalid character"},
		{name: "nested value", file: `{"http-addr": {"port": 80}}`, wantErr: `setting "http-addr": {"port":80} is not a string, number or boolean; want a string`},
		{name: "list for a number", file: `{"max-payload": [1]}`, wantErr: `setting "max-payload": [1] is not a string, number or boolean; want a whole number`},
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
			fs.Duration("write-linger", time.Millisecond, "")
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
	// A bad value is a usage error too (TestExitCodes).
	if code := Main([]string{"token", "--user", "u", "--scene", "bad"}, &out); code != 2 || !strings.Contains(out.String(), "namespace/scene") {
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

// Values that mean nothing for a flag are refused, naming the flag and the
// value, rather than replaced by a default; 0 where a flag documents it is
// taken (checked by server.Config's validation).
func TestServeRefusesMeaninglessValues(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--token-ttl", "-1h"}, "--token-ttl -1h0m0s: the lifetime of the tokens /user/v2/mqtt_auth issues must be positive"},
		{[]string{"--token-ttl", "0"}, "--token-ttl 0s"},
		{[]string{"--queue-frames", "-3"}, "--queue-frames -3: a connection's outgoing queue must hold at least 1 message"},
		{[]string{"--queue-frames", "0"}, "--queue-frames 0"},
		{[]string{"--replicas", "-1"}, "--replicas -1: must be at least 1"},
		{[]string{"--write-linger", "-5ms"}, "--write-linger -5ms must not be negative"},
		{[]string{"--ubiq-write-linger", "-1ms"}, "--ubiq-write-linger -1ms must not be negative"},
		{[]string{"--write-budget", "NaN"}, "--write-budget NaN is not a number"},
		{[]string{"--max-payload", "0"}, "--max-payload 0: the largest message must be positive"},
		{[]string{"--log-level", "loud"}, `--log-level "loud": want debug, info, warn or error`},
		{[]string{"--log-format", "xml"}, `--log-format "xml": want text or json`},
		// A route without its scheme is a URL of scheme host2 and no host,
		// one NATS cannot parse it takes as none: the node waited for its
		// cluster for ever (or NATS met a nil URL).
		{[]string{"--cluster-name", "xr", "--name", "n1", "--routes", "host2:6222"}, `--routes: "host2:6222" is not a route URL with a host and a port, e.g. nats-route://host2:6222`},
		{[]string{"--cluster-name", "xr", "--name", "n1", "--routes", "nats-route://host2:6222, nats-route://[::1"}, `--routes: "nats-route://[::1" is not a route URL`},
		{[]string{"--cluster-name", "xr", "--name", "n1", "--routes", "nats-route://host3"}, `--routes: "nats-route://host3" is not a route URL with a host and a port`},
		{[]string{"--cluster-name", "xr", "--name", "n1", "--routes", "nats-route://host3:0"}, `--routes: "nats-route://host3:0"`},
		// An address without a port, a port out of range, a site the SFU
		// refuses, half a certificate: each is refused before anything
		// starts, not as the server starts (exit 1, after other listeners
		// have opened), nor taken silently.
		{[]string{"--http-addr", "nonsense"}, `--http-addr "nonsense": want host:port`},
		{[]string{"--mqtt-addr", "127.0.0.1:99999"}, `--mqtt-addr "127.0.0.1:99999": port 99999`},
		{[]string{"--nats-addr", "127.0.0.1:"}, `--nats-addr "127.0.0.1:": want host:port`},
		{[]string{"--pprof-addr", "6060"}, `--pprof-addr "6060": want host:port`},
		{[]string{"--site", "a/b"}, `--site "a/b": want 1 to 64 of A-Z a-z 0-9 _ -`},
		{[]string{"--tls-cert", "cert.pem"}, "--tls-cert without --tls-key"},
		{[]string{"--tls-key", "key.pem"}, "--tls-key without --tls-cert"},
		{[]string{"--public-host", "https://example.org/"}, `--public-host "https://example.org/": want a host name`},
		{[]string{"--public-host", "example.org:8080"}, `--public-host "example.org:8080": want a host name`},
		// Accepted and ignored: only a cluster listens for routes.
		{[]string{"--cluster-addr", "127.0.0.1:7222"}, "--cluster-addr without --cluster-name"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			// Everything off but HTTP on a port of the system's choosing:
			// a server started by mistake ends with ctx.
			args := append([]string{"--data", t.TempDir(), "--http-addr", "127.0.0.1:0", "--https-addr", "", "--mqtt-addr", "",
				"--mqtts-addr", "", "--mqtt-ws-addr", "", "--nats-addr", "", "--nats-ws-addr", "", "--ubiq-addr", "", "--ubiq-wss-addr", "",
				"--log-level", "error"}, tt.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := runServe(ctx, args)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("serve %s: %v, want an error containing %q", strings.Join(tt.args, " "), err, tt.wantErr)
			}
			if ue := (*usageError)(nil); !errors.As(err, &ue) {
				t.Errorf("serve %s: %v is not a usage error (exit code 2)", strings.Join(tt.args, " "), err)
			}
		})
	}
}

// An empty site, on the command line or in a config file, is the SFU's
// "default" (sfu.Config): checkServeFlags does not refuse it (exit code
// 2). The node, its SFU included, starts and is healthy.
func TestServeAcceptsEmptySite(t *testing.T) {
	tests := []struct {
		name, config string
		args         []string
	}{
		{name: "flag", args: []string{"--site", ""}},
		{name: "config file", config: `{"site": ""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			addr := testnet.FreePorts(t, 1)[0]
			args := []string{"--data", dir, "--http-addr", addr, "--https-addr", "", "--mqtt-addr", "",
				"--mqtts-addr", "", "--mqtt-ws-addr", "", "--nats-addr", "", "--nats-ws-addr", "", "--ubiq-addr", "", "--ubiq-wss-addr", "",
				"--log-level", "error"}
			if tt.config != "" {
				path := filepath.Join(dir, "xrealm.json")
				if err := os.WriteFile(path, []byte(tt.config), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", path)
			}
			args = append(args, tt.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- runServe(ctx, args) }()
			for { // until the node, its SFU included, is up
				resp, err := http.Get("http://" + addr + "/healthz")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
					err = errors.New(resp.Status)
				}
				select {
				case err := <-done:
					t.Fatalf("serve %q: %v, want it to run", args, err)
				case <-ctx.Done():
					t.Fatalf("serve %q never answered: %v", args, err)
				case <-time.After(20 * time.Millisecond):
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("serve %q: %v", args, err)
			}
		})
	}
}
