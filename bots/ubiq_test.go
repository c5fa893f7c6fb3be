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

// What a bot keeps per sender stays bounded whatever ids a room's peers
// send from: a frame from avatar 1048575 grew every bot's slice to a
// million entries (8 MB a bot: gigabytes for a fleet), and every distinct
// other id stayed in the map for good. Rate limiting still holds.
func TestDecodeTimesBounded(t *testing.T) {
	var d decodeTimes
	far := ubiq.NetworkId{A: 1<<20 - 1, B: 0xb07}
	if !d.due(far, 1000, 100) || d.due(far, 1050, 100) || !d.due(far, 1100, 100) {
		t.Error("a far avatar's decodes are not limited to one per period")
	}
	if n := len(d.bots); n > 2048 {
		t.Errorf("one frame from avatar %d grew the table to %d entries", far.A, n)
	}
	for i := range 200_000 {
		d.due(ubiq.NetworkId{A: uint32(i), B: uint32(i) + 1}, 1000, 100)
	}
	if n := len(d.other); n > maxDecodeOthers {
		t.Errorf("%d other senders kept, want at most %d", n, maxDecodeOthers)
	}
	// Dense avatar ids, in any order, are in the slice.
	for _, a := range []uint32{900, 3, 1500, 40} {
		id := ubiq.NetworkId{A: a, B: 0xb07}
		if !d.due(id, 1000, 100) || d.due(id, 1050, 100) {
			t.Errorf("avatar %d: decodes not limited", a)
		}
	}
}
