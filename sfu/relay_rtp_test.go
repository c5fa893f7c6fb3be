package sfu

import "testing"

// testRelaySlots is Config.RelaySlots of the nodes startCluster starts.
var testRelaySlots int

// The cluster tests again with relayed media as RTP on pre-negotiated
// transceivers instead of the SCTP media channel.
func TestRelayRTPSlots(t *testing.T) {
	testRelaySlots = 16
	defer func() { testRelaySlots = 0 }()
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"Cascade", TestCascade},
		{"ConcurrentJoins", TestConcurrentJoins},
	} {
		t.Run(tc.name, tc.test)
	}
}
