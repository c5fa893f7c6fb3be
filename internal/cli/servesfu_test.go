package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/internal/testnet"
	"github.com/xrealm/xrealm/sfu"
)

// TestServeMaxClients: `xrealm serve --max-clients N` gives the node's
// SFU its Config.MaxClients, which its heartbeat announces (default 500),
// as `xrealm sfu --max-clients` does; a value below 1 is refused with
// exit code 2 and an error naming the flag, on the command line or in a
// config file.
func TestServeMaxClients(t *testing.T) {
	for _, tc := range []struct {
		value   string
		refused bool
		want    int
	}{
		{value: "", want: sfu.DefaultMaxClients},
		{value: "3", want: 3},
		{value: "0", refused: true},
		{value: "-1", refused: true},
	} {
		t.Run(cmp.Or(tc.value, "default"), func(t *testing.T) {
			if tc.refused {
				var out bytes.Buffer
				args := []string{"serve", "--data", t.TempDir(), "--max-clients", tc.value}
				if rc := Main(args, &out); rc != 2 || !strings.Contains(out.String(), "--max-clients "+tc.value) {
					t.Fatalf("exit code %d, output %q; want 2 and an error naming --max-clients %s", rc, out.String(), tc.value)
				}
				dir := t.TempDir()
				config := filepath.Join(dir, "xrealm.json")
				if err := os.WriteFile(config, []byte(`{"max-clients": `+tc.value+`}`), 0o600); err != nil {
					t.Fatal(err)
				}
				out.Reset()
				if rc := Main([]string{"serve", "--data", dir, "--config", config}, &out); rc != 2 || !strings.Contains(out.String(), "--max-clients "+tc.value) {
					t.Fatalf("config file: exit code %d, output %q; want 2 and an error naming --max-clients %s", rc, out.String(), tc.value)
				}
				return
			}
			var args []string
			if tc.value != "" {
				args = append(args, "--max-clients", tc.value)
			}
			if info := serveHeartbeat(t, args...); info.MaxClients != tc.want {
				t.Fatalf("heartbeat %+v: max_clients %d, want %d", info, info.MaxClients, tc.want)
			}
		})
	}
}

// serveHeartbeat runs `xrealm serve` with args, named n1, with HTTP and
// NATS only, and returns its SFU node's first heartbeat; the server stops
// when the test ends.
func serveHeartbeat(t *testing.T, args ...string) sfu.NodeInfo {
	t.Helper()
	dir := t.TempDir()
	keys, err := auth.LoadOrCreateKeys(dir) // the server's, from its data directory
	if err != nil {
		t.Fatal(err)
	}
	ports := testnet.FreePorts(t, 2)
	cmd := startRunning(t, fmt.Sprintf("xrealm serve %v", args), func(ctx context.Context) error {
		return runServe(ctx, append([]string{"--data", dir, "--name", "n1", "--http-addr", ports[0], "--nats-addr", ports[1], "--https-addr", "",
			"--mqtt-addr", "", "--mqtts-addr", "", "--mqtt-ws-addr", "", "--nats-ws-addr", "", "--ubiq-addr", "", "--ubiq-wss-addr", "",
			"--log-level", "error"}, args...))
	})
	hbs := make(chan sfu.NodeInfo, 1)
	deadline := time.Now().Add(30 * time.Second)
	for { // until the bus answers
		nc, err := nats.Connect("nats://"+ports[1], nats.Token(issue(t, keys, "watch", auth.ServiceRights("sfu"))))
		if err == nil {
			t.Cleanup(nc.Close)
			_, err = nc.Subscribe("sfu.nodes", func(m *nats.Msg) {
				var info sfu.NodeInfo
				if json.Unmarshal(m.Data, &info) == nil && info.ID == "n1" && !info.Leaving {
					select {
					case hbs <- info:
					default:
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		select {
		case <-cmd.ended:
			cmd.endedEarly(t, "its bus answered")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("xrealm serve %v: its bus never answered: %v", args, err)
		}
	}
	select {
	case info := <-hbs:
		return info
	case <-cmd.ended:
		cmd.endedEarly(t, "its SFU node's first heartbeat")
	case <-time.After(20 * time.Second):
		t.Fatalf("no heartbeat of SFU node n1 (xrealm serve %v)", args)
	}
	return sfu.NodeInfo{}
}
