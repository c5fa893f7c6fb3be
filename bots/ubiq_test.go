package bots

import (
	"testing"

	"github.com/xrealm/xrealm/ubiq"
)

func TestDecodeTimes(t *testing.T) {
	var d decodeTimes
	bot := ubiq.NetworkId{A: 5, B: 0xb07}
	other := ubiq.NetworkId{A: 5, B: 1}
	steps := []struct {
		id   ubiq.NetworkId
		now  int64
		want bool
	}{
		{bot, 100, true}, {bot, 150, false}, {other, 150, true}, {bot, 200, true},
		{other, 200, false}, {other, 250, true}, {ubiq.NetworkId{A: 3000, B: 0xb07}, 10, false}, {ubiq.NetworkId{A: 3000, B: 0xb07}, 100, true},
	}
	for i, s := range steps {
		if got := d.due(s.id, s.now, 100); got != s.want {
			t.Errorf("step %d: due(%v, %d) = %v, want %v", i, s.id, s.now, got, s.want)
		}
	}
}
