package benchbus

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bots"
)

// targetID is the object the clicker clicks and the agent updates.
const targetID = "bench_target"

// ClickAgent is a scene program written with the bots' MQTT client: it
// subscribes to the scene's object messages and answers every clientEvent
// on its target by updating the target (a new colour).
type ClickAgent struct {
	c       *bots.MQTTClient
	base    string
	topic   string
	answers int
	// When the last click arrived and when its answer was sent (Unix ns),
	// to split click-to-update latency into its two hops.
	clickAt, answerAt atomic.Int64
}

// StartClickAgent connects an agent to scene ns/name of realm on addr.
func StartClickAgent(ctx context.Context, addr string, tokens bots.TokenSource, realm, ns, name string) (*ClickAgent, error) {
	id := bots.Identity{Realm: realm, Namespace: ns, Scene: name, User: ns, UserClient: "agent-go"}
	user, pass := id.User, ""
	if tokens != nil {
		var err error
		if user, pass, err = tokens.Token(ctx, id); err != nil {
			return nil, err
		}
	}
	a := &ClickAgent{base: id.SceneBase(), topic: id.SceneBase() + "/o/" + id.UserClient + "/" + targetID}
	var err error
	a.c, err = bots.DialMQTT(ctx, bots.MQTTConfig{Addr: addr, ClientID: id.UserClient, Username: user, Password: pass, OnPublish: a.onMessage})
	if err != nil {
		return nil, fmt.Errorf("click agent: %w", err)
	}
	if err := a.c.Subscribe(ctx, a.base+"/o/+/+"); err != nil {
		a.c.Close()
		return nil, fmt.Errorf("click agent: %w", err)
	}
	create := `{"object_id":"` + targetID + `","action":"create","type":"object","persist":true,"data":{"object_type":"box","position":{"x":0,"y":1.6,"z":-3},"color":"#000000","clickable":true}}`
	if err := a.c.Publish(a.topic, []byte(create)); err != nil {
		a.c.Close()
		return nil, err
	}
	return a, nil
}

// onMessage runs on the client's read goroutine, as an ARENA program's
// event handler would: decode the message, react to clicks on the target.
func (a *ClickAgent) onMessage(topic, payload []byte, at int64) {
	if !bytes.HasSuffix(topic, []byte("/"+targetID)) {
		return
	}
	var m struct {
		ObjectID string `json:"object_id"`
		Action   string `json:"action"`
		Type     string `json:"type"`
	}
	if json.Unmarshal(payload, &m) != nil || m.Action != "clientEvent" || m.ObjectID != targetID || m.Type != "mousedown" {
		return
	}
	a.clickAt.Store(at)
	a.answers++
	color := fmt.Sprintf("#%06x", (a.answers*2654435761)&0xffffff)
	upd := `{"object_id":"` + targetID + `","action":"update","type":"object","persist":true,"data":{"color":"` + color + `"}}`
	a.answerAt.Store(time.Now().UnixNano())
	a.c.Publish(a.topic, []byte(upd))
}

// Close disconnects the agent.
func (a *ClickAgent) Close() error { return a.c.Close() }

// clicker clicks the target and times the update that answers each click,
// at the clicking client.
type clicker struct {
	c       *bots.MQTTClient
	topic   string
	updates chan int64
	echoes  chan int64 // the clicker's own clicks, back from the broker
}

func startClicker(ctx context.Context, addr string, tokens bots.TokenSource, realm, ns, name string) (*clicker, error) {
	id := bots.Identity{Realm: realm, Namespace: ns, Scene: name, User: "clicker", UserClient: "clicker"}
	user, pass := id.User, ""
	if tokens != nil {
		var err error
		if user, pass, err = tokens.Token(ctx, id); err != nil {
			return nil, err
		}
	}
	k := &clicker{topic: id.SceneBase() + "/o/" + id.UserClient + "/" + targetID, updates: make(chan int64, 16), echoes: make(chan int64, 16)}
	suffix := []byte("/" + targetID)
	onPub := func(topic, payload []byte, at int64) {
		if bytes.HasSuffix(topic, suffix) && bytes.Contains(payload, []byte(`"action":"clientEvent"`)) {
			select {
			case k.echoes <- at:
			default:
			}
			return
		}
		// The answer: an update of the target, from anyone but us.
		if bytes.HasSuffix(topic, suffix) && bytes.Contains(payload, []byte(`"action":"update"`)) ||
			bytes.HasSuffix(topic, suffix) && bytes.Contains(payload, []byte(`"action": "update"`)) {
			select {
			case k.updates <- at:
			default:
			}
		}
	}
	var err error
	k.c, err = bots.DialMQTT(ctx, bots.MQTTConfig{Addr: addr, ClientID: id.UserClient, Username: user, Password: pass, OnPublish: onPub})
	if err != nil {
		return nil, fmt.Errorf("clicker: %w", err)
	}
	// Subscribed as a browser is: to the whole scene, background poses too.
	if err := k.c.Subscribe(ctx, id.SceneBase()+"/+/+/+"); err != nil {
		k.c.Close()
		return nil, fmt.Errorf("clicker: %w", err)
	}
	return k, nil
}

