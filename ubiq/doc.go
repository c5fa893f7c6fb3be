// Package ubiq is xrealm's Ubiq-compatible room server: the wire protocol
// of UCL's Ubiq (https://ubiq.online) over TCP, WebSocket and secure
// WebSocket, with rooms shared by every node of an xrealm cluster.
//
// A frame is [int32 LE length][8-byte NetworkId][payload], where length
// counts the NetworkId and the payload. Frames addressed to the room server
// (NetworkId a=0, b=1) carry JSON requests {type, args} whose args is itself
// a JSON string; every other frame is relayed unchanged to the sender's
// room. docs/ubiq.md describes the protocol in full.
//
// Room state (room info and properties, members and their properties,
// observers, join codes, blobs) lives in a JetStream key-value bucket, so
// that every node sees the same rooms; each node watches the keys of the
// rooms its connections are in and turns changes into PeerAdded,
// PeerRemoved and property notifications. Relayed frames travel on one
// core NATS subject per room: a node holds one subscription per room that
// has local members or observers and fans out locally through per
// connection fanout.Writers, which batch while a connection is busy. When a
// queue is full, a newer frame replaces a stale one only for the objects
// that their sender declared as state (CoalesceKey); other frames may be
// events, and are never replaced. Nothing is dropped: events and the
// server's own messages are queued past the bound, up to the bound again,
// and a peer that falls further behind is disconnected. What one sender
// can make the server fan out is bounded by its inbound budget
// (Config.Inbound, token buckets of frames and bytes a second): a peer
// that sends more is read no faster than its budget refills, so that flow
// control holds back that sender alone, and one flooding peer cannot get
// the slower readers of its room disconnected.
//
// Beyond Ubiq, a peer may observe rooms it is not a member of
// (SetObserved, for hex-grid areas of interest), and a room may restrict
// delivery to each peer's k nearest neighbours (the room property
// xrealm.interest), with positions taken from the peer property
// xrealm.position.
package ubiq
