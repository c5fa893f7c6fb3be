package sfu

import "testing"

// testRelaySlots is Config.RelaySlots of the nodes startCluster starts
// (0: the default, RTP slots).
var testRelaySlots int

// The cluster tests again with relayed media on the SCTP media channel
// (Config.RelaySlots < 0) instead of the default RTP slots.
func TestRelaySCTP(t *testing.T) {
	testRelaySlots = -1
	defer func() { testRelaySlots = 0 }()
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"Cascade", TestCascade},
		{"ConcurrentJoins", TestConcurrentJoins},
		{"RelayNACKForwarded", TestRelayNACKForwarded},
	} {
		t.Run(tc.name, tc.test)
	}
}
