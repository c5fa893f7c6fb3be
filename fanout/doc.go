// Package fanout holds the connection machinery that xrealm's client front
// ends (MQTT, Ubiq) share: a per-connection outgoing queue with a bound, and
// a writer goroutine that sends whatever is queued in one write.
//
// The writer never waits when the connection is idle: a frame queued to an
// idle connection is written at once, and on a socket by the caller of
// Enqueue itself, with one non-blocking system call (no goroutine hand-off;
// what the socket does not take goes to the writer goroutine). While a write is in progress, frames
// pile up and go out together in the next write, so a busy connection costs
// one system call per batch instead of one per message. With a linger
// interval (Options.Linger), a connection with steady traffic writes at most
// once per interval, but an urgent frame (an interaction or an
// acknowledgement, Frame.Urgent) ends the wait at once, and a frame with a
// bound of its own (Frame.Within) shortens it. The ends of the
// linger intervals are kept by one Clock per front end: its timer writes
// every connection due at about the same time, on its own goroutine, with
// one non-blocking system call each, so a lingering write costs no timer and
// no goroutine hand-off of its own. A Clock with a write budget
// (NewBudgetClock) stretches all its writers' intervals alike while their
// lingering writes exceed the budget. When the queue is
// full, a frame with a coalescing key replaces the queued frame with the same
// key (a newer pose of the same object), and otherwise it is dropped and
// counted; the queue never grows without bound and a slow reader never slows
// the goroutine that fans out to everyone. A message's Frame is made once and
// queued by pointer to every connection it goes to, so that the queues of a
// node with many busy connections stay small enough for the CPU's cache.
package fanout
