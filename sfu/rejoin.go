package sfu

// A client that joins again (a tab reloading, a connection that failed)
// is kept on the node it was given while the node has room for it. The
// node's count may hold the client already, once: as a placement since
// the node's last heartbeat the manager has (nodeState.placed), or in
// that heartbeat (NodeInfo.Clients: the client was connected, or expected,
// then; its leave is not in the count before the next heartbeat). Then the
// join is no client more. If neither holds, the node no longer counts the
// client (it left before that heartbeat) and the join is one client more.
// Only the node knows which clients its heartbeat counted: the manager
// asks it (a ping, Reply.Counted) before it keeps the client there.

// rejoin is how a client that joins again counts on its node.
type rejoin int

const (
	rejoinCounted rejoin = iota // the node counts it already: no client more
	rejoinNew                   // the node no longer counts it: one client more
	rejoinAsk                   // the node is to be asked
)

// rejoinAnswer is a node's answer to whether its last heartbeat counted
// a client (Reply.Counted), and which heartbeat that was (Reply.Beat, of
// Reply.Instance).
type rejoinAnswer struct {
	node     string
	instance string
	beat     uint64
	counted  bool
}

// rejoinCount is how client key, which joins again and was given ns's
// node, counts there: as a placement there since the heartbeat, or by
// heard, the node's answer. A node that does not number its heartbeats
// (NodeInfo.Beat 0, an older node) does not say: its count is taken to
// hold the client. An answer of another node (the client's node changed
// meanwhile) is taken so too, so that a caller that was answered does not
// ask again, and so is an answer about another heartbeat than the one
// the manager has (one that came after the answer, or one still on its
// way): the manager's count is left as it is, and the heartbeats after
// the placement's ping count the client (expect.go).
func rejoinCount(ns *nodeState, key string, heard *rejoinAnswer) rejoin {
	if _, ok := ns.placed[key]; ok {
		return rejoinCounted
	}
	switch {
	case ns.info.Beat == 0:
		return rejoinCounted
	case heard == nil:
		return rejoinAsk
	case heard.node != ns.info.ID || heard.instance != ns.info.Instance || heard.beat != ns.info.Beat:
		return rejoinCounted
	case !heard.counted:
		return rejoinNew
	}
	return rejoinCounted
}
