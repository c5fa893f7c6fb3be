package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Old delete markers are purged each up to its own revision: a key
// deleted and never written again reads as never written, one written
// again after the markers were read keeps its new value.
func TestPurgeOldDeleteMarkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _ := startBus(t)
	nc, err := b.Connect("kv-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := b.JetStream(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "markers", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := kv.Put(ctx, k, []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b"} {
		if err := kv.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	old, err := OldDeleteMarkers(ctx, kv, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != 2 || old[0].Key != "a" || old[1].Key != "b" {
		t.Fatalf("markers %+v, want a and b", old)
	}
	if recent, err := OldDeleteMarkers(ctx, kv, time.Hour); err != nil || len(recent) != 0 {
		t.Fatalf("markers older than an hour: %+v, %v; want none", recent, err)
	}
	// a is written again after the listing, then the listed markers go.
	if _, err := kv.Put(ctx, "a", []byte("2")); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "KV_markers")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range old {
		if err := PurgeDeleteMarker(ctx, stream, kv, m); err != nil {
			t.Fatal(err)
		}
	}
	if e, err := kv.Get(ctx, "a"); err != nil || string(e.Value()) != "2" {
		t.Fatalf("a after the purge of its old marker: %v; want its new value 2", err)
	}
	if e, err := kv.Get(ctx, "c"); err != nil || string(e.Value()) != "1" {
		t.Fatalf("c, never deleted: %v", err)
	}
	if _, err := kv.Get(ctx, "b"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("b after the purge: %v, want not found", err)
	}
	if n, err := PurgeOldDeleteMarkers(ctx, js, kv, 0); err != nil || n != 0 {
		t.Fatalf("a second pass purged %d (%v), want none left", n, err)
	}
	st, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State.Msgs != 2 {
		t.Fatalf("the bucket's stream holds %d messages, want a's and c's", st.State.Msgs)
	}
}
