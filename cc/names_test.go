package cc

import (
	"strings"
	"testing"

	"github.com/xrealm/xrealm/hera"
)

// TestUnknownNames checks that a name that is not one of Names is refused
// as unknown, with the valid ones listed, before anything in the kernel
// or the BPF file system is touched.
func TestUnknownNames(t *testing.T) {
	for _, name := range []string{"bogus", "cubic", "hera_paper", "Hera", "hera/../x"} {
		t.Run(name, func(t *testing.T) {
			err := Unload(name)
			if err == nil || !strings.Contains(err.Error(), "unknown congestion control") || !strings.Contains(err.Error(), "hera, hera-paper") {
				t.Fatalf("Unload(%q) = %v, want an unknown-name error listing hera, hera-paper", name, err)
			}
			if _, err := loadCollection(name, hera.DefaultParams()); err == nil || !strings.Contains(err.Error(), "unknown congestion control") {
				t.Fatalf("loading %q: %v, want an unknown-name error", name, err)
			}
		})
	}
}
