package persist

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestConflictDelay(t *testing.T) {
	for _, tt := range []struct {
		conflicts int
		want      time.Duration
	}{
		{1, 5 * time.Millisecond},
		{2, 10 * time.Millisecond},
		{7, 320 * time.Millisecond},
		{8, 500 * time.Millisecond},
		{64, 500 * time.Millisecond}, // no overflow
		{1 << 30, 500 * time.Millisecond},
	} {
		if got := conflictDelay(tt.conflicts); got != tt.want {
			t.Errorf("conflictDelay(%d) = %v, want %v", tt.conflicts, got, tt.want)
		}
	}
}

// TestAfterConflictEndsWithContext: the pause between tries of a write
// ends when the applier is stopped.
func TestAfterConflictEndsWithContext(t *testing.T) {
	s := fuzzStore(t)
	if err := s.afterConflict(context.Background(), "k", 0); err != nil {
		t.Errorf("before the first try: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.afterConflict(ctx, "k", 100); !errors.Is(err, context.Canceled) {
		t.Errorf("after 100 conflicts, with the applier stopped: %v, want context.Canceled", err)
	}
}
