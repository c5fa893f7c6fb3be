package bots

import "time"

// Schedule is a sender's pace: a pose due at Next, then every Period, on
// an absolute schedule. Every sender of poses keeps one (a Fleet's bot,
// bench rooms' pacers), so that all of them stamp and skip alike:
//
//   - A pose is stamped with the time it was due (Due), not the time it
//     went out, so that a late sender's lateness counts in the latency its
//     receivers measure. A sender held up (its timer or pacer firing late
//     on a busy machine, a write blocked behind a server that stopped
//     reading) would otherwise stamp its pose after the wait and hide it:
//     coordinated omission.
//   - A sender a period or more late skips the ticks before the latest
//     one due rather than bursting, and counts them as missed
//     (Meter.Missed): due, never sent, so never delivered.
type Schedule struct {
	Next   time.Time     // when the next pose is due
	Period time.Duration // above 0
}

// Due returns the stamp of the pose due at Next, in Unix nanoseconds.
func (s *Schedule) Due() int64 { return s.Next.UnixNano() }

// Advance moves the schedule past the tick at Next, just sent (or given
// up), at time now. If now is a period or more past the tick after it,
// the ticks before the latest one due are skipped: Advance returns how
// many (n) and when the first of them was due (first, Unix ns), for
// Meter.Missed(first, n, Period). The tick at Next afterwards is due at
// most a period ago, and goes out at once.
func (s *Schedule) Advance(now time.Time) (first, n int64) {
	s.Next = s.Next.Add(s.Period)
	late := now.Sub(s.Next)
	if late < s.Period {
		return 0, 0
	}
	n = int64(late / s.Period)
	first = s.Next.UnixNano()
	s.Next = s.Next.Add(time.Duration(n) * s.Period)
	return first, n
}

// Skip counts the pose due at s.Next as missed on m (it could not be
// sent: the connection is down) and advances the schedule at now,
// counting the ticks it skips as missed too.
func (s *Schedule) Skip(m *Meter, now time.Time) {
	m.Missed(s.Due(), 1, int64(s.Period))
	if first, n := s.Advance(now); n > 0 {
		m.Missed(first, n, int64(s.Period))
	}
}

// Sent counts the pose due at s.Next as sent on m and advances the
// schedule at now, counting the ticks it skips as missed on m.
func (s *Schedule) Sent(m *Meter, now time.Time) {
	m.Sent(s.Due())
	if first, n := s.Advance(now); n > 0 {
		m.Missed(first, n, int64(s.Period))
	}
}
