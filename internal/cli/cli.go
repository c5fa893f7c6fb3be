// Package cli implements the xrealm command line: one binary with a
// subcommand per capability. cmd/xrealm only calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

type command struct {
	run   func(ctx context.Context, args []string) error
	usage string
	// server: a service that runs until stopped (serve, sfu). It keeps
	// running when its standard output or error loses its reader: see
	// mainWith.
	server bool
}

func commands() map[string]command {
	return map[string]command{
		"serve":   {run: runServe, usage: "run an xrealm node (everything embedded; data in ./data)", server: true},
		"token":   {run: runToken, usage: "print a signed token for a user and scene"},
		"cc":      {run: runCC, usage: "load or unload the Hera TCP congestion control (eBPF)"},
		"netem":   {run: runNetem, usage: "run a command behind a trace-driven emulated link"},
		"bench":   {run: runBench, usage: "run a benchmark: bus, cc, rooms or sfu"},
		"sfu":     {run: runSFU, usage: "run an SFU node that joins a bus: --join <nats url> --id <n> --site <name>", server: true},
		"cluster": {run: runCluster, usage: "administer a cluster: remove-peer NODE removes a node that stopped for good from the JetStream peers"},
		"bots":    {run: runBots, usage: "run synthetic users against a server, with live progress (bots pointcloud: a point cloud on the SFU; bots record: record a user's poses)"},
		"version": {run: runVersion, usage: "print the commit this binary was built from"},
	}
}

// Main runs the command line and returns the process exit code.
func Main(args []string, stderr io.Writer) int { return mainWith(commands(), args, stderr) }

// mainWith is Main with the commands cmds.
func mainWith(cmds map[string]command, args []string, stderr io.Writer) (code int) {
	if len(args) < 1 || isHelp(args[0]) {
		usage(stderr, cmds)
		if len(args) < 1 {
			return 2
		}
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "xrealm: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	ctx, stop := interruptible(context.Background(), stderr)
	defer stop()
	if cmd.server {
		// A server's output is its logs: when their reader goes (tee
		// ended, the journal restarted) they are lost, but its clients
		// are not, and it keeps serving. A write there fails with EPIPE
		// instead of killing the process.
		defer surviveSIGPIPE()()
	} else {
		var outputClosed func() bool
		ctx, outputClosed = stopWhenOutputCloses(ctx, stderr)
		defer func() {
			if outputClosed() {
				code = exitStdoutClosed
			}
		}()
	}
	if err := cmd.run(ctx, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if _, ok := err.(*subcommandError); ok { // "xrealm bench rooms: ..."
			fmt.Fprintf(stderr, "xrealm %s %v\n", args[0], err)
		} else {
			fmt.Fprintf(stderr, "xrealm %s: %v\n", args[0], err)
		}
		var ue *usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError is a command line that cannot run as given: an unknown
// flag, subcommand or benchmark, a value a flag does not take, a required
// flag missing, arguments left over. Main exits 2 for it, as Go's flag
// package and no command at all do, and 1 for a command that failed.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usageErr marks err (nil stays nil) as a usage error.
func usageErr(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err}
}

// usagef is fmt.Errorf for a usage error.
func usagef(format string, a ...any) error { return usageErr(fmt.Errorf(format, a...)) }

// parseFlags parses args into fs; an error (an unknown flag, a value that
// does not parse) is a usage error, except -h's flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageErr(err)
}

// interruptible returns a context that the first interrupt (Ctrl-C) or
// SIGTERM ends, so that the command stops cleanly (a server drains, bots
// print their summary); the signal after it has its default effect and
// ends the process at once, for a user who will not wait for the clean
// stop.
func interruptible(parent context.Context, stderr io.Writer) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		defer signal.Stop(sig)
		select {
		case s := <-sig:
			signal.Stop(sig)
			fmt.Fprintf(stderr, "xrealm: %v: stopping (again to quit at once)\n", s)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// exitStdoutClosed is Main's exit code when the command's standard output
// (or error) was closed while it ran: 128 + SIGPIPE, what a shell reports
// for a process that a broken pipe killed.
const exitStdoutClosed = 128 + int(syscall.SIGPIPE)

// stopWhenOutputCloses returns a context that ends when the process's
// standard output or error is found closed (its reader gone: xrealm bots |
// head; not for a server, see command.server), so that the command stops
// as it does on an interrupt (bots disconnect, a bench stops the servers it
// started and removes its temporary files) instead of being killed by
// SIGPIPE at its next write.
// Call closed when the command has returned: it reports whether that
// happened, the command's last write included, and ends the watch. Until
// then SIGPIPE does not kill the process: a write to the closed output
// fails with EPIPE, and is lost.
//
// SIGPIPE also comes from a write to a network connection its peer closed;
// so the signal only makes it look at fds 1 and 2, and a broken network
// connection stops nothing.
func stopWhenOutputCloses(parent context.Context, stderr io.Writer) (ctx context.Context, closed func() bool) {
	ctx, cancel := context.WithCancel(parent)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGPIPE)
	var gone atomic.Bool
	check := func(what string) {
		if gone.Load() || !outputClosed() {
			return
		}
		gone.Store(true)
		fmt.Fprintln(stderr, "xrealm: standard output was closed (broken pipe)"+what)
		cancel()
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-sig:
				check(": stopping")
			case <-stop:
				return
			}
		}
	}()
	return ctx, func() bool {
		// The SIGPIPE of the command's last write may not have reached
		// sig yet (os/signal hands signals over on a goroutine of its
		// own).
		flushSignals()
		close(stop)
		<-done
		select {
		case <-sig:
			check("") // before Stop: with stderr closed, saying so raises SIGPIPE
		default:
		}
		signal.Stop(sig)
		cancel()
		return gone.Load()
	}
}

