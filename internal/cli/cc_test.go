package cli

import (
	"flag"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/hera"
)

// TestHeraFlagsMalformed: a Hera parameter flag that is not a whole number
// within 32 bits is an error naming the flag and the value; it is not cut to
// its low 32 bits, nor left at the default.
func TestHeraFlagsMalformed(t *testing.T) {
	for _, tt := range []struct{ flag, value string }{
		{"max-cwnd", "4294967297"}, // cut to 32 bits, a window of 1
		{"delta-max", "4294967296"},
		{"min-cwnd", "-1"},
		{"init-cwnd", "ten"},
		{"loss-beta", "0.5"},
		{"outage-boost", ""},
		{"gate-rtts", "1e3"},
	} {
		p := hera.DefaultParams()
		fs := flag.NewFlagSet("hera-args", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		heraFlags(fs, &p)
		err := fs.Parse([]string{"--" + tt.flag + "=" + tt.value})
		if err == nil {
			t.Errorf("--%s=%s: accepted, params %+v", tt.flag, tt.value, p)
			continue
		}
		if !strings.Contains(err.Error(), "-"+tt.flag) || !strings.Contains(err.Error(), `"`+tt.value+`"`) {
			t.Errorf("--%s=%s: error %q does not name the flag and value", tt.flag, tt.value, err)
		}
	}
	p := hera.DefaultParams()
	fs := flag.NewFlagSet("hera-args", flag.ContinueOnError)
	heraFlags(fs, &p)
	if err := fs.Parse([]string{"--max-cwnd", "4294967295", "--min-cwnd=0x10", "--bucket=2ms"}); err != nil {
		t.Fatal(err)
	}
	if p.MaxCwnd != 4294967295 || p.MinCwnd != 16 || p.BucketWidth.String() != "2ms" {
		t.Fatalf("params %+v", p)
	}
	if def := fs.Lookup("delta-max").DefValue; def != strconv.Itoa(int(hera.DefaultParams().DeltaMax)) {
		t.Fatalf("--delta-max shows the default %q, want DefaultParams' %d", def, hera.DefaultParams().DeltaMax)
	}
}
