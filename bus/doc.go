// Package bus runs xrealm's backbone: an embedded NATS server with
// JetStream. It carries routing between nodes (cluster routes), the
// replicated state (JetStream streams and KV buckets), and the native NATS
// protocol over TCP and WebSocket for services and NATS clients.
//
// Internal services connect in-process with a per-process secret. Every
// other NATS client authenticates with an xrealm token (package auth); its
// publ/subs filters become the connection's NATS permissions and its expiry
// the connection's deadline.
package bus