// surviveSIGPIPE makes a write to a closed standard output or error fail
// with EPIPE, not kill the process (Go's default), until the function it
// returns is called. The SIGPIPEs themselves are dropped.
func surviveSIGPIPE() (stop func()) {
	sig := make(chan os.Signal, 1) // never read: os/signal drops what does not fit
	signal.Notify(sig, syscall.SIGPIPE)
	return func() { signal.Stop(sig) }
}

// flushSignals returns once every signal the process got before the call
// has been handed to the channels that os/signal.Notify registered: it
// sends the process SIGWINCH (which nothing else here asks for, and whose
// default is to do nothing) and waits for it. os/signal hands signals over
// one at a time, the lowest number first of those that came together, so
// a SIGPIPE (13) raised before SIGWINCH (28) is handed over first. A write
// to fd 1 or 2 that fails with EPIPE raises its SIGPIPE before it returns.
func flushSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	defer signal.Stop(ch)
	if syscall.Kill(os.Getpid(), syscall.SIGWINCH) != nil {
		return
	}
	t := time.NewTimer(time.Second) // not reached: a signal to itself arrives
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// outputClosed reports whether fd 1 or 2 is a pipe or socket whose reader
// has gone.
func outputClosed() bool { return readerGone(1, 2) }

// readerGone reports whether one of fds is a pipe or socket whose reader
// has gone (poll says POLLERR or POLLHUP). Nothing else counts: a terminal
// that hung up (the SSH session of a disowned xrealm serve ended) reports
// POLLHUP too, though no reader left and a write to it never raises
// SIGPIPE.
func readerGone(fds ...int) bool {
	pfds := make([]unix.PollFd, 0, len(fds))
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			continue // not open: nothing to lose
		}
		if m := st.Mode & unix.S_IFMT; m == unix.S_IFIFO || m == unix.S_IFSOCK {
			pfds = append(pfds, unix.PollFd{Fd: int32(fd)})
		}
	}
	if len(pfds) == 0 {
		return false
	}
	n, err := unix.Poll(pfds, 0)
	if err != nil || n == 0 {
		return false
	}
	for _, f := range pfds {
		if f.Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
			return true
		}
	}
	return false
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: xrealm <command> [flags]   (xrealm <command> -h for its flags)")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].usage)
	}
}

// runBench dispatches `xrealm bench <name>`.
func runBench(ctx context.Context, args []string) error {
	benches := map[string]func(context.Context, []string) error{
		"cc":    runBenchCC,
		"bus":   runBenchBus,
		"sfu":   runBenchSFU,
		"rooms": runBenchRooms,
	}
	if len(args) < 1 {
		return usagef("which benchmark? one of: %s", strings.Join(keys(benches), ", "))
	}
	if isHelp(args[0]) {
		fmt.Fprintf(os.Stderr, "usage: xrealm bench <benchmark> [flags]   (xrealm bench <benchmark> -h for its flags)\nbenchmarks: %s\n", strings.Join(keys(benches), ", "))
		return flag.ErrHelp
	}
	b, ok := benches[args[0]]
	if !ok {
		return usagef("unknown benchmark %q; one of: %s", args[0], strings.Join(keys(benches), ", "))
	}
	return inSubcommand("bench", args[0], b(ctx, args[1:]))
}

// subcommandError is an error of a subcommand (bench rooms, bots record),
// which Main prints as "xrealm bench rooms: ...": the subcommand's name
// once, whether or not the error (or the package it comes from, such as
// bench/bus's "bench bus: ...") named it already.
type subcommandError struct {
	parent, name string
	err          error
}

func (e *subcommandError) Error() string {
	msg := e.err.Error()
	for _, p := range []string{e.parent + " " + e.name + ": ", e.parent + e.name + ": ", e.name + ": "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return e.name + ": " + msg
}

func (e *subcommandError) Unwrap() error { return e.err }

// inSubcommand marks err (nil and -h's flag.ErrHelp stay as they are) as
// an error of subcommand name of command parent; a usage error stays one.
func inSubcommand(parent, name string, err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &subcommandError{parent, name, err}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
