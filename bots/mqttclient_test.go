package bots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// silentServer accepts connections and never answers: a server that is
// not MQTT, or hangs.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return ln.Addr().String()
}

// The end of the context (Ctrl-C) ends a handshake the server does not
// answer, with the context's error, so that `xrealm bots` interrupted
// while connecting stops. It fails if the handshake waits out its 15 s
// deadline and fails with an i/o timeout.
func TestDialMQTTEndsWithContext(t *testing.T) {
	addr := silentServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := DialMQTT(ctx, MQTTConfig{Addr: addr, ClientID: "c"})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it send CONNECT and wait (the result is the same if not)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("DialMQTT after its context ended: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DialMQTT still waiting 10 s after its context ended")
	}
}

// DialMQTT says plainly what is wrong with an address that is not an MQTT
// server over TCP or WebSocket.
func TestDialMQTTWrongServer(t *testing.T) {
	// An HTTP server that answers a request it cannot parse at once (Go's
	// waits for a line end the CONNECT packet does not have).
	h := httptest.NewServer(http.NotFoundHandler())
	defer h.Close()
	bad, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	go func() {
		for {
			c, err := bad.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"))
			c.Close()
		}
	}()
	hostPort := strings.TrimPrefix(h.URL, "http://")
	for _, tc := range []struct {
		name, addr string
		want       string
	}{
		{"an HTTP server's port", bad.Addr().String(), "an HTTP server answered CONNECT"},
		{"an http:// URL", h.URL + "/mqtt", "not HTTP"},
		{"an https:// URL", "https://" + hostPort + "/mqtt", "not HTTP"},
		{"MQTT over TLS", "mqtts://" + hostPort, `scheme "mqtts"`},
		{"a WebSocket path that is not MQTT", "ws://" + hostPort + "/nope", "websocket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := DialMQTT(ctx, MQTTConfig{Addr: tc.addr, ClientID: "c"})
			if err == nil {
				c.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.addr) {
				t.Errorf("error %q: want it to name %s and say %q", err, tc.addr, tc.want)
			}
		})
	}
}

// mqtt://host:port and tcp://host:port are MQTT over TCP, as paho and
// Mosquitto's tools write them.
func TestDialMQTTSchemes(t *testing.T) {
	for _, scheme := range []string{"", "mqtt://", "tcp://"} {
		addr := scheme + scriptedBroker(t, nil, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := DialMQTT(ctx, MQTTConfig{Addr: addr, ClientID: "schemes"})
		cancel()
		if err != nil {
			t.Errorf("%s: %v", addr, err)
			continue
		}
		c.Close()
	}
}

// The connection's end says the server closed it, rather than only
// "read: EOF".
func TestMQTTClientErrWhenServerCloses(t *testing.T) {
	addr := scriptedBroker(t, nil, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialMQTT(ctx, MQTTConfig{Addr: addr, ClientID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the connection did not end when the server closed it")
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "the server closed the connection") {
		t.Errorf("Err() = %v, want it to say the server closed the connection", err)
	}
}

// A server that stops with bytes unread resets the connection (a read
// gets ECONNRESET, a write EPIPE): that is the server closing it too, and
// the bots say so rather than "broken pipe" alone.
func TestPeerClosed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{io.EOF, true},
		{fmt.Errorf("read: %w", io.EOF), true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, false},
		{net.ErrClosed, false}, // closed by this end
		{errors.New("short PUBLISH"), false},
	} {
		if got := peerClosed(tc.err); got != tc.want {
			t.Errorf("peerClosed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
