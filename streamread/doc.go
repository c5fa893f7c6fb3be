// Package streamread reads byte streams off connections for the framing
// layers of xrealm's front ends and bots (MQTT in mqttwire, Ubiq frames in
// ubiq): a Buffer that holds what a connection has sent and not yet been
// taken, and Receive, which reads a connection into it and calls back after
// each read, so that the framing layer takes the whole packets.
//
// On a plain TCP socket Receive makes one read system call per burst of
// data. A net.Conn's Read makes two: the one that returns the data, and,
// after the caller has handled it, one that returns EAGAIN before the
// goroutine waits for the poller. On a connection that sends one small
// packet at a time (a pose every 100 ms) that doubles the reads. Receive
// reads inside one syscall.RawConn.Read and waits for the poller after a
// read that did not fill its buffer, which has emptied the socket.
//
// While Receive reads a plain socket, each read lands in a shared buffer
// borrowed for that read, so an idle connection keeps only the bytes of a
// packet not yet complete.
package streamread
