package cli

import (
	"context"
	"strings"
	"testing"
)

// Bad flags of xrealm cluster remove-peer are refused before it reaches
// for the bus (nothing listens on --bus here), naming the flag and value.
func TestClusterRemovePeerRefusesBadFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--timeout", "0", "n3"}, "--timeout 0s: how long to wait for the answer must be positive"},
		{[]string{"--timeout", "-5s", "n3"}, "--timeout -5s"},
		{[]string{"n3", "n4"}, `want one node name after the flags, got ["n3" "n4"]`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := append([]string{"remove-peer", "--bus", "nats://127.0.0.1:1"}, tt.args...)
			err := runCluster(context.Background(), args)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("cluster %s: %v, want an error containing %q", strings.Join(args, " "), err, tt.wantErr)
			}
		})
	}
}
