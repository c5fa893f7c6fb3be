package benchcc

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xrealm/xrealm/cc"
)

// KnownAlgos returns the congestion controls a run can use: the kernel's
// available ones (/proc/sys/net/ipv4/tcp_available_congestion_control)
// and those Run loads itself (cc.Names), sorted.
func KnownAlgos() ([]string, error) {
	avail, err := cc.Available()
	if err != nil {
		return nil, err
	}
	return validAlgos(avail), nil
}

func validAlgos(kernel []string) []string {
	out := slices.Concat(kernel, cc.Names)
	slices.Sort(out)
	return slices.Compact(out)
}

// CheckAlgos returns an error naming the congestion controls in algos that
// are neither among the kernel's available ones nor loaded by Run, with
// the valid names, or naming one given twice (Run would run it twice, and
// the summary count both runs); nil if every one is valid, none is
// repeated and there is at least one. A control Run loads is the same
// under its xrealm name and its kernel name (hera-paper, hera_paper).
func CheckAlgos(algos, kernel []string) error {
	valid := validAlgos(kernel)
	var bad []string
	for _, a := range algos {
		if !slices.Contains(valid, a) {
			bad = append(bad, fmt.Sprintf("%q", a))
		}
	}
	switch {
	case len(algos) == 0:
		return fmt.Errorf("no congestion control given; valid: %s", strings.Join(valid, ", "))
	case len(bad) > 0:
		return fmt.Errorf("unknown congestion control %s; valid: %s (the kernel's available ones and %s; a control built as a kernel module, e.g. vegas, is available after modprobe tcp_vegas)",
			strings.Join(bad, ", "), strings.Join(valid, ", "), strings.Join(cc.Names, ", "))
	}
	first := map[string]string{} // kernel name → the name it was first given as
	for _, a := range algos {
		k := cc.KernelName(a)
		prev, dup := first[k]
		switch {
		case !dup:
			first[k] = a
		case prev == a:
			return fmt.Errorf("congestion control %q given twice: each runs once per trace and seed", a)
		default:
			return fmt.Errorf("congestion control %q given twice (as %q and %q): each runs once per trace and seed", k, prev, a)
		}
	}
	return nil
}

// kernelAlgos returns the controls in algos that Run does not load (the
// kernel's own), or cubic when there are none: what a run can still use
// on a kernel that refuses to load xrealm's.
func kernelAlgos(algos []string) []string {
	var out []string
	for _, a := range algos {
		if !slices.Contains(cc.Names, a) && !slices.Contains(cc.Names, strings.ReplaceAll(a, "_", "-")) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		out = []string{"cubic"}
	}
	return out
}
