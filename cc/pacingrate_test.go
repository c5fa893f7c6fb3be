package cc

import (
	"fmt"
	"math"
	"math/big"
	"os/exec"
	"strings"
	"testing"
)

// TestCorePacingRate runs the BPF program's pacing arithmetic
// (hera_pacing_rate in bpf/hera_core.h), compiled for the host, against
// exact arithmetic: cwnd × mss × 1e6 / srtt, twice in slow start and 6/5
// after, at most the socket's maximum. cwnd × mss × 1e6 passes 64 bits for
// windows above about 2.8e8 segments of a loopback MSS; the rate must then
// saturate at the maximum, not wrap to a small one.
func TestCorePacingRate(t *testing.T) {
	bin := hostCore(t)
	const unlimited = math.MaxUint64
	tests := []struct {
		cwnd, mss uint32
		srtt      uint64
		slowStart uint32
		max       uint64
	}{
		{10, 1448, 20_000, 1, unlimited},
		{10, 1448, 20_000, 0, unlimited},
		{1000, 1448, 1, 0, unlimited},
		{3e8, 65483, 100, 0, unlimited}, // the product passes 64 bits
		{math.MaxUint32, 65535, 1, 1, unlimited},
		{math.MaxUint32, 65535, 1, 0, 1 << 40},
		{1000, 1448, 20_000, 0, 1_000_000}, // SO_MAX_PACING_RATE below the rate
		{1, 1, 3, 0, unlimited},            // under one byte a second: 0
		{7, 1000, 3, 1, unlimited - 1},
	}
	var in strings.Builder
	for _, tc := range tests {
		fmt.Fprintf(&in, "R %d %d %d %d %d\n", tc.cwnd, tc.mss, tc.srtt, tc.slowStart, tc.max)
	}
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("host core: %v", err)
	}
	got := strings.Fields(string(out))
	if len(got) != len(tests) {
		t.Fatalf("host core printed %d rates for %d cases: %q", len(got), len(tests), out)
	}
	for i, tc := range tests {
		want := new(big.Int).SetUint64(uint64(tc.cwnd))
		want.Mul(want, new(big.Int).SetUint64(uint64(tc.mss)))
		want.Mul(want, big.NewInt(1_000_000))
		want.Quo(want, new(big.Int).SetUint64(tc.srtt))
		if tc.slowStart != 0 {
			want.Mul(want, big.NewInt(2))
		} else {
			want.Add(want, new(big.Int).Quo(want, big.NewInt(5)))
		}
		if lim := new(big.Int).SetUint64(tc.max); want.Cmp(lim) > 0 {
			want = lim
		}
		if got[i] != want.String() {
			t.Errorf("pacing rate for cwnd %d, mss %d, srtt %d µs, slow start %d, max %d: %s B/s, want %s", tc.cwnd, tc.mss, tc.srtt, tc.slowStart, tc.max, got[i], want)
		}
	}
}
