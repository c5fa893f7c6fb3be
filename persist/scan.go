package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reading a scene (or the whole bucket) in a cluster.
//
// A KV watcher reads through an ordered consumer, an ephemeral consumer
// with one replica that the meta leader places on any of the bucket's
// replicas that is up: not necessarily the stream leader, and possibly one
// still catching up after a restart, or one that has not yet applied the
// latest write (a follower applies an entry when the leader's next message
// tells it the entry is committed). The watcher's "initial values done"
// marker comes when it has received the number of messages that replica
// counted as pending when it created the consumer, from its own store: a
// lagging replica gives a complete-looking but stale set (0 or 299 of a
// scene's 300 objects, in a walkthrough just after a node restarted).
//
// So every scan is checked against the stream leader. Before it, the store
// asks the leader (a non-direct message get, which only the stream leader
// answers) for the newest message of the keys it reads, value or delete
// marker: revision L. A replica applies the stream in order, so a scan
// whose newest entry (delete markers included) has a revision at least L
// was served by a replica that had applied everything up to L: every write
// acknowledged before the scan began. A scan that saw less is thrown away
// and tried again (a new consumer, placed anew; the replica catches up),
// until readWait; then the read fails with ErrUnavailable, naming why.

// ErrUnavailable is wrapped by the errors of List, Scenes and Clone when
// the store could not read a complete, current view in time: no stream
// leader (an election after a node left), or only replicas that were
// still catching up answered. The HTTP routes answer 503 for it.
var ErrUnavailable = errors.New("persistence store unavailable")

const (
	// readWait bounds a whole read: the tries of a scan together
	// (Store.readWait).
	readWait = 10 * time.Second
	// stepWait is the most one step of a try may take: an answer of the
	// stream leader, the watcher's consumer, the next entry of a scan.
	stepWait = 2 * time.Second
)

// kvEntry is the newest entry of one key as a scan saw it.
type kvEntry struct {
	key   string
	rev   uint64
	value []byte // nil for a delete or purge marker, or in a keys-only scan
	live  bool   // false for a delete or purge marker
}

