package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/sfu"
)

// sfuSocket is a client of /sfu/ws.
type sfuSocket struct {
	t *testing.T
	c *websocket.Conn
}

func dialSFU(t *testing.T, n *testNode, query string, hdr http.Header) *sfuSocket {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial(strings.Replace(n.httpURL, "http://", "ws://", 1)+"/sfu/ws"+query, hdr)
	if err != nil {
		t.Fatalf("dial /sfu/ws%s: %v", query, err)
	}
	t.Cleanup(func() { c.Close() })
	return &sfuSocket{t, c}
}

// ask sends s and returns the reply to it, skipping events.
func (s *sfuSocket) ask(sig sfu.Signal) sfu.Reply {
	s.t.Helper()
	if err := s.c.WriteJSON(sig); err != nil {
		s.t.Fatal(err)
	}
	s.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		var r sfu.Reply
		if err := s.c.ReadJSON(&r); err != nil {
			s.t.Fatalf("reply to %s: %v", sig.Op, err)
		}
		if r.Op == "answer" || r.Op == "ok" || r.Op == "error" {
			return r
		}
	}
}

// recvOffer returns the SDP of a receive-only offer with gathered candidates.
func recvOffer(t *testing.T) string {
	t.Helper()
	se := sfu.NewSettingEngine([]string{"127.0.0.1"}, 0, 0)
	pc, err := webrtc.NewAPI(webrtc.WithSettingEngine(se)).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		t.Fatal(err)
	}
	sdp, err := sfu.Gathered(pc, true)
	if err != nil {
		t.Fatal(err)
	}
	return sdp
}

