// Package cc loads Hera as a Linux TCP congestion control implemented in
// eBPF struct_ops (bpf/hera.bpf.c), and unloads it again.
//
// Loading registers a congestion control named "hera" or "hera-paper" that
// then appears in /proc/sys/net/ipv4/tcp_available_congestion_control and can
// be chosen per socket with TCP_CONGESTION. The registration is held by a BPF
// link pinned under /sys/fs/bpf/xrealm/cc, so it outlives the loading
// process; Unload removes the pin and with it the congestion control.
//
// The compiled objects are embedded; `go generate ./cc/` rebuilds them with
// clang (see gen.sh).
package cc

//go:generate ./gen.sh

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xrealm/xrealm/hera"
)

var (
	//go:embed bpf/hera.bpf.o
	heraObj []byte
	//go:embed bpf/hera_paper.bpf.o
	heraPaperObj []byte
)

// PinDir is where the links that keep the congestion controls registered
// are pinned.
const PinDir = "/sys/fs/bpf/xrealm/cc"

// Names are the congestion controls this package can load, by their
// xrealm names.
var Names = []string{"hera", "hera-paper"}

// KernelName is the name under which the kernel registers the congestion
// control xrealm calls name: the kernel accepts only letters, digits, '_' and
// '.', so "hera-paper" is registered as "hera_paper". Use it for
// TCP_CONGESTION, iperf3 -C and the sysctls.
func KernelName(name string) string { return strings.ReplaceAll(name, "-", "_") }

// Load registers the named congestion control ("hera" or "hera-paper") with
// parameters p. p.Variant must match the name (use hera.ForVariant for the
// defaults). It fails if a congestion control of that name is already
// registered.
func Load(name string, p hera.Params) error {
	if avail, err := Available(); err == nil && slices.Contains(avail, KernelName(name)) {
		return fmt.Errorf("cc: %s is already registered (run xrealm cc unload first)", KernelName(name))
	}
	coll, err := loadCollection(name, p)
	if err != nil {
		return err
	}
	defer coll.Close()
	m, ok := coll.Maps["hera_ops"]
	if !ok {
		return fmt.Errorf("cc: %s object has no hera_ops struct_ops map", name)
	}
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: m})
	if err != nil {
		return fmt.Errorf("cc: register %s: %w", name, err)
	}
	defer l.Close()
	if err := ensureBPFFS(); err != nil {
		return err
	}
	if err := os.MkdirAll(PinDir, 0o755); err != nil {
		return fmt.Errorf("cc: create %s: %w", PinDir, err)
	}
	if err := l.Pin(filepath.Join(PinDir, name)); err != nil {
		return fmt.Errorf("cc: pin %s link: %w", name, err)
	}
	return nil
}

