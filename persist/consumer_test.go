package persist

import (
	"context"
	"testing"
	"time"
)

// The applier's durable consumer deleted under it (an operator's
// mistake, a stream restored from a backup) is made again: the messages
// still in the stream, and those after, are applied without a restart.
func TestApplierRecreatesDeletedConsumer(t *testing.T) {
	e := newEnv(t, "", true)
	e.pub(tp+"before", `{"object_id":"before","action":"create","persist":true,"data":{}}`)
	e.waitObject("ns", "sc", "before", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.js.DeleteConsumer(ctx, StreamName, ConsumerName); err != nil {
		t.Fatal(err)
	}
	e.pub(tp+"after", `{"object_id":"after","action":"create","persist":true,"data":{}}`)
	e.waitObject("ns", "sc", "after", nil)
}
