package bus

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestSplitHostPortMalformed: a listener address that is not host:port
// with a port from 0 to 65535 is an error naming the listener and the
// address.
func TestSplitHostPortMalformed(t *testing.T) {
	for _, addr := range []string{"", "host", "host:", "host:abc", "host:-1", "host:65536", ":99999999999999999999", "[::1", "[::1]", "a:b:c", "host:8 0", "host:0x50"} {
		h, p, err := splitHostPort(addr, "cluster")
		if err == nil {
			t.Errorf("splitHostPort(%q) = %q, %d; want an error", addr, h, p)
			continue
		}
		if !strings.Contains(err.Error(), "cluster address") || !strings.Contains(err.Error(), `"`+addr+`"`) {
			t.Errorf("splitHostPort(%q): error %q does not name the listener and address", addr, err)
		}
	}
	for addr, want := range map[string]int{":4222": 4222, "127.0.0.1:0": server.RANDOM_PORT, "[::1]:65535": 65535} {
		if _, p, err := splitHostPort(addr, "cluster"); err != nil || p != want {
			t.Errorf("splitHostPort(%q) = port %d, %v; want %d", addr, p, err, want)
		}
	}
}