// readKeys returns the newest entry of every key matching filter (a KV
// key pattern), deleted keys included, as of a moment no earlier than the
// call: it holds every write acknowledged before it. keysOnly leaves the
// values out. It fails with an error wrapping ErrUnavailable when no
// current view could be read within s.readWait (or ctx's deadline, if
// sooner).
func (s *Store) readKeys(ctx context.Context, filter string, keysOnly bool) (map[string]kvEntry, error) {
	rctx, cancel := context.WithTimeout(ctx, s.readWait)
	defer cancel()
	start := time.Now()
	pause := 20 * time.Millisecond
	var reason error
	for try := 1; ; try++ {
		out, err := s.readKeysOnce(rctx, filter, keysOnly)
		if err == nil {
			if try > 1 {
				s.log.Debug("persist: current scan after stale or failed tries", "filter", filter, "tries", try, "took", time.Since(start))
			}
			return out, nil
		}
		reason = err
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%v)", ctx.Err(), reason)
		}
		s.log.Debug("persist: scan tried again", "filter", filter, "try", try, "err", err)
		select {
		case <-rctx.Done():
			return nil, fmt.Errorf("%w: no current read in %v, %d tries; the last: %v", ErrUnavailable, time.Since(start).Round(time.Millisecond), try, reason)
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// readKeysOnce is one try of readKeys.
func (s *Store) readKeysOnce(ctx context.Context, filter string, keysOnly bool) (map[string]kvEntry, error) {
	last, err := s.leaderLast(ctx, filter)
	if err != nil {
		return nil, err
	}
	out := map[string]kvEntry{}
	if last == 0 {
		return out, nil // the leader holds nothing under filter
	}

	// The watcher lives as long as wctx; stall cancels it when a step
	// takes longer than stepWait.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stalled atomic.Bool
	stall := time.AfterFunc(stepWait, func() { stalled.Store(true); cancel() })
	defer stall.Stop()
	opts := []jetstream.WatchOpt{}
	if keysOnly {
		opts = append(opts, jetstream.MetaOnly())
	}
	w, err := s.kv.Watch(wctx, filter, opts...)
	if err != nil {
		if stalled.Load() {
			return nil, fmt.Errorf("creating the scan's consumer took over %v", stepWait)
		}
		return nil, fmt.Errorf("creating the scan's consumer: %w", err)
	}
	defer w.Stop()
	var newest uint64
	for {
		stall.Reset(stepWait)
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-wctx.Done():
		case e, ok = <-w.Updates():
		}
		if wctx.Err() != nil || !ok {
			switch {
			case stalled.Load():
				return nil, fmt.Errorf("the replica serving the scan sent nothing for %v, after %d keys", stepWait, len(out))
			case ctx.Err() != nil:
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("the scan's watcher closed after %d keys", len(out))
		}
		if e == nil {
			break // the initial values, as that replica counted them
		}
		newest = max(newest, e.Revision())
		if old, ok := out[e.Key()]; ok && old.rev > e.Revision() {
			continue
		}
		live := e.Operation() == jetstream.KeyValuePut
		var val []byte
		if live && !keysOnly {
			val = e.Value()
		}
		out[e.Key()] = kvEntry{key: e.Key(), rev: e.Revision(), value: val, live: live}
	}
	if newest < last {
		return nil, fmt.Errorf("the replica serving the scan had applied up to revision %d of these keys, the stream leader %d (a replica catching up)", newest, last)
	}
	return out, nil
}

// leaderLast returns the revision of the newest message (a value or a
// delete marker) of the keys matching filter, as the bucket's stream
// leader holds it, or 0 when it holds none.
func (s *Store) leaderLast(ctx context.Context, filter string) (uint64, error) {
	m, err := s.leaderNewest(ctx, filter)
	if err != nil || m == nil {
		return 0, err
	}
	return m.seq, nil
}

// kvOperationHeader marks a key-value delete ("DEL") or purge ("PURGE").
const kvOperationHeader = "KV-Operation"

// kvMsg is the newest message of a key.
type kvMsg struct {
	subject string // the message's subject
	seq     uint64 // the key's revision
	deleted bool   // a delete or purge marker
	data    []byte // the value, nil for a marker
}

// newest returns the newest message (a value or a delete marker) of key as
// the bucket's stream leader holds it, or nil when it holds none: every
// write acknowledged before the call is in it. It is leaderNewest, except
// while the bucket has a single replica (Store.single): that replica is
// the leader and the only one answering direct gets, so the KV's Get is as
// current, and cheaper (the leader's message get goes through the server's
// API queue: the applier on one node applied about a quarter fewer
// messages a second with it).
func (s *Store) newest(ctx context.Context, key string) (*kvMsg, error) {
	if !s.single.Load() {
		return s.leaderNewest(ctx, key)
	}
	m, err := s.kvStream.GetLastMsgForSubject(ctx, kvSubjectPrefix+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if m.Header.Get(kvOperationHeader) != "" {
		return &kvMsg{subject: m.Subject, seq: m.Sequence, deleted: true}, nil
	}
	return &kvMsg{subject: m.Subject, seq: m.Sequence, data: m.Data}, nil
}

// checkReplicas sets Store.single from the bucket's configuration. When
// the bucket cannot be read, it leaves it as it was.
func (s *Store) checkReplicas(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, stepWait)
	defer cancel()
	info, err := s.kvStream.Info(ctx)
	if err != nil {
		s.log.Debug("persist: reading the bucket's replicas", "err", err)
		return
	}
	s.single.Store(info.Config.Replicas <= 1)
}

// leaderNewest returns the newest message (a value or a delete marker) of
// the keys matching filter (a key, or a key pattern), as the bucket's
// stream leader holds it, or nil when it holds none: every write
// acknowledged before the call is in it. Only the stream leader answers
// the non-direct message get; direct gets, which the KV's Get uses, are
// answered by any replica that is nearly caught up, often the caller's own
// node, which may not have applied the latest writes (a follower applies a
// write once the leader tells it the write is committed, after the writer
// had its acknowledgement; a restarted node answers from 90% caught up).
// When the leader does not answer within stepWait, or the server answers
// 503 (no leader: an election, or too few nodes up), the error wraps
// ErrUnavailable.
func (s *Store) leaderNewest(ctx context.Context, filter string) (*kvMsg, error) {
	return s.leaderGet(ctx, map[string]any{"last_by_subj": kvSubjectPrefix + filter}, "the newest message of "+filter)
}

// leaderGet asks the bucket's stream leader for one message (req is the
// API's message get request, what names it in errors), and returns it, or
// nil when there is none. See leaderNewest.
func (s *Store) leaderGet(ctx context.Context, req map[string]any, what string) (*kvMsg, error) {
	subj := jetstream.DefaultAPIPrefix
	if o := s.js.Options(); o.Domain != "" {
		subj = "$JS." + o.Domain + ".API."
	} else if o.APIPrefix != "" {
		subj = strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	subj += "STREAM.MSG.GET." + kvStream
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, stepWait)
	defer cancel()
	msg, err := s.js.Conn().RequestWithContext(rctx, subj, body)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w: the stream leader of %s did not answer within %v (no leader: an election, or too few nodes up)", ErrUnavailable, kvStream, stepWait)
	}
	if err != nil {
		return nil, fmt.Errorf("asking the stream leader of %s for %s: %w", kvStream, what, err)
	}
	var resp struct {
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Hdrs    []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("the stream leader of %s answered %q: %w", kvStream, clip(msg.Data), err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound):
		return nil, nil
	case resp.Error != nil && resp.Error.Code == 503: // no leader, no quorum
		return nil, fmt.Errorf("%w: the stream leader of %s: %s (code %d, error code %d)", ErrUnavailable, kvStream, resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
	case resp.Error != nil:
		return nil, fmt.Errorf("the stream leader of %s: %s (code %d, error code %d)", kvStream, resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
	case resp.Message == nil:
		return nil, fmt.Errorf("the stream leader of %s answered %q, without a message", kvStream, clip(msg.Data))
	}
	m := &kvMsg{subject: resp.Message.Subject, seq: resp.Message.Seq, data: resp.Message.Data}
	if len(resp.Message.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Hdrs)
		if err != nil {
			return nil, fmt.Errorf("the headers of message %d of %s: %w", m.seq, kvStream, err)
		}
		if h.Get(kvOperationHeader) != "" {
			m.deleted, m.data = true, nil
		}
	}
	return m, nil
}

// The KV bucket's stream and the prefix of its subjects.
const (
	kvStream        = "KV_" + BucketName
	kvSubjectPrefix = "$KV." + BucketName + "."
)

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}
