package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/internal/testnet"
	"github.com/xrealm/xrealm/ubiq"
)

type testNode struct {
	*Server
	httpURL, mqttURL, wsURL string
}

func startNode(t *testing.T, mod func(*Config)) *testNode {
	t.Helper()
	level := slog.LevelWarn
	if os.Getenv("XREALM_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	var cfg Config
	var s *Server
	var err error
	// A port found free can be taken (by any process's outgoing connection)
	// before the server binds it: try again with new ports.
	for attempt := 0; attempt < 3; attempt++ {
		cfg = Defaults()
		cfg.DataDir = t.TempDir()
		p := testnet.FreePorts(t, 3)
		cfg.HTTPAddr, cfg.MQTTAddr, cfg.MQTTWSAddr = p[0], p[1], p[2]
		cfg.HTTPSAddr, cfg.MQTTSAddr, cfg.NATSAddr, cfg.NATSWSAddr = "", "", "", ""
		cfg.UbiqAddr, cfg.UbiqWSSAddr, cfg.UbiqWSAddr = "", "", ""
		cfg.MaxPayload = 64 << 10
		if mod != nil {
			mod(&cfg)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err = Start(ctx, cfg, log)
		cancel()
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return &testNode{Server: s, httpURL: "http://" + cfg.HTTPAddr, mqttURL: "tcp://" + cfg.MQTTAddr, wsURL: "ws://" + cfg.MQTTWSAddr + "/mqtt"}
}

func (n *testNode) token(t *testing.T, user, scene string, role auth.Role, ttl time.Duration) string {
	t.Helper()
	ns, sc, _ := strings.Cut(scene, "/")
	tok, err := n.Keys.Issue(user, auth.SceneRights("realm", ns, sc, role, ""), ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// inbox collects messages a client receives.
type inbox struct {
	mu   sync.Mutex
	msgs []paho.Message
	ch   chan struct{}
}

func newInbox() *inbox { return &inbox{ch: make(chan struct{}, 1)} }

func (b *inbox) handler(_ paho.Client, m paho.Message) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
	select {
	case b.ch <- struct{}{}:
	default:
	}
}

// wait returns the first message whose topic has the given suffix.
func (b *inbox) wait(t *testing.T, topicSuffix string, d time.Duration) paho.Message {
	t.Helper()
	deadline := time.After(d)
	for {
		b.mu.Lock()
		for _, m := range b.msgs {
			if strings.HasSuffix(m.Topic(), topicSuffix) {
				b.mu.Unlock()
				return m
			}
		}
		b.mu.Unlock()
		select {
		case <-b.ch:
		case <-deadline:
			t.Fatalf("no message on *%s within %s", topicSuffix, d)
		}
	}
}

func (b *inbox) has(topicSuffix string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.msgs {
		if strings.HasSuffix(m.Topic(), topicSuffix) {
			return true
		}
	}
	return false
}

func connect(t *testing.T, url, user, token string) (paho.Client, error) {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("%s-%d", user, time.Now().UnixNano())).
		SetUsername(user).SetPassword(token).SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second)
	c := paho.NewClient(o)
	tk := c.Connect()
	if !tk.WaitTimeout(5 * time.Second) {
		return nil, fmt.Errorf("connect timed out")
	}
	if err := tk.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c, nil
}

func mustConnect(t *testing.T, url, user, token string) paho.Client {
	t.Helper()
	c, err := connect(t, url, user, token)
	if err != nil {
		t.Fatalf("connect %s: %v", user, err)
	}
	return c
}

func subscribe(t *testing.T, c paho.Client, filter string, b *inbox) byte {
	t.Helper()
	tk := c.Subscribe(filter, 1, b.handler)
	if !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatalf("subscribe %s: %v", filter, tk.Error())
	}
	return tk.(*paho.SubscribeToken).Result()[filter]
}

func publish(t *testing.T, c paho.Client, topic string, qos byte, payload string) {
	t.Helper()
	tk := c.Publish(topic, qos, false, payload)
	if !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatalf("publish %s: %v", topic, tk.Error())
	}
}

func getJSON(t *testing.T, url, token string, v any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, b)
		}
	}
	return resp.StatusCode
}

type object struct {
	ObjectID   string         `json:"object_id"`
	Type       string         `json:"type"`
	Attributes map[string]any `json:"attributes"`
}

