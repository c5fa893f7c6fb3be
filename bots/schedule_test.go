package bots

import (
	"testing"
	"time"
)

// Schedule.Advance keeps a sender on its absolute schedule: on time or
// less than a period late, the next tick is a period later; a period or
// more late, the ticks before the latest one due are skipped and named,
// and the schedule stays on its grid.
func TestScheduleAdvance(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	const period = 10 * time.Millisecond
	ms := func(n int64) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name      string
		now       int64 // ms after base (the tick just sent was due at base)
		wantNext  int64 // ms after base
		wantFirst int64 // ms after base of the first skipped tick
		wantN     int64
	}{
		{"sent early", 0, 10, 0, 0},
		{"on time for the next", 10, 10, 0, 0},
		{"late by under a period", 19, 10, 0, 0},
		{"late by exactly a period", 20, 20, 10, 1},
		{"late by two and a half periods", 35, 30, 10, 2},
		{"late by a hundred periods", 1010, 1010, 10, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Schedule{Next: base, Period: period}
			if s.Due() != base.UnixNano() {
				t.Fatalf("Due %d, want the tick's time %d", s.Due(), base.UnixNano())
			}
			first, n := s.Advance(ms(tc.now))
			if !s.Next.Equal(ms(tc.wantNext)) || n != tc.wantN {
				t.Fatalf("Advance at +%d ms: next +%s, %d skipped; want +%d ms, %d", tc.now, s.Next.Sub(base), n, tc.wantNext, tc.wantN)
			}
			if n > 0 && first != ms(tc.wantFirst).UnixNano() {
				t.Errorf("first skipped tick at +%s, want +%d ms", time.Duration(first-base.UnixNano()), tc.wantFirst)
			}
			if late := ms(tc.now).Sub(s.Next); late >= period {
				t.Errorf("the next tick is %s late, a period or more", late)
			}
		})
	}
}

// Schedule.Sent counts the pose as sent at its due time, and the ticks
// skipped as missed: every tick of the schedule is sent or missed.
func TestScheduleSentCountsEveryTick(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	const period = 10 * time.Millisecond
	acc := NewAccounts()
	m := acc.NewMeter()
	acc.OpenWindow(base, base.Add(time.Second))
	s := Schedule{Next: base, Period: period}
	// The tick due at +0 goes out at +0, the one due at +10 ms only at
	// +45 ms (a stall): those due at +20 and +30 are then a period or more
	// late and skipped; those due at +40 and +50 go out at +50 and +60.
	for _, now := range []time.Duration{0, 45 * time.Millisecond, 50 * time.Millisecond, 60 * time.Millisecond} {
		s.Sent(m, base.Add(now))
	}
	w := m.Window()
	if w.Sent != 4 || w.Missed != 2 {
		t.Errorf("sent %d, missed %d; want 4 sent and 2 missed", w.Sent, w.Missed)
	}
	if !s.Next.Equal(base.Add(60 * time.Millisecond)) {
		t.Errorf("next tick at +%s, want +60ms", s.Next.Sub(base))
	}
}
