package ubiq

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/bus"
)

// FuzzParseInterest: a room's InterestKey property is set by any member
// (AppendRoomProperties) and read by every node that hosts the room. It is
// refused with an error and mode "all", or gives mode "all", or a kNN
// configuration that setInterest can put in force: K > 0, a rate in
// (0, 100] Hz whose ticker interval (time.NewTicker panics on a
// non-positive one) is positive, and a positive hysteresis that stays
// positive as a time.Duration.
func FuzzParseInterest(f *testing.F) {
	for _, s := range []string{
		``, `{"mode":"all"}`, `{"mode":"knn"}`,
		`{"mode":"knn","k":3,"rate_hz":50,"hysteresis_ms":1}`,
		`{"mode":"knn","k":1,"rate":50,"hysteresis_ms":60000}`,
		`{"mode":"knn","rate_hz":1e-9}`, `{"mode":"knn","rate_hz":0.5}`, `{"mode":"knn","rate_hz":1000}`,
		`{"mode":"knn","rate_hz":-1,"k":-5,"hysteresis_ms":-1}`,
		`{"mode":"grid"}`, `{"mode":5}`, `{"mode":"knn","k":1.5}`, `not json`, `null`, `[]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ic, err := parseInterest(s)
		if err != nil {
			if ic != (interestConfig{Mode: "all"}) {
				t.Fatalf("parseInterest(%q) = %+v with error %v, want mode all", s, ic, err)
			}
			return
		}
		switch ic.Mode {
		case "all":
			if ic != (interestConfig{Mode: "all"}) {
				t.Fatalf("parseInterest(%q) = %+v", s, ic)
			}
			return
		case "knn":
		default:
			t.Fatalf("parseInterest(%q) accepted mode %q", s, ic.Mode)
		}
		if ic.K <= 0 || !(ic.Rate > 0 && ic.Rate <= 100) {
			t.Fatalf("parseInterest(%q) = %+v", s, ic)
		}
		// As setInterest uses them.
		if every := time.Duration(float64(time.Second) / ic.Rate); every <= 0 {
			t.Fatalf("parseInterest(%q) = rate %g Hz, a ticker interval of %v: time.NewTicker panics", s, ic.Rate, every)
		}
		if h := time.Duration(ic.HysteresisMS * float64(time.Millisecond)); ic.HysteresisMS > 0 && h < 0 {
			t.Fatalf("parseInterest(%q) = hysteresis %g ms, which becomes %v", s, ic.HysteresisMS, h)
		}
	})
}

// FuzzParsePosition: a peer's position property ("x,y,z", "x y z" or
// "[x,y,z]") is refused, or read as three finite numbers that read back
// the same from their shortest spelling.
func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{"1,2,3", "1 2 3", "[1.5,2,-3e2]", " [0, 0, 0] ", "1,2", "1,2,3,4", "NaN,0,0", "1e400,0,0", "[1,2,3", "0x1p-2,1_0,+5", ",,1,2,3,,", "[[1,2,3]]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := parsePosition(s)
		if !ok {
			return
		}
		for _, v := range []float64{p.X, p.Y, p.Z} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("parsePosition(%q) = %+v, not finite", s, p)
			}
		}
		g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
		for _, back := range []string{g(p.X) + "," + g(p.Y) + "," + g(p.Z), "[" + g(p.X) + "," + g(p.Y) + "," + g(p.Z) + "]"} {
			if q, ok := parsePosition(back); !ok || q != p {
				t.Fatalf("parsePosition(%q) = %+v, but %q reads as %+v, %v", s, p, back, q, ok)
			}
		}
	})
}

// FuzzDecodeServer: a bot reads the server's messages with DecodeServer.
// It refuses what is not a {type,args} object whose args hold the wanted
// arguments, and what it accepts is what a fresh decode of the same
// arguments gives, and survives EncodeRequest unchanged.
func FuzzDecodeServer(f *testing.F) {
	f.Add(EncodeRequest("PeerPropertiesAppended", PeerPropertiesArgs{UUID: "u", Keys: []string{"a"}, Values: []string{"1"}}))
	f.Add(EncodeRequest("Ping", struct {
		SessionID string `json:"sessionId"`
	}{"s"}))
	f.Add([]byte(`{"type":"X","args":"not json"}`))
	f.Add([]byte(`{"type":"X","args":5}`))
	f.Add([]byte(`{"type":"X"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		var a PeerPropertiesArgs
		typ, err := DecodeServer(payload, &a)
		var r Request
		if json.Unmarshal(payload, &r) != nil {
			if err == nil || typ != "" {
				t.Fatalf("DecodeServer(%q) = %q, %v; it is not a {type,args} object", payload, typ, err)
			}
			return
		}
		if typ != r.Type {
			t.Fatalf("DecodeServer(%q) type %q, want %q", payload, typ, r.Type)
		}
		var fresh PeerPropertiesArgs
		ferr := json.Unmarshal([]byte(r.Args), &fresh)
		if (err != nil) != (ferr != nil) {
			t.Fatalf("DecodeServer(%q): %v; a fresh decode of its args: %v", payload, err, ferr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(a, fresh) {
			t.Fatalf("DecodeServer(%q) args %+v; a fresh decode %+v", payload, a, fresh)
		}
		var again PeerPropertiesArgs
		if typ2, err := DecodeServer(EncodeRequest(typ, a), &again); err != nil || typ2 != typ || !reflect.DeepEqual(again, a) {
			t.Fatalf("re-encoding %q %+v reads back %q %+v, %v", typ, a, typ2, again, err)
		}
	})
}

// seq joins messages with NUL, FuzzServerRequests' separator.
func seq(ms ...[]byte) []byte {
	var b []byte
	for i, m := range ms {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, m...)
	}
	return b
}

// fuzzServer is one Ubiq server on its own bus for a fuzz process.
type fuzzServer struct {
	s   *Server
	tcp string
}

var fuzzBucket atomic.Int64

func startFuzzServer(tb testing.TB) *fuzzServer {
	tb.Helper()
	b, err := bus.Start(bus.Config{DataDir: tb.TempDir(), Name: "ubiq-fuzz", Insecure: true, MaxPayload: 8 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Shutdown)
	nc, err := b.Connect("ubiq-fuzz", nats.NoEcho())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := b.JetStream(ctx, nc)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := NewServer(ctx, Config{NC: nc, JS: js, Bucket: fmt.Sprintf("ubiq-fuzz-%d", fuzzBucket.Add(1)), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go s.Serve(l)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return &fuzzServer{s: s, tcp: l.Addr().String()}
}

// FuzzServerRequests sends a peer's messages to the room server (NUL
// separates them in the input; each goes in its own frame) and then a
// Ping. Whatever the messages, the server must stay up and keep serving
// the connection in order: the Ping is answered. A panic in any request
// handler fails the target.
func FuzzServerRequests(f *testing.F) {
	room := "6f1c0a8e-2b0e-4c55-9a43-6c2e0c7b8d11"
	peer := PeerInfo{UUID: "0b7f4f7c-8a51-4b0e-9a7e-3c8e7f2d1a01", SceneID: NetworkId{A: 1, B: 2}, ClientID: NetworkId{A: 3, B: 4}, Keys: []string{"k"}, Values: []string{"v"}}
	f.Add(seq(EncodeRequest("Join", JoinArgs{UUID: room, Name: "r", Publish: true, Peer: peer}),
		EncodeRequest("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{"[1,2,3]"}}),
		EncodeRequest("AppendRoomProperties", PropertiesArgs{Keys: []string{InterestKey}, Values: []string{`{"mode":"knn","k":2,"rate_hz":20}`}}),
		EncodeRequest("SetBlob", SetBlobArgs{UUID: "b", Blob: "x"}),
		EncodeRequest("GetBlob", GetBlobArgs{UUID: "b"})))
	f.Add(seq(EncodeRequest("Join", JoinArgs{Name: "created", Peer: peer}), EncodeRequest("DiscoverRooms", DiscoverArgs{JoinCode: "abc"})))
	f.Add(seq(EncodeRequest("Join", JoinArgs{JoinCode: "nope", Peer: peer})))
	f.Add(seq(EncodeRequest("SetObserved", SetObservedArgs{Rooms: []string{room, "not-a-uuid", ""}}), EncodeRequest("SetObserved", SetObservedArgs{})))
	f.Add(seq(AppendPositionRequest(nil, 1, 2, 3), []byte(`{"type":"AppendPeerProperties","args":"{\"keys\":[\"a\",\"b\"],\"values\":[\"\"]}"}`)))
	f.Add(seq([]byte(`not json`), []byte(`{"type":"Join","args":"{\"uuid\":5}"}`), []byte(`{"type":5}`), []byte(`{"type":"Explode","args":"{}"}`)))
	srv := startFuzzServer(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		pings := make(chan struct{}, 16)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := Dial(ctx, srv.tcp, ClientOptions{OnFrame: func(fr []byte) {
			if typ, err := DecodeServer(fr[HeaderSize:], nil); err == nil && typ == "Ping" {
				select {
				case pings <- struct{}{}:
				default:
				}
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i, m := range strings.Split(string(in), "\x00") {
			if i >= 32 {
				break
			}
			if len(m) < 4 { // a frame must hold four payload bytes
				m += "    "[len(m):]
			}
			if err := c.Send(ServerID, []byte(m)); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
		if err := c.Request("Ping", ClientArgs{ClientID: NetworkId{A: 9, B: 9}}); err != nil {
			t.Fatalf("send Ping: %v", err)
		}
		select {
		case <-pings:
		case <-c.Done():
			t.Fatalf("the server closed the connection: %v", c.Err())
		case <-ctx.Done():
			t.Fatalf("no answer to Ping after the messages %q", in)
		}
	})
}