// waitObjects polls GET /persist until cond holds.
func waitObjects(t *testing.T, n *testNode, scene, token string, cond func([]object) bool) []object {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var objs []object
		getJSON(t, n.httpURL+"/persist/"+scene, token, &objs)
		if cond(objs) {
			return objs
		}
		if time.Now().After(deadline) {
			t.Fatalf("persisted objects of %s never met the condition; last: %+v", scene, objs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func byID(objs []object, id string) *object {
	for i := range objs {
		if objs[i].ObjectID == id {
			return &objs[i]
		}
	}
	return nil
}

const base = "realm/s/lab/room1"

func TestPubSubPersistAndRights(t *testing.T) {
	n := startNode(t, nil)
	edTok := n.token(t, "ed", "lab/room1", auth.RoleEditor, time.Hour)
	vwTok := n.token(t, "vi", "lab/room1", auth.RoleViewer, time.Hour)
	ed := mustConnect(t, n.mqttURL, "ed", edTok)
	vw := mustConnect(t, n.mqttURL, "vi", vwTok)
	vin, ein := newInbox(), newInbox()
	if q := subscribe(t, vw, base+"/+/+/+", vin); q != 1 {
		t.Fatalf("viewer subscription granted %d", q)
	}
	subscribe(t, ed, base+"/#", ein)
	if q := subscribe(t, vw, "realm/s/lab/other/#", vin); q != 0x80 {
		t.Fatalf("viewer subscription to another scene granted %d, want 0x80", q)
	}

	// A persisted create at QoS 1 is delivered and stored.
	publish(t, ed, base+"/o/ed-1/box1", 1, `{"object_id":"box1","action":"create","type":"object","persist":true,"data":{"object_type":"box","position":{"x":1,"y":2,"z":3},"color":"#ff0000"}}`)
	vin.wait(t, "/o/ed-1/box1", 5*time.Second)
	// QoS 1 was acknowledged after JetStream stored it; the KV follows.
	objs := waitObjects(t, n, "lab/room1", vwTok, func(o []object) bool { return byID(o, "box1") != nil })
	if got := byID(objs, "box1").Attributes["color"]; got != "#ff0000" {
		t.Fatalf("color = %v", got)
	}
	// Update merges, null removes.
	publish(t, ed, base+"/o/ed-1/box1", 1, `{"object_id":"box1","action":"update","type":"object","persist":true,"data":{"color":null,"scale":{"x":2,"y":2,"z":2}}}`)
	waitObjects(t, n, "lab/room1", vwTok, func(o []object) bool {
		b := byID(o, "box1")
		_, hasColor := b.Attributes["color"]
		return b != nil && !hasColor && b.Attributes["scale"] != nil && b.Attributes["position"] != nil
	})

	// Viewers may move their camera and click, but not edit.
	publish(t, vw, base+"/u/vi-1/camera_vi", 0, `{"object_id":"camera_vi","action":"update","type":"object","data":{"position":{"x":0,"y":1.6,"z":0}}}`)
	ein.wait(t, "/u/vi-1/camera_vi", 5*time.Second)
	publish(t, vw, base+"/o/vi-1/box1", 0, `{"object_id":"box1","action":"clientEvent","type":"mousedown","data":{"source":"camera_vi"}}`)
	ein.wait(t, "/o/vi-1/box1", 5*time.Second)
	publish(t, vw, base+"/o/vi-1/evil", 1, `{"object_id":"evil","action":"create","type":"object","persist":true,"data":{"object_type":"box"}}`)
	publish(t, vw, base+"/o/vi-1/box1", 1, `{"object_id":"box1","action":"delete"}`)

	// Invalid messages from an editor: not persisted, nobody disconnected.
	publish(t, ed, base+"/o/ed-1/bad1", 1, `{"object_id":"bad1","action":"create",`)
	publish(t, ed, base+"/o/ed-1/bad2", 1, `{"object_id":"not-bad2","action":"create","persist":true,"data":{}}`)
	publish(t, ed, base+"/o/ed-1/bad3", 1, `{"object_id":"bad3","action":"explode","persist":true,"data":{}}`)
	publish(t, ed, base+"/o/ed-1/box2", 1, `{"object_id":"box2","action":"create","type":"object","persist":true,"data":{"object_type":"sphere"}}`)
	objs = waitObjects(t, n, "lab/room1", vwTok, func(o []object) bool { return byID(o, "box2") != nil })
	for _, id := range []string{"evil", "bad1", "bad2", "not-bad2", "bad3"} {
		if byID(objs, id) != nil {
			t.Errorf("object %s was persisted", id)
		}
	}
	if byID(objs, "box1") == nil {
		t.Error("a viewer deleted box1")
	}
	if ein.has("/o/vi-1/evil") {
		t.Error("the viewer's create reached other clients")
	}
	if !ed.IsConnectionOpen() || !vw.IsConnectionOpen() {
		t.Fatal("a client was disconnected")
	}

	// Payloads over the limit are refused; the sender stays connected.
	publish(t, ed, base+"/o/ed-1/big", 0, `{"object_id":"big","action":"create","data":{"pad":"`+strings.Repeat("x", 70<<10)+`"}}`)
	publish(t, ed, base+"/o/ed-1/after", 0, `{"object_id":"after","action":"clientEvent"}`)
	vin.wait(t, "/o/ed-1/after", 5*time.Second)
	if vin.has("/o/ed-1/big") {
		t.Error("oversized payload was delivered")
	}
	// One just under the limit, larger than a read buffer's quarter
	// (which a read then completes in the connection's own buffer), comes
	// through whole.
	large := `{"object_id":"large","action":"clientEvent","data":{"pad":"` + strings.Repeat("y", 60<<10) + `"}}`
	publish(t, ed, base+"/o/ed-1/large", 0, large)
	if m := vin.wait(t, "/o/ed-1/large", 5*time.Second); string(m.Payload()) != large {
		t.Errorf("a payload of %d bytes arrived as %d bytes", len(large), len(m.Payload()))
	}

	// REST follows the same rights: a token for another scene reads this
	// publicly readable scene (as anyone may), but does not write it.
	otherTok := n.token(t, "ot", "lab/other", auth.RoleEditor, time.Hour)
	if code := getJSON(t, n.httpURL+"/persist/lab/room1", otherTok, nil); code != 200 {
		t.Errorf("GET of a public scene with another scene's token: %d, want 200", code)
	}
	for _, tk := range []string{otherTok, vwTok} {
		req, _ := http.NewRequest("DELETE", n.httpURL+"/persist/lab/room1", nil)
		req.Header.Set("Authorization", "Bearer "+tk)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("DELETE scene without write rights: %d, want 403", resp.StatusCode)
		}
	}
}

func TestConnectRefusals(t *testing.T) {
	n := startNode(t, nil)
	good := n.token(t, "ann", "lab/room1", auth.RoleEditor, time.Hour)
	expired := n.token(t, "ann", "lab/room1", auth.RoleEditor, -time.Minute)
	for name, tc := range map[string][2]string{
		"expired":   {"ann", expired},
		"wrongUser": {"bob", good},
		"noToken":   {"ann", ""},
		"garbage":   {"ann", "not-a-jwt"},
	} {
		if _, err := connect(t, n.mqttURL, tc[0], tc[1]); err == nil {
			t.Errorf("%s: connected, want refused", name)
		}
	}
}

func TestTokenExpiryDisconnects(t *testing.T) {
	n := startNode(t, nil)
	lost := make(chan struct{})
	o := paho.NewClientOptions().AddBroker(n.mqttURL).SetClientID("short").SetUsername("sam").
		SetPassword(n.token(t, "sam", "lab/room1", auth.RoleEditor, 1500*time.Millisecond)).SetAutoReconnect(false).
		SetConnectionLostHandler(func(paho.Client, error) { close(lost) })
	c := paho.NewClient(o)
	if tk := c.Connect(); !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatal(tk.Error())
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("connection stayed open after its token expired")
	}
}

func TestWebSocketAndLastWill(t *testing.T) {
	n := startNode(t, nil)
	tok := n.token(t, "web", "lab/room1", auth.RoleViewer, time.Hour)
	watcher := mustConnect(t, n.mqttURL, "ed", n.token(t, "ed", "lab/room1", auth.RoleEditor, time.Hour))
	in := newInbox()
	subscribe(t, watcher, base+"/#", in)

	o := paho.NewClientOptions().AddBroker(n.wsURL).SetClientID("web-1").SetUsername("web").SetPassword(tok).
		SetAutoReconnect(false).SetWill(base+"/x/web-1/web", `{"object_id":"web","action":"leave"}`, 0, false)
	ws := paho.NewClient(o)
	if tk := ws.Connect(); !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatalf("WebSocket connect: %v", tk.Error())
	}
	publish(t, ws, base+"/x/web-1/web", 0, `{"object_id":"web","action":"join"}`)
	in.wait(t, "/x/web-1/web", 5*time.Second)
	// Kill the connection without DISCONNECT: the will is published.
	in.mu.Lock()
	in.msgs = nil
	in.mu.Unlock()
	if !n.mqtt.Kick("web-1", "test") {
		t.Fatal("web-1 is not connected")
	}
	m := in.wait(t, "/x/web-1/web", 5*time.Second)
	if !strings.Contains(string(m.Payload()), "leave") {
		t.Fatalf("will payload = %s", m.Payload())
	}
}