// loadCollection sets p in the embedded object for name and loads it into
// the kernel (the verifier checks it) without registering it.
func loadCollection(name string, p hera.Params) (*ebpf.Collection, error) {
	var obj []byte
	switch name {
	case "hera":
		obj = heraObj
	case "hera-paper":
		obj = heraPaperObj
	default:
		return nil, fmt.Errorf("cc: unknown congestion control %q (want one of %s)", name, strings.Join(Names, ", "))
	}
	if p.Variant.String() != name {
		return nil, fmt.Errorf("cc: parameters are for %s, not %s", p.Variant, name)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(obj))
	if err != nil {
		return nil, fmt.Errorf("cc: parse embedded %s object: %w", name, err)
	}
	vars := map[string]any{
		"p_variant":              uint32(p.Variant),
		"p_bucket_us":            uint32(p.BucketWidth / time.Microsecond),
		"p_backlog":              uint32(p.Backlog),
		"p_buckets":              uint32(p.Buckets),
		"p_delta_max":            p.DeltaMax,
		"p_hist_cap":             p.HistCap,
		"p_min_cwnd":             p.MinCwnd,
		"p_max_cwnd":             p.MaxCwnd,
		"p_init_cwnd":            p.InitCwnd,
		"p_decrease_shift":       p.DecreaseShift,
		"p_loss_beta_permille":   p.LossBetaPermille,
		"p_min_rtt_window_us":    uint64(p.MinRTTWindow / time.Microsecond),
		"p_pacing":               boolU32(p.Pacing),
		"p_floor_gain_eighths":   p.FloorGainEighths,
		"p_bdp_window_us":        uint64(p.BDPWindow / time.Microsecond),
		"p_bucket_packets":       p.BucketPackets,
		"p_gate_rtts":            p.GateRTTs,
		"p_pacing_max_rtts":      p.PacingMaxRTTs,
		"p_outage_rtts":          p.OutageRTTs,
		"p_outage_boost_percent": p.OutageBoostPercent,
	}
	for k, v := range vars {
		vs, ok := spec.Variables[k]
		if !ok {
			return nil, fmt.Errorf("cc: %s object has no parameter %s", name, k)
		}
		if err := vs.Set(v); err != nil {
			return nil, fmt.Errorf("cc: set %s = %v: %w", k, v, err)
		}
	}
	if err := checkPrivilege(name); err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollection(spec)
	if errors.Is(err, unix.EPERM) {
		// cilium/ebpf blames RLIMIT_MEMLOCK for an EPERM, which does not
		// apply here (the kernels with struct_ops links, 6.4 and later,
		// charge BPF memory to the cgroup).
		return nil, fmt.Errorf("cc: load %s into the kernel: not permitted (%s): %w", name, privilegeNeeded, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cc: load %s into the kernel: %w", name, err)
	}
	return coll, nil
}

const privilegeNeeded = "loading a BPF congestion control needs root: CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN"

// checkPrivilege refuses to load when the calling thread lacks the
// capabilities the kernel asks for. Without them cilium/ebpf's feature
// probes fail too, and it reports what they could not probe as missing:
// "prealloc maps not supported (requires >= v4.6)" or "struct_ops requires
// BTF" on a kernel that has both. When the capabilities cannot be read,
// the kernel decides.
func checkPrivilege(name string) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil
	}
	has := func(c int) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if has(unix.CAP_SYS_ADMIN) || has(unix.CAP_BPF) && has(unix.CAP_PERFMON) {
		return nil
	}
	return fmt.Errorf("cc: load %s: not permitted: %s", name, privilegeNeeded)
}

// Unload removes the named congestion control, or every one this package
// loaded when name is empty. Unloading one that is not loaded, or a name
// not in Names, is an error.
func Unload(name string) error {
	names := []string{name}
	if name == "" {
		names = Names
	} else if !slices.Contains(Names, name) {
		return fmt.Errorf("cc: unknown congestion control %q (want one of %s)", name, strings.Join(Names, ", "))
	}
	found := false
	for _, n := range names {
		path := filepath.Join(PinDir, n)
		l, err := link.LoadPinnedLink(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("cc: open pinned %s link %s: %w", n, path, err)
		}
		found = true
		if err := l.Unpin(); err != nil {
			l.Close()
			return fmt.Errorf("cc: unpin %s: %w", path, err)
		}
		if err := l.Close(); err != nil {
			return fmt.Errorf("cc: close %s link: %w", n, err)
		}
	}
	if !found {
		if name == "" {
			return errors.New("cc: no xrealm congestion control is loaded")
		}
		return fmt.Errorf("cc: %s is not loaded (no pin at %s)", name, filepath.Join(PinDir, name))
	}
	return nil
}

// Available returns the kernel's available congestion controls.
func Available() ([]string, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		return nil, fmt.Errorf("cc: read available congestion controls: %w", err)
	}
	return strings.Fields(string(b)), nil
}

// ensureBPFFS mounts the BPF file system at /sys/fs/bpf if it is not there.
func ensureBPFFS() error {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/bpf", &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll("/sys/fs/bpf", 0o755); err != nil {
		return fmt.Errorf("cc: create /sys/fs/bpf: %w", err)
	}
	if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("cc: mount the BPF file system at /sys/fs/bpf: %w", err)
	}
	return nil
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
