package persist

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/xrealm/xrealm/topic"
)

func TestIgnored(t *testing.T) {
	tests := []struct {
		payload string
		ignored bool
	}{
		{`{"object_id":"b","action":"clientEvent","type":"mousedown","data":{}}`, true},
		{`{"object_id":"b","action":"clientEvent","persist":true}`, true},
		{`{"object_id":"b","action":"update","data":{"x":1}}`, true},
		{`{"object_id":"b","action":"create","persist":false}`, true},
		{`{"object_id":"b","action":"update","persist":true}`, false},
		{`{"object_id":"b","action":"create","persist":true}`, false},
		{`{"object_id":"b","action":"delete"}`, false},
		// What the applier must see to reject and log: not ignored.
		{`{"object_id":"b","action":"explode"}`, false},
		{`{"object_id":"b","action":"create","persist":"yes"}`, false},
		{`not json`, false},
	}
	for _, tt := range tests {
		if got := Ignored([]byte(tt.payload)); got != tt.ignored {
			t.Errorf("Ignored(%s) = %v, want %v", tt.payload, got, tt.ignored)
		}
	}
}

// A message marked with SkipStream on a captured subject reaches core
// subscribers but is not stored, and an unmarked one still is.
func TestSkipStreamOnRealJetStream(t *testing.T) {
	e := newEnv(t, "", true)
	name := "realm/s/ns/sc/o/uc1/ev"
	sub, err := e.nc.SubscribeSync(topic.ToSubject(name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	before, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: topic.ToSubject(name), Data: []byte(`{"object_id":"ev","action":"clientEvent","type":"mousedown"}`), Header: nats.Header{}}
	SkipStream(m.Header)
	if err := e.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	got, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("core subscriber did not get the skipped message: %v", err)
	}
	if string(got.Data) != string(m.Data) {
		t.Fatalf("got %q", got.Data)
	}
	e.barrier("ns", "sc") // a stored message after it, applied
	after, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The barrier is the only message the stream took in.
	if n := after.State.LastSeq - before.State.LastSeq; n != 1 {
		t.Fatalf("stream stored %d messages, want 1 (the barrier only)", n)
	}
}