// clickSample is one answered click: when it was sent, when its echo came
// back from the broker to the clicker, when the answer arrived (Unix ns).
type clickSample struct{ sent, echo, answer int64 }

// run clicks n times, one click at a time, and returns the answered ones.
// After each answer, hops (if not nil) is called with the click's sample.
func (k *clicker) run(ctx context.Context, n int, gap, timeout time.Duration, hops func(clickSample)) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		for len(k.updates) > 0 { // an answer that came too late for its click
			<-k.updates
		}
		for len(k.echoes) > 0 {
			<-k.echoes
		}
		click := fmt.Sprintf(`{"object_id":%q,"action":"clientEvent","type":"mousedown","data":{"target":%q,"source":"camera_clicker_clicker","clickPos":{"x":0,"y":1.6,"z":0},"position":{"x":0,"y":1.6,"z":-3}}}`, targetID, targetID)
		t0 := time.Now()
		if err := k.c.Publish(k.topic, []byte(click)); err != nil {
			return out, err
		}
		select {
		case at := <-k.updates:
			out = append(out, time.Duration(at-t0.UnixNano()))
			if hops != nil {
				cs := clickSample{sent: t0.UnixNano(), answer: at}
				select { // the echo comes before the answer
				case cs.echo = <-k.echoes:
				default:
				}
				hops(cs)
			}
		case <-time.After(timeout):
		case <-ctx.Done():
			return out, ctx.Err()
		}
		select {
		case <-time.After(gap):
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

// interaction measures click-to-update latency with the Go agent on every
// system, then with an arena-py agent on xrealm.
func (b *runner) interaction(ctx context.Context) error {
	systems := []string{"xrealm"}
	if b.cfg.Mosquitto != "" && slices.Contains(b.cfg.Systems, "mosquitto") {
		systems = append(systems, "mosquitto")
	}
	for _, bg := range b.cfg.InteractionBG {
		for _, name := range systems {
			sys, err := b.system(ctx, name)
			if err != nil {
				return err
			}
			b.res.Interaction = append(b.res.Interaction, b.clickRun(ctx, sys, "go (bots client)", bg))
		}
	}
	if b.cfg.Python == "" {
		b.note("The arena-py agent did not run: no Python with arena-py was given (--python) or found in .venv of the directory the bench ran from (scripts/setup.sh --test makes one in the repository; run from there, or pass --python).")
		return ctx.Err()
	}
	for _, bg := range b.cfg.InteractionBG {
		b.res.Interaction = append(b.res.Interaction, b.arenaPyRun(ctx, bg))
	}
	return ctx.Err()
}

// clickRun measures one system with the Go agent and bg background users.
func (b *runner) clickRun(ctx context.Context, sys *System, agent string, bg int) Interaction {
	it := Interaction{System: sys.Name, Agent: agent, Background: bg, Clicks: b.cfg.Clicks}
	ns, name := "lab", "click"+strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	b.log.Info("interaction", "system", sys.Name, "agent", agent, "background", bg)
	a, err := StartClickAgent(ctx, sys.MQTTAddr, sys.Tokens(auth.RoleEditor), "realm", ns, name)
	if err != nil {
		it.Error = err.Error()
		return it
	}
	defer a.Close()
	return b.clicks(ctx, sys, it, ns, name, bg, a)
}

// clicks runs the background users and the clicker against an agent
// already in scene ns/name.
// With a Go agent (a not nil), the latency is also split into its hops.
func (b *runner) clicks(ctx context.Context, sys *System, it Interaction, ns, name string, bg int, a *ClickAgent) Interaction {
	if bg > 0 {
		stop, err := b.background(ctx, sys, ns, name, bg)
		if err != nil {
			it.Error = err.Error()
			return it
		}
		defer stop()
	}
	k, err := startClicker(ctx, sys.MQTTAddr, sys.Tokens(auth.RoleViewer), "realm", ns, name)
	if err != nil {
		it.Error = err.Error()
		return it
	}
	defer k.c.Close()
	time.Sleep(b.cfg.Warmup)
	echo, toAgent, fromAgent := bots.NewHistogram(), bots.NewHistogram(), bots.NewHistogram()
	hops := func(cs clickSample) {
		if cs.echo > 0 {
			echo.RecordValue(max(1, (cs.echo-cs.sent)/1000))
		}
		if a == nil {
			return
		}
		if in, out := a.clickAt.Load(), a.answerAt.Load(); in >= cs.sent && out >= in && cs.answer >= out {
			toAgent.RecordValue(max(1, (in-cs.sent)/1000))
			fromAgent.RecordValue(max(1, (cs.answer-out)/1000))
		}
	}
	lat, err := k.run(ctx, it.Clicks, 100*time.Millisecond, 2*time.Second, hops)
	if err != nil {
		it.Error = err.Error()
	}
	if echo.TotalCount() > 0 {
		it.EchoP50ms = ms(bots.Quantile(echo, 50))
	}
	if toAgent.TotalCount() > 0 {
		it.ToAgentP50ms, it.FromAgentP50ms = ms(bots.Quantile(toAgent, 50)), ms(bots.Quantile(fromAgent, 50))
	}
	h := bots.NewHistogram()
	for _, d := range lat {
		h.RecordValue(max(1, d.Microseconds()))
	}
	it.Answered = len(lat)
	it.P50ms, it.P90ms, it.P99ms = ms(bots.Quantile(h, 50)), ms(bots.Quantile(h, 90)), ms(bots.Quantile(h, 99))
	it.MaxMs = float64(h.Max()) / 1000
	if it.Answered == 0 && it.Error == "" {
		it.Error = "no click was answered"
	}
	return it
}

// background starts bg background users in scene ns/name as a child process
// (`xrealm bots`), as other people's browsers would be: in their own
// processes, not in the runtime of the clicker and the agent whose latency
// is measured. It returns once all are connected; stop ends them.
func (b *runner) background(ctx context.Context, sys *System, ns, name string, bg int) (stop func(), err error) {
	args := append(append([]string(nil), b.cfg.XrealmCmd[1:]...), "bots", "--addr", sys.MQTTAddr,
		"--users", strconv.Itoa(bg), "--namespace", ns, "--scene", name, "--prefix", "bg"+name,
		"--rate", fmt.Sprint(b.cfg.Rate), "--size", strconv.Itoa(b.cfg.Size), "--behaviour", b.cfg.Behaviour, "--progress", "500ms")
	if b.cfg.Trace != "" {
		args = append(args, "--trace", b.cfg.Trace)
	}
	if t := sys.Transport(b.cfg.Size); t.Tokens == nil {
		args = append(args, "--no-auth")
	} else {
		args = append(args, "--token-url", sys.HTTPURL)
	}
	cctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(cctx, b.cfg.XrealmCmd[0], args...)
	cmd.Env = append(os.Environ(), b.cfg.XrealmEnv...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 5 * time.Second
	diesWithBench(cmd) // a killed bench left the background bots running
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("background users: start %s: %w", b.cfg.XrealmCmd[0], err)
	}
	stop = func() {
		cancel()
		cmd.Wait()
	}
	// Progress lines say "users C/N"; wait until all N are connected.
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		want := fmt.Sprintf("users %d/%d ", bg, bg)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.Contains(sc.Text(), want) {
				close(ready)
				signalled = true
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case <-ready:
		return stop, nil
	case <-time.After(time.Minute):
		err = errors.New("not all connected within a minute")
	case <-ctx.Done():
		err = ctx.Err()
	}
	stop()
	return nil, fmt.Errorf("background users (%d) for %s: %w; %s", bg, sys.Name, err, strings.TrimSpace(stderr.String()))
}

// arenaPyProgram is an ordinary arena-py program: a clickable box that
// changes colour on every mousedown.
const arenaPyProgram = `
import sys
from arena import Scene, Box, Position, Color

scene = Scene(host="localhost", namespace=sys.argv[1], scene=sys.argv[2])
state = {"n": 0}

def on_click(scn, evt, msg):
    if evt.type != "mousedown":
        return
    state["n"] += 1
    n = state["n"]
    scn.update_object(box, color=Color((n * 37) % 256, (n * 91) % 256, (n * 13) % 256))

box = Box(object_id="` + targetID + `", position=Position(0, 1.6, -3), color=Color(0, 0, 0),
          persist=True, clickable=True, evt_handler=on_click)

@scene.run_once
def setup():
    scene.add_object(box)
    print("READY", flush=True)

scene.run_tasks()
`

// arenaPyRun measures click-to-update latency with the agent written with
// arena-py (the real client from PyPI). arena-py insists on HTTPS at
// localhost:443 and MQTT/TLS at localhost:8883, so this xrealm listens
// there; a lock file shared with the Python tests keeps two runs apart.
func (b *runner) arenaPyRun(ctx context.Context, bg int) Interaction {
	it := Interaction{System: "xrealm", Agent: "arena-py", Background: bg, Clicks: b.cfg.Clicks}
	b.log.Info("interaction", "system", "xrealm", "agent", "arena-py", "background", bg)
	lock, err := os.OpenFile("/tmp/xrealm-tests-443-8883.lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		it.Error = err.Error()
		return it
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		it.Error = err.Error()
		return it
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	sys, err := StartXrealm(ctx, b.work, XrealmOptions{Command: b.cfg.XrealmCmd, Env: b.cfg.XrealmEnv, Flags: b.cfg.XrealmFlags, Name: "xrealm-arenapy",
		HTTPSAddr: "127.0.0.1:443", MQTTSAddr: "127.0.0.1:8883"})
	if err != nil {
		it.Error = "start xrealm on 443/8883: " + err.Error()
		return it
	}
	defer sys.Stop()
	ns, name := "lab", "arenapy"+strconv.Itoa(bg)
	tok, err := sys.Keys.Issue(ns, auth.SceneRights("realm", ns, name, auth.RoleEditor, ""), time.Hour)
	if err != nil {
		it.Error = err.Error()
		return it
	}
	dir := filepath.Join(b.work, "arenapy"+strconv.Itoa(bg))
	home := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(home, ".arena", "python"), 0o755)
	// arena-py checks PyPI for a newer version at most daily: say it just did.
	os.WriteFile(filepath.Join(home, ".arena", "python", ".arena_package_settings"),
		[]byte(fmt.Sprintf(`{"version_check": {"last_check": %d, "latest_version": "1.6.0"}}`, time.Now().Unix())), 0o644)
	script := filepath.Join(dir, "agent.py")
	os.WriteFile(script, []byte(arenaPyProgram), 0o644)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(pctx, b.cfg.Python, "-u", script, ns, name)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ARENA_") && !strings.HasPrefix(kv, "MQTTH=") && !strings.HasPrefix(kv, "REALM=") &&
			!strings.HasPrefix(kv, "NAMESPACE=") && !strings.HasPrefix(kv, "SCENE=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+home, "MQTTH=localhost", "ARENA_USERNAME="+ns, "ARENA_PASSWORD="+tok, "PYTHONWARNINGS=ignore")
	out, err := cmd.StdoutPipe()
	if err != nil {
		it.Error = err.Error()
		return it
	}
	cmd.Stderr = cmd.Stdout
	diesWithBench(cmd) // a killed bench left the agent running
	if err := cmd.Start(); err != nil {
		it.Error = "start arena-py agent: " + err.Error()
		return it
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string, 256)
	var tail []string
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	ready := time.After(60 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				it.Error = "arena-py agent exited before it was ready: " + strings.Join(tail, " | ")
				return it
			}
			tail = append(tail, l)
			if len(tail) > 8 {
				tail = tail[1:]
			}
			if strings.HasPrefix(l, "READY") {
				break wait
			}
		case <-ready:
			it.Error = "arena-py agent not ready within 60 s: " + strings.Join(tail, " | ")
			return it
		}
	}
	var exited atomic.Bool
	go func() {
		for range lines {
		}
		exited.Store(true) // its output ended: the program is gone
	}()
	res := b.clicks(ctx, sys, it, ns, name, bg, nil)
	if exited.Load() {
		res.Error = strings.TrimSpace(res.Error + " (the arena-py agent exited during the run; last output: " + strings.Join(tail, " | ") + ")")
	}
	return res
}
