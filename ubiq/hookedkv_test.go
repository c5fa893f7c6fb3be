package ubiq

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// kvWrite is a write of a hookedKV's bucket: op ("put", "create",
// "update", "delete", "purge"), key, and write, which makes it on the real
// bucket (with any context, so a hook can apply a write whose context was
// canceled, as the store applies one sent before the cancel).
type kvWrite struct {
	op, key string
	write   func(ctx context.Context) (uint64, error)
}

// kvHook stands in for a bucket's write: it calls w.write, or not, and
// answers for it (holding it, failing it, losing its answer).
type kvHook func(ctx context.Context, w kvWrite) (uint64, error)

// hookedKV is a key-value bucket whose writes go through hook, when set.
type hookedKV struct {
	jetstream.KeyValue
	hook *atomic.Pointer[kvHook]
}

func (kv hookedKV) do(ctx context.Context, op, key string, write func(ctx context.Context) (uint64, error)) (uint64, error) {
	if h := kv.hook.Load(); h != nil {
		return (*h)(ctx, kvWrite{op: op, key: key, write: write})
	}
	return write(ctx)
}

func (kv hookedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return kv.do(ctx, "put", key, func(ctx context.Context) (uint64, error) { return kv.KeyValue.Put(ctx, key, value) })
}

func (kv hookedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return kv.do(ctx, "create", key, func(ctx context.Context) (uint64, error) { return kv.KeyValue.Create(ctx, key, value, opts...) })
}

func (kv hookedKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	return kv.do(ctx, "update", key, func(ctx context.Context) (uint64, error) { return kv.KeyValue.Update(ctx, key, value, last) })
}

func (kv hookedKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := kv.do(ctx, "delete", key, func(ctx context.Context) (uint64, error) { return 0, kv.KeyValue.Delete(ctx, key, opts...) })
	return err
}

func (kv hookedKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := kv.do(ctx, "purge", key, func(ctx context.Context) (uint64, error) { return 0, kv.KeyValue.Purge(ctx, key, opts...) })
	return err
}

// hookedJS hands out its buckets as hookedKVs.
type hookedJS struct {
	jetstream.JetStream
	hook *atomic.Pointer[kvHook]
	raw  *atomic.Pointer[jetstream.KeyValue] // the last bucket, without the hook
}

func (js hookedJS) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, err
	}
	js.raw.Store(&kv)
	return hookedKV{KeyValue: kv, hook: js.hook}, nil
}

// startHookedServer starts a test server whose bucket's writes go through
// the hook it returns, once set, and returns the bucket without the hook
// too (for the writes of other nodes).
func startHookedServer(t *testing.T) (*testServer, *atomic.Pointer[kvHook], jetstream.KeyValue) {
	t.Helper()
	hook, raw := new(atomic.Pointer[kvHook]), new(atomic.Pointer[jetstream.KeyValue])
	ts := startServer(t, nil, func(c *Config) { c.JS = hookedJS{JetStream: c.JS, hook: hook, raw: raw} })
	t.Cleanup(func() { hook.Store(nil) }) // before the server's shutdown
	return ts, hook, *raw.Load()
}

// setHook sets the hook of a hooked bucket.
func setHook(p *atomic.Pointer[kvHook], h kvHook) { p.Store(&h) }

// isCodeKey reports whether key is a join code's.
func isCodeKey(key string) bool { return strings.HasPrefix(key, "c.") }

// heldClaimOf waits until room r holds one claim, of a member attached,
// and returns its id.
func heldClaimOf(t *testing.T, r *room) string {
	t.Helper()
	var id string
	eventually(t, "the member's claim held, attached", func() bool {
		r.claimMu.Lock()
		defer r.claimMu.Unlock()
		for c, h := range r.claims {
			if h.attached {
				id = c
				return len(r.claims) == 1
			}
		}
		return false
	})
	return id
}
