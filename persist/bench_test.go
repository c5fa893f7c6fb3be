package persist

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkApplier measures the applier on a single node: one op is a
// persisted create and an update of the same object, published to the
// stream beforehand and applied in order by Run.
func BenchmarkApplier(b *testing.B) {
	s := benchStore(b)
	js := s.js
	for i := range b.N {
		id := "o" + strconv.Itoa(i)
		subj := topicSubject("realm/s/ns/sc/o/u/" + id)
		for _, p := range []string{
			`{"object_id":"` + id + `","action":"create","persist":true,"type":"box","data":{"position":{"x":1,"y":2,"z":3}}}`,
			`{"object_id":"` + id + `","action":"update","persist":true,"type":"box","data":{"position":{"x":4}}}`,
		} {
			if _, err := js.PublishAsync(subj, []byte(p)); err != nil {
				b.Fatal(err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishing took over a minute")
	}

	b.ResetTimer()
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(runCtx) }()
	defer func() { stop(); <-done }()
	for {
		ictx, icancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := s.consumer.Info(ictx)
		icancel()
		if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkCascadeDelete measures the applier's delete against the size of
// the scene: one op applies the delete of one object (a leaf) of a scene
// that holds objects= others, half of them children of the other half.
// The scene index (index.go) spares each delete a scan of the whole scene.
func BenchmarkCascadeDelete(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run("objects="+strconv.Itoa(n), func(b *testing.B) {
			s := benchStore(b)
			ctx := context.Background()
			now := time.Now()
			put := func(id, parent string) {
				o := &Object{ObjectID: id, Type: "box", Attributes: map[string]any{"position": map[string]any{"x": 1}}, Persist: true, CreatedAt: now, UpdatedAt: now}
				if parent != "" {
					o.Attributes["parent"] = parent
				}
				val, err := encode(o)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.kv.Put(ctx, objectKey("ns", "sc", id), val); err != nil {
					b.Fatal(err)
				}
			}
			for i := range n {
				parent := ""
				if i%2 == 1 {
					parent = "k" + strconv.Itoa(i-1)
				}
				put("k"+strconv.Itoa(i), parent)
			}
			for i := range b.N + 1 {
				put("d"+strconv.Itoa(i), "")
			}
			del := func(i int) {
				id := "d" + strconv.Itoa(i)
				err := s.apply(ctx, topicSubject("realm/s/ns/sc/o/u/"+id), nil, []byte(`{"object_id":"`+id+`","action":"delete"}`))
				if err != nil {
					b.Fatal(err)
				}
			}
			del(b.N) // a first delete (the index's first build)
			b.ResetTimer()
			for i := range b.N {
				del(i)
			}
		})
	}
}

// benchStore starts an embedded JetStream server and opens a store on it,
// without running it.
func benchStore(b *testing.B) *Store {
	b.Helper()
	srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: b.TempDir(), DontListen: true, NoLog: true, NoSigs: true})
	if err != nil {
		b.Fatal(err)
	}
	srv.Start()
	b.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{JS: js, NC: nc, Replicas: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return s
}