// TestSFUSignalling: /sfu/ws signals only for the session of the scene its
// URL names, for a request that may read that scene; a socket signals for
// one client; and a socket that closes takes its client out of the SFU.
func TestSFUSignalling(t *testing.T) {
	n := startNode(t, nil)
	session := sfu.SessionOf("lab", "room1")
	stats := func(s *sfuSocket, client string) sfu.Reply {
		return s.ask(sfu.Signal{Op: "stats", Session: session, Client: client, Frames: &sfu.FrameReport{}})
	}
	bad := []struct {
		name, query string
		hdr         http.Header
		session     string
		want        string
	}{
		{"no scene", "", nil, session, "must name its scene"},
		{"another scene's session", "?scene=lab/room1", nil, sfu.SessionOf("lab", "other"), "is not the session of scene lab/room1"},
		{"an invalid token", "?scene=lab/room1", http.Header{"Authorization": {"Bearer not-a-token"}}, session, "token"},
	}
	for _, b := range bad {
		r := dialSFU(t, n, b.query, b.hdr).ask(sfu.Signal{Op: "stats", Session: b.session, Client: "c1", Frames: &sfu.FrameReport{}})
		if r.Op != "error" || !strings.Contains(r.Error, b.want) {
			t.Errorf("%s: reply %+v, want an error containing %q", b.name, r, b.want)
		}
	}

	tok := n.token(t, "vi", "lab/room1", auth.RoleViewer, time.Hour)
	s := dialSFU(t, n, "?scene=lab%2Froom1", http.Header{"Cookie": {"mqtt_token=" + tok}})
	if r := s.ask(sfu.Signal{Op: "offer", Session: session, Client: "c1", SDP: recvOffer(t)}); r.Op != "answer" {
		t.Fatalf("offer with a viewer's token: %+v", r)
	}
	if r := stats(s, "c2"); r.Op != "error" || !strings.Contains(r.Error, `signals for session "lab-room1" client "c1"`) {
		t.Errorf("a second client on the socket: %+v", r)
	}
	if r := stats(s, "c1"); r.Op != "ok" {
		t.Errorf("stats of the socket's own client: %+v", r)
	}
	if got := metricSum(t, n, "xrealm_sfu_clients"); got != 1 {
		t.Fatalf("xrealm_sfu_clients = %v with one client, want 1", got)
	}
	s.c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for metricSum(t, n, "xrealm_sfu_clients") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the client is still in the SFU 10 s after its socket closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metricSum adds up the samples of a metric on the node's /metrics.
func metricSum(t *testing.T, n *testNode, name string) float64 {
	t.Helper()
	resp, err := http.Get(n.httpURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// TestSFUClientBoundToToken: a token issued for a userclient joins the
// SFU only as that client (as the SFU spells it: sfu.NameOf); the
// token in the offer counts in place of the socket's cookie (tabs of one
// browser share the cookie); an editor's token, and a viewer's issued
// without a userclient, may join as any client.
func TestSFUClientBoundToToken(t *testing.T) {
	n := startNode(t, nil)
	session := sfu.SessionOf("lab", "room1")
	issue := func(user string, role auth.Role, userClient string) string {
		tok, err := n.Keys.Issue(user, auth.SceneRights("realm", "lab", "room1", role, userClient), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	alice, bob := issue("alice", auth.RoleViewer, "xr-alice"), issue("bob", auth.RoleViewer, "xr-bob")
	// The node's SFU takes joins once its manager has heard from it: until
	// then an offer is answered "no SFU node is available".
	editor := issue("dave", auth.RoleEditor, "")
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := dialSFU(t, n, "?scene=lab/room1", http.Header{"Cookie": {"mqtt_token=" + editor}})
		r := s.ask(sfu.Signal{Op: "offer", Session: session, Client: "warm-up", SDP: recvOffer(t)})
		s.c.Close()
		if r.Op == "answer" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SFU takes no join 20 s after start: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cases := []struct {
		name          string
		cookie, offer string // tokens
		client        string
		want          string // "" = answered
	}{
		{"own client, cookie", alice, "", "xr-alice", ""},
		{"another's client, cookie", alice, "", "xr-bob", `user alice may not act as client "xr-bob"`},
		{"another's client, token in the offer", "", bob, "xr-alice", `user bob may not act as client "xr-alice"`},
		{"the offer's token, not the cookie", alice, bob, "xr-bob", ""},
		{"a viewer issued no userclient", issue("carol", auth.RoleViewer, ""), "", "anything", ""},
		{"an editor", issue("dave", auth.RoleEditor, "xr-dave"), "", "someone-else", ""},
		{"a userclient the SFU spells otherwise", issue("erin", auth.RoleViewer, "erin.k"), "", "erin_k", ""},
		{"that userclient as it is", issue("erin", auth.RoleViewer, "erin.k"), "", "erin.k", "client"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var hdr http.Header
			if c.cookie != "" {
				hdr = http.Header{"Cookie": {"mqtt_token=" + c.cookie}}
			}
			s := dialSFU(t, n, "?scene=lab/room1", hdr)
			r := s.ask(sfu.Signal{Op: "offer", Session: session, Client: c.client, SDP: recvOffer(t), Token: c.offer})
			switch {
			case c.want == "" && r.Op != "answer":
				t.Fatalf("offer as %q: %+v, want an answer", c.client, r)
			case c.want != "" && (r.Op != "error" || !strings.Contains(r.Error, c.want)):
				t.Fatalf("offer as %q: %+v, want an error containing %q", c.client, r, c.want)
			}
			if r.Op == "answer" {
				s.ask(sfu.Signal{Op: "leave", Session: session, Client: c.client})
			}
		})
	}
}

// The SFU node lives as long as the server, not as long as the context
// Start was given to bound the start. It fails if the node announces
// itself only until that context ends (here, at once, as startNode cancels
// it after Start): its session manager then drops it as dead, and no
// client can join a session.
func TestSFUOutlivesStartContext(t *testing.T) {
	n := startNode(t, nil)
	nc, err := n.bus.Connect("test-sfu-heartbeats")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("sfu.nodes")
	if err != nil {
		t.Fatal(err)
	}
	id := sfuID(n.cfg.nodeName())
	for beats := 0; beats < 2; {
		m, err := sub.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("%d heartbeats of SFU node %s after Start: %v", beats, id, err)
		}
		var info sfu.NodeInfo
		if json.Unmarshal(m.Data, &info) == nil && info.ID == id && !info.Leaving {
			beats++
		}
	}
}
