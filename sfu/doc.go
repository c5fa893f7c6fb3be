// Package sfu is xrealm's distributed selective forwarding unit.
//
// A Node forwards WebRTC media between the clients connected to it and, over
// relay links (package relay), to and from other nodes, forwarding a track
// to another node only while a subscriber there wants it. A Manager on the
// bus assigns each joining client a node (same site first, then least
// loaded). Clients signal over the bus (Client, or any NATS client) or over
// a WebSocket (Node.Handler). The subjects and messages are documented in
// docs/sfu.md.
//
// Per subscriber, a send-side bandwidth estimator (package bwe, pluggable)
// feeds an allocator (package allocator) that gates pre-negotiated down
// tracks (package downtrack): quality changes never renegotiate. Every
// source track has one retransmission buffer (package buffer) shared by all
// its subscribers.
package sfu
