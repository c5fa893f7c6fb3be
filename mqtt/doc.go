// Package mqtt is xrealm's MQTT 3.1.1 front end, served over TCP, TLS and
// WebSocket.
//
// Packets are encoded and decoded with the Eclipse Paho packets library.
// Every connection presents an xrealm token as its password (user name equal
// to the token's sub); each PUBLISH and SUBSCRIBE is checked against the
// token's rights, and the connection is closed when the token expires.
//
// Fan-out does not go through NATS's own MQTT support. Each node holds one
// in-process NATS subscription per active scene (see Hub) and delivers to
// its local connections itself, matching MQTT topic filters; every
// connection has a bounded queue and a writer that batches while busy
// (package fanout). Local publishes are delivered directly and also
// published on NATS, with echo off, for other nodes and NATS clients.
//
// QoS 0 and 1 are supported end to end. A QoS 1 PUBLISH on a persisted
// object topic is published through JetStream and acknowledged only after
// the stream has stored it. QoS 2 PUBLISHes are accepted (PUBREC/PUBCOMP)
// and delivered at QoS 1 at most. Sessions are clean: nothing is kept for a
// client across connections, and retained messages are not stored.
package mqtt
