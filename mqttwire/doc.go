// Package mqttwire reads MQTT 3.1.1 byte streams for xrealm's broker and
// its bots: a Reader that finds whole packets (fixed header and body) in
// what a connection has sent, and Receive, which reads a connection and
// hands its packets over as they arrive.
//
// On a plain TCP socket Receive makes one read system call per burst of
// data. A net.Conn's Read makes two: the one that returns the data, and,
// after the caller has handled it, one that returns EAGAIN before the
// goroutine waits for the poller. On a connection that sends one small
// packet at a time (a pose every 100 ms) that doubles the reads. Receive
// reads inside one syscall.RawConn.Read and waits for the poller after a
// read that did not fill its buffer, which has emptied the socket.
//
// Decoding the packets is the caller's: the broker and the bots decode
// different subsets, with different costs.
package mqttwire