// rawConnect dials the MQTT port and sends a CONNECT with the given
// keepalive and will, without waiting for the CONNACK.
func rawConnect(t *testing.T, addr, id, user, token string, keepalive uint16, willTopic, will string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(addr, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion, cp.CleanSession = "MQTT", 4, true
	cp.ClientIdentifier, cp.Keepalive = id, keepalive
	cp.UsernameFlag, cp.Username, cp.PasswordFlag, cp.Password = true, user, true, []byte(token)
	if willTopic != "" {
		cp.WillFlag, cp.WillTopic, cp.WillMessage = true, willTopic, []byte(will)
	}
	if err := cp.Write(nc); err != nil {
		t.Fatal(err)
	}
	return nc
}

// A client whose socket closes right after its last packet, with no
// DISCONNECT, is noticed (its will is published) even when the close
// arrives together with that packet; a client silent for longer than
// 1.5 times its keepalive is disconnected.
func TestAbruptCloseAndKeepaliveOverTCP(t *testing.T) {
	n := startNode(t, nil)
	watcher := mustConnect(t, n.mqttURL, "ed", n.token(t, "ed", "lab/room1", auth.RoleEditor, time.Hour))
	in := newInbox()
	subscribe(t, watcher, base+"/x/#", in)
	tok := n.token(t, "ann", "lab/room1", auth.RoleEditor, time.Hour)
	for i := range 5 {
		id := fmt.Sprintf("abrupt-%d", i)
		nc := rawConnect(t, n.mqttURL, id, "ann", tok, 60, base+"/x/"+id+"/gone", "bye")
		pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		pub.TopicName, pub.Payload = base+"/x/"+id+"/hello", []byte("hi")
		if err := pub.Write(nc); err != nil {
			t.Fatal(err)
		}
		nc.Close() // CONNECT, PUBLISH and FIN in one burst
		in.wait(t, "/x/"+id+"/hello", 5*time.Second)
		if m := in.wait(t, "/x/"+id+"/gone", 5*time.Second); string(m.Payload()) != "bye" {
			t.Fatalf("%s: will payload %q", id, m.Payload())
		}
	}

	nc := rawConnect(t, n.mqttURL, "quiet", "ann", tok, 1, "", "")
	start := time.Now()
	nc.SetReadDeadline(start.Add(10 * time.Second))
	got, err := io.ReadAll(nc) // the CONNACK, then the broker's close
	if err != nil {
		t.Fatalf("waiting for the keepalive to expire: %v", err)
	}
	if len(got) != 4 || got[0] != 0x20 || got[3] != 0 {
		t.Fatalf("read % x, want only an accepting CONNACK", got)
	}
	if d := time.Since(start); d < 1400*time.Millisecond || d > 4*time.Second {
		t.Fatalf("a keepalive of 1 s expired after %v, want about 1.5 s", d)
	}
}

// A client that never reads must not slow down the others: its queue
// fills, stale poses are coalesced, and a reading client gets everything.
func TestStalledReaderDoesNotBlockOthers(t *testing.T) {
	// 1024 frames (4 MB here): the stalled client's queue overflows, but
	// a reading client's does not within one write linger, even on a loaded
	// machine (with 256 it sometimes does, and coalesces the reader's poses).
	n := startNode(t, func(c *Config) { c.Writer.MaxFrames = 1024 })
	tok := n.token(t, "ed", "lab/room1", auth.RoleEditor, time.Hour)
	raw, err := net.Dial("tcp", strings.TrimPrefix(n.mqttURL, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.(*net.TCPConn).SetReadBuffer(4096)
	writeRaw(t, raw, connectPacket("stalled", "ed", tok))
	writeRaw(t, raw, subscribePacket(base+"/#"))
	// Its CONNACK and SUBACK, read before anything is published: the
	// server acknowledges a SUBSCRIBE once the subscription is in, so the
	// poses below reach its queue (a 100 ms sleep stood for this, and on
	// a loaded machine the poses could go out before it subscribed).
	// After these 9 bytes it reads nothing more.
	acks := make([]byte, 4+5)
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(raw, acks); err != nil {
		t.Fatalf("the stalled client's CONNACK and SUBACK: %v", err)
	}
	raw.SetReadDeadline(time.Time{})
	if want := []byte{0x20, 2, 0, 0, 0x90, 3, 0, 1, 0}; !bytes.Equal(acks, want) {
		t.Fatalf("the stalled client read % x, want an accepting CONNACK and a SUBACK granting QoS 0 (% x)", acks, want)
	}

	pub := mustConnect(t, n.mqttURL, "ed", tok)
	sub := mustConnect(t, n.mqttURL, "ed", tok)
	var got sync.WaitGroup
	const total = 3000
	got.Add(total)
	tk := sub.Subscribe(base+"/u/+/+", 0, func(_ paho.Client, m paho.Message) {
		if strings.HasSuffix(m.Topic(), "/cam") {
			got.Done()
		}
	})
	if !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatal(tk.Error())
	}
	payload := `{"object_id":"cam","action":"update","data":{"pad":"` + strings.Repeat("p", 4000) + `"}}`
	for i := 0; i < total; i++ {
		pub.Publish(base+"/u/ed-1/cam", 0, false, payload)
		if i%100 == 99 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	done := make(chan struct{})
	go func() { got.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the reading client did not get every pose while another client stalled")
	}
	var metrics string
	resp, err := http.Get(n.httpURL + "/metrics")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(b)
	}
	if !strings.Contains(metrics, "xrealm_mqtt_coalesced_total ") || strings.Contains(metrics, "xrealm_mqtt_coalesced_total 0\n") {
		t.Errorf("no coalescing counted for the stalled client: %s", grepLine(metrics, "xrealm_mqtt_"))
	}
	// The stalled connection, and only it, is reported as a slow consumer.
	if !strings.Contains(metrics, `xrealm_mqtt_connection_coalesced_total{client="stalled"`) || strings.Count(metrics, "xrealm_mqtt_connection_coalesced_total{") != 1 {
		t.Errorf("the stalled client is not the one slow consumer: %s", grepLine(metrics, "xrealm_mqtt_connection_"))
	}
	// Its socket filled up: a write into a full socket counts as behind.
	if !strings.Contains(metrics, "xrealm_mqtt_lingering_writes_behind_total ") || strings.Contains(metrics, "xrealm_mqtt_lingering_writes_behind_total 0\n") {
		t.Errorf("no write into the stalled client's full socket counted: %s", grepLine(metrics, "xrealm_mqtt_"))
	}
}

func writeRaw(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func mqttString(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }

func withHeader(typ byte, body []byte) []byte {
	out := []byte{typ}
	n := len(body)
	for {
		b := byte(n % 128)
		n /= 128
		if n > 0 {
			b |= 0x80
		}
		out = append(out, b)
		if n == 0 {
			break
		}
	}
	return append(out, body...)
}

func connectPacket(id, user, pass string) []byte {
	body := append(mqttString("MQTT"), 4, 0xC2, 0, 60)
	body = append(body, mqttString(id)...)
	body = append(body, mqttString(user)...)
	body = append(body, mqttString(pass)...)
	return withHeader(0x10, body)
}

func subscribePacket(filter string) []byte {
	body := append([]byte{0, 1}, mqttString(filter)...)
	return withHeader(0x82, append(body, 0))
}

func grepLine(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

// In a scene with kNN interest, pose messages reach only the receivers
// that have the sender among their k nearest; object messages reach all.
func TestSceneInterestFiltersPoses(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	st := auth.DefaultSettings("lab", "crowd")
	st.Interest = &auth.InterestSettings{Mode: "knn", K: 1, RateHz: 20, HysteresisMs: 1}
	if err := n.Settings.Put(ctx, st); err != nil {
		t.Fatal(err)
	}
	const crowd = "realm/s/lab/crowd"
	tok := n.token(t, "ed", "lab/crowd", auth.RoleEditor, time.Hour)
	type peer struct {
		c  paho.Client
		in *inbox
		x  float64
	}
	peers := map[string]*peer{"a": {x: 0}, "b": {x: 1}, "c": {x: 100}}
	for _, p := range peers {
		p.c = mustConnect(t, n.mqttURL, "ed", tok)
		p.in = newInbox()
		subscribe(t, p.c, crowd+"/+/+/+", p.in)
	}
	pose := func(id string, x float64, seq int) string {
		return fmt.Sprintf(`{"object_id":"cam-%s","action":"update","type":"object","data":{"object_type":"camera","seq":%d,"position":{"x":%g,"y":1.6,"z":0}}}`, id, seq, x)
	}
	// Everyone publishes poses until the sets settle.
	deadline := time.Now().Add(10 * time.Second)
	for seq := 0; ; seq++ {
		for id, p := range peers {
			publish(t, p.c, crowd+"/u/"+id+"/cam-"+id, 0, pose(id, p.x, seq))
		}
		time.Sleep(100 * time.Millisecond)
		if seq >= 5 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range peers {
		p.in.mu.Lock()
		p.in.msgs = nil
		p.in.mu.Unlock()
	}
	for id, p := range peers {
		publish(t, p.c, crowd+"/u/"+id+"/cam-"+id, 0, pose(id, p.x, 99))
	}
	publish(t, peers["c"].c, crowd+"/o/c/box", 0, `{"object_id":"box","action":"clientEvent"}`)
	// a's nearest is b; c's nearest is b; b's nearest is a.
	peers["a"].in.wait(t, "/u/b/cam-b", 5*time.Second)
	peers["c"].in.wait(t, "/u/b/cam-b", 5*time.Second)
	peers["b"].in.wait(t, "/u/a/cam-a", 5*time.Second)
	for _, p := range peers {
		p.in.wait(t, "/o/c/box", 5*time.Second) // objects reach everyone
	}
	if peers["a"].in.has("/u/c/cam-c") || peers["b"].in.has("/u/c/cam-c") {
		t.Error("c's pose reached a peer that does not have c among its nearest")
	}
	if peers["c"].in.has("/u/a/cam-a") {
		t.Error("a's pose reached c, whose nearest is b")
	}
}

// The Ubiq listeners of xrealm serve answer a Ping over TCP and over
// secure WebSocket with the server's certificate.
func TestUbiqListeners(t *testing.T) {
	p := testnet.FreePorts(t, 2)
	tcp, wss := p[0], p[1]
	n := startNode(t, func(c *Config) { c.UbiqAddr, c.UbiqWSSAddr = tcp, wss })
	for _, addr := range []string{tcp, "wss://" + wss} {
		got := make(chan string, 4)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := ubiq.Dial(ctx, addr, ubiq.ClientOptions{
			TLS: &tls.Config{InsecureSkipVerify: true},
			OnFrame: func(frame []byte) {
				if typ, err := ubiq.DecodeServer(frame[ubiq.HeaderSize:], nil); err == nil {
					got <- typ
				}
			},
		})
		cancel()
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		if err := c.Request("Ping", map[string]any{"clientid": map[string]int{"a": 7, "b": 9}}); err != nil {
			t.Fatal(err)
		}
		select {
		case typ := <-got:
			if typ != "Ping" {
				t.Errorf("%s: answer %q, want Ping", addr, typ)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no answer to Ping", addr)
		}
		c.Close()
	}
	_ = n
}

// An urgent message (an object edit) to many subscribers, written inline
// one socket after another: every subscriber gets every message of a
// publisher, in order.
func TestUrgentFanOutKeepsOrder(t *testing.T) {
	n := startNode(t, func(c *Config) { c.Insecure = true })
	const subs, msgs = 40, 100
	type got struct {
		mu  sync.Mutex
		seq []string
	}
	all := make([]*got, subs)
	for i := range all {
		g := &got{}
		all[i] = g
		c := mustConnect(t, n.mqttURL, fmt.Sprintf("sub%d", i), "")
		tk := c.Subscribe("realm/s/lab/split/#", 0, func(_ paho.Client, m paho.Message) {
			g.mu.Lock()
			g.seq = append(g.seq, string(m.Payload()))
			g.mu.Unlock()
		})
		if !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
			t.Fatalf("subscribe: %v", tk.Error())
		}
	}
	pub := mustConnect(t, n.mqttURL, "pub", "")
	for i := range msgs {
		// Object messages are urgent: written at once, not lingered.
		publish(t, pub, "realm/s/lab/split/o/pub/box", 0, fmt.Sprintf(`{"object_id":"box","action":"update","persist":false,"data":{"n":%d}}`, i))
	}
	deadline := time.Now().Add(10 * time.Second)
	for i, g := range all {
		for {
			g.mu.Lock()
			k := len(g.seq)
			g.mu.Unlock()
			if k >= msgs || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		g.mu.Lock()
		if len(g.seq) != msgs {
			t.Fatalf("subscriber %d got %d of %d messages", i, len(g.seq), msgs)
		}
		for j, p := range g.seq {
			if want := fmt.Sprintf(`"n":%d}`, j); !strings.Contains(p, want) {
				t.Fatalf("subscriber %d: message %d is %s, want n=%d (in order)", i, j, p, j)
			}
		}
		g.mu.Unlock()
	}
}

// TestPayloadLimitEdges: over TCP and WebSocket, a QoS 1 or 2 publish over
// the payload limit is refused but acknowledged (more of them than a
// client keeps in flight), the sender stays connected, and a persisted
// create at the limit, bigger still once stored with its metadata, is
// stored, as is everything after it.
func TestPayloadLimitEdges(t *testing.T) {
	const limit = 4096
	n := startNode(t, func(c *Config) { c.MaxPayload = limit })
	tok := n.token(t, "ed", "lab/room1", auth.RoleEditor, time.Hour)
	for _, url := range []string{n.mqttURL, n.wsURL} {
		c := mustConnect(t, url, "ed", tok)
		in := newInbox()
		subscribe(t, c, base+"/#", in)
		for i := range 25 {
			for _, size := range []int{limit + 1, 100 << 10, 300 << 10} {
				tk := c.Publish(base+"/o/ed-1/big", byte(1+i%2), false, strings.Repeat("z", size))
				if !tk.WaitTimeout(5 * time.Second) {
					t.Fatalf("%s: an oversized QoS %d publish of %d bytes was never acknowledged", url, 1+i%2, size)
				}
			}
		}
		id := fmt.Sprintf("edge%d", time.Now().UnixNano())
		head := `{"object_id":"` + id + `","action":"create","type":"object","persist":true,"data":{"pad":"`
		edge := head + strings.Repeat("e", limit-len(head)-3) + `"}}`
		if len(edge) != limit {
			t.Fatalf("edge payload is %d bytes", len(edge))
		}
		publish(t, c, base+"/o/ed-1/"+id, 1, edge)
		publish(t, c, base+"/o/ed-1/"+id+"b", 1, `{"object_id":"`+id+`b","action":"create","type":"object","persist":true,"data":{}}`)
		in.wait(t, "/o/ed-1/"+id+"b", 5*time.Second)
		waitObjects(t, n, "lab/room1", tok, func(o []object) bool { return byID(o, id) != nil && byID(o, id+"b") != nil })
		if in.has("/o/ed-1/big") {
			t.Errorf("%s: an oversized payload was delivered", url)
		}
		if !c.IsConnectionOpen() {
			t.Fatalf("%s: the sender was disconnected", url)
		}
	}
}

// A port in use fails the start at once, naming the listener, before the
// bus or any service has started (nothing is left in the data directory
// but the key).
func TestPortInUseFailsStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := Defaults()
	cfg.DataDir = t.TempDir()
	p := testnet.FreePorts(t, 1)
	cfg.HTTPAddr, cfg.MQTTAddr = p[0], taken.Addr().String()
	cfg.HTTPSAddr, cfg.MQTTSAddr, cfg.MQTTWSAddr, cfg.NATSAddr, cfg.NATSWSAddr = "", "", "", "", ""
	cfg.UbiqAddr, cfg.UbiqWSSAddr, cfg.UbiqWSAddr = "", "", ""
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		s.Close()
		t.Fatal("started on a port in use")
	}
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "mqtt listener on "+cfg.MQTTAddr) {
		t.Fatalf("err %v, want the mqtt listener's address in use", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "jetstream")); !os.IsNotExist(err) {
		t.Fatalf("the bus started before the listeners were bound: %v", err)
	}
	// The other listener was released.
	l, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		t.Fatalf("http port still held after the failed start: %v", err)
	}
	l.Close()
}

// A NATS port in use (client, WebSocket or cluster routes) fails the start
// at once with the bind error, naming the listener, as the front ends'
// ports do, and releases the listeners already bound.
func TestNATSPortInUseFailsStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, tt := range []struct {
		what string
		mod  func(*Config)
	}{
		{"nats", func(c *Config) { c.NATSAddr = addr }},
		{"nats-ws", func(c *Config) { c.NATSWSAddr = addr }},
		{"cluster", func(c *Config) {
			c.Name, c.ClusterName, c.ClusterAddr, c.Routes = "n1", "xr", addr, []string{"nats-route://127.0.0.1:1"}
		}},
	} {
		t.Run(tt.what, func(t *testing.T) {
			cfg := Defaults()
			cfg.DataDir = t.TempDir()
			p := testnet.FreePorts(t, 1)
			cfg.HTTPAddr = p[0]
			cfg.HTTPSAddr, cfg.MQTTAddr, cfg.MQTTSAddr, cfg.MQTTWSAddr, cfg.NATSAddr, cfg.NATSWSAddr = "", "", "", "", "", ""
			cfg.UbiqAddr, cfg.UbiqWSSAddr, cfg.UbiqWSAddr = "", "", ""
			tt.mod(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			s, err := Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil {
				s.Close()
				t.Fatal("started on a port in use")
			}
			if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), tt.what+" listener on "+addr) {
				t.Fatalf("err %v, want the %s listener's address in use", err, tt.what)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("failed after %s", d)
			}
			l, err := net.Listen("tcp", cfg.HTTPAddr)
			if err != nil {
				t.Fatalf("http port still held after the failed start: %v", err)
			}
			l.Close()
		})
	}
}

