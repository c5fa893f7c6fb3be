package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/server"
)

const clusterUsage = `usage: xrealm cluster remove-peer --bus NATS_URL --token TOKEN NODE
Removes NODE, a cluster node that has stopped for good, from the JetStream
peers of the cluster: one of the running nodes (the one --bus reaches, or
another) asks JetStream's meta leader. TOKEN is from xrealm token --role
cluster --data <a node's data dir>. A removal needs a quorum of the
remaining peers running; a removed node can join again after 5 minutes.`

// runCluster runs `xrealm cluster`: the administration of a cluster's
// nodes over the bus.
func runCluster(ctx context.Context, args []string) error {
	if len(args) == 1 && isHelp(args[0]) {
		fmt.Fprintln(os.Stdout, clusterUsage)
		return flag.ErrHelp
	}
	if len(args) == 0 || args[0] != "remove-peer" {
		return usageErr(errors.New(clusterUsage))
	}
	return inSubcommand("cluster", "remove-peer", runRemovePeer(ctx, args[1:]))
}

// runRemovePeer runs `xrealm cluster remove-peer`.
func runRemovePeer(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cluster remove-peer", flag.ContinueOnError)
	bus := fs.String("bus", "nats://127.0.0.1:4222", "NATS URL of a running node of the cluster (its --nats-addr)")
	token := fs.String("token", "", "token with the cluster right (xrealm token --role cluster --data <a node's data dir>)")
	wait := fs.Duration("timeout", 40*time.Second, "how long to wait for the answer")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one node name after the flags, got %q\n%s", fs.Args(), clusterUsage)
	}
	if *wait <= 0 {
		return usagef("--timeout %s: how long to wait for the answer must be positive, e.g. 40s", *wait)
	}
	node := fs.Arg(0)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, perms, err := connectBus(*bus, *token, "xrealm-cluster-admin", log)
	if err != nil {
		return fmt.Errorf("bus %s: %w", *bus, err)
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	type answer struct {
		m   *nats.Msg
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		m, err := nc.RequestWithContext(rctx, server.SubjectRemovePeer, []byte(node))
		answered <- answer{m, err}
	}()
	var a answer
	select {
	case pe := <-perms: // the bus drops a refused request: no answer comes
		return fmt.Errorf("the bus refused the request (%v): the token needs the cluster right (xrealm token --role cluster)", pe)
	case a = <-answered:
	}
	m, err := a.m, a.err
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no node answered on %s: is %s a node of a cluster (--cluster-name)?", server.SubjectRemovePeer, *bus)
	}
	if err != nil {
		return fmt.Errorf("remove %q: %w", node, err)
	}
	var reply server.RemovePeerReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return fmt.Errorf("remove %q: answer %q: %w", node, m.Data, err)
	}
	if !reply.OK {
		return errors.New(reply.Error)
	}
	fmt.Printf("removed %s from the cluster's JetStream peers\n", node)
	return nil
}
