// Package mqttwire reads and writes MQTT 3.1.1 framing for xrealm's broker
// and its bots: a Reader that finds whole packets (fixed header and body)
// in what a connection has sent (read into it by streamread.Receive), and
// the encoding of remaining lengths and PUBLISH headers.
//
// Decoding the packets is the caller's: the broker and the bots decode
// different subsets, with different costs.
package mqttwire
