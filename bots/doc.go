// Package bots runs synthetic users against a scene server.
//
// A bot is three independent parts:
//
//   - a Behaviour moves its pose (static, randomwalk, boids, replay);
//   - a Transport carries poses to the server and back (MQTT over TCP or
//     WebSocket here; the Ubiq and WebRTC transports of later work plug in
//     through the same interface);
//   - a Meter accounts for what the bot sent and received: counters and
//     HDR histograms of one-way latency, computed from the send timestamp
//     every pose carries (sender and receiver share a host clock); the
//     meters of a fleet share a few histograms (Accounts).
//
// A Fleet puts N bots together, spreads them over scenes, paces their
// sends and aggregates their meters for live progress and for measurement
// windows with exact delivery ratios.
//
// The MQTT client is lean on purpose, so that the generator is not the
// bottleneck of a benchmark: one read goroutine per connection, reading
// with its own system calls into a large buffer (no second read for
// EAGAIN after a read that emptied the socket), decoding PUBLISH packets
// in place without allocating and counting a read's messages together
// (Receiver), and writes made directly by the sender under a mutex. Control packets are encoded and decoded with the Eclipse Paho
// packets library.
package bots