// A message on a wildcard subject (a NATS client may publish one) does not
// reach MQTT subscribers: no MQTT publish has such a topic.
func TestWildcardSubjectNotDelivered(t *testing.T) {
	n := startNode(t, nil)
	tok := n.token(t, "ed", "lab/room1", auth.RoleEditor, time.Hour)
	c := mustConnect(t, n.mqttURL, "ed", tok)
	in := newInbox()
	subscribe(t, c, base+"/#", in)
	nc, err := n.bus.Connect("wildcard-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg := `{"object_id":"x","action":"update","data":{}}`
	for _, s := range []string{"realm.s.lab.room1.o.*.x", "realm.s.lab.room1.o.>", "realm.s.lab.room1.o.a+b.x", "realm.s.lab.room1.o.ok.x"} {
		if err := nc.Publish(s, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	in.wait(t, "/o/ok/x", 5*time.Second) // sent last, so the others came before it
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, m := range in.msgs {
		if strings.ContainsAny(m.Topic(), "+#") {
			t.Errorf("delivered topic %q", m.Topic())
		}
	}
}

// Shutdown's error names the part that did not stop in time (xrealm serve
// exited with a bare "context deadline exceeded").
func TestShutdownErrorNamesPart(t *testing.T) {
	n := startNode(t, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	n.Mux.HandleFunc("GET /test-block", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.Get(n.httpURL + "/test-block"); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := n.Shutdown(ctx)
	close(release)
	<-done
	if err == nil || !strings.Contains(err.Error(), "shutdown: HTTP server") || !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown with a request running = %v, want an error naming the HTTP server", err)
	}
}

// A message as large as --max-payload allows reaches a WebSocket
// subscriber (whose queue the bound applies to, as to any connection
// that is busy), also with --max-payload above the queue's 8 MiB byte
// bound. It fails if the publisher's message is taken and every WebSocket
// client's copy of it dropped without a word.
func TestLargestPayloadReachesWebSocketSubscriber(t *testing.T) {
	const maxPayload = 9 << 20
	n := startNode(t, func(c *Config) { c.Insecure = true; c.MaxPayload = maxPayload })
	got := make(chan int, 1)
	sub := mustConnect(t, n.wsURL, "sub", "")
	tk := sub.Subscribe("realm/s/lab/big/#", 0, func(_ paho.Client, m paho.Message) {
		select {
		case got <- len(m.Payload()):
		default:
		}
	})
	if !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatalf("subscribe: %v", tk.Error())
	}
	head := `{"object_id":"box","action":"update","persist":false,"data":{"pad":"`
	tail := `"}}`
	payload := head + strings.Repeat("x", maxPayload-len(head)-len(tail)) + tail
	pub := mustConnect(t, n.mqttURL, "pub", "")
	tk = pub.Publish("realm/s/lab/big/o/pub/box", 0, false, payload)
	if !tk.WaitTimeout(20*time.Second) || tk.Error() != nil {
		t.Fatalf("publish: %v", tk.Error())
	}
	select {
	case l := <-got:
		if l != len(payload) {
			t.Fatalf("got %d bytes, want %d", l, len(payload))
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the WebSocket subscriber did not get the %d-byte message", len(payload))
	}
}
