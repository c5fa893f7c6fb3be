"""The native NATS protocol (raw text over TCP) with xrealm tokens: the same
rights as MQTT through NATS's pluggable client authentication, and messages
flow between NATS and MQTT clients of the same scene."""

import json
import socket
import time

import pytest

import xr

SCENE = "lab/natsroom"
SUBJ = "realm.s.lab.natsroom"
TOPIC = "realm/s/lab/natsroom"


class Nats:
    def __init__(self, port, user, token):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        info = self.line()
        assert info.startswith(b"INFO "), info
        opts = {"verbose": True, "pedantic": False, "protocol": 1, "name": "raw-test", "echo": False}
        if user:
            opts["user"] = user
        if token:
            opts["pass"] = token
        self.s.sendall(b"CONNECT " + json.dumps(opts).encode() + b"\r\nPING\r\n")

    def line(self, timeout=5):
        deadline = time.monotonic() + timeout
        while b"\r\n" not in self.buf:
            self.s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                d = self.s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                d = b""
            if not d:
                out, self.buf = self.buf, b""
                return out  # closed or silent
            self.buf += d
        out, self.buf = self.buf.split(b"\r\n", 1)
        return out

    def expect(self, *prefixes, timeout=5):
        """Next non-PING line; answers PINGs. Asserts it starts with one of prefixes."""
        while True:
            ln = self.line(timeout)
            if ln == b"PING":
                self.s.sendall(b"PONG\r\n")
                continue
            if ln.startswith(b"INFO ") and not prefixes[0].startswith(b"INFO"):
                continue  # asynchronous INFO updates
            assert ln.startswith(prefixes), f"got {ln!r}, want one of {prefixes}"
            return ln

    def send(self, b):
        self.s.sendall(b)

    def close(self):
        self.s.close()


@pytest.fixture(scope="module")
def srv(xrealm_module_factory):
    return xrealm_module_factory(name="nats", listeners=("http", "mqtt", "nats"))


def test_editor_over_nats_and_mqtt(srv):
    tok = srv.token("lab", SCENE, "editor")
    n = Nats(srv.port("nats"), "lab", tok)
    n.expect(b"+OK")
    n.expect(b"PONG")
    n.send(f"SUB {SUBJ}.> 1\r\nPING\r\n".encode())
    n.expect(b"+OK")
    n.expect(b"PONG")
    m = xr.connect(srv.mqtt_port, "lab", tok)
    assert m.subscribe(TOPIC + "/#") == 1
    try:
        # MQTT -> NATS
        m.publish(f"{TOPIC}/o/m-1/box", json.dumps(xr.obj_msg("box", object_type="box")), qos=1)
        msg = n.expect(b"MSG ")
        assert msg.split()[1] == f"{SUBJ}.o.m-1.box".encode(), msg
        body = n.line()
        assert json.loads(body)["object_id"] == "box"
        # NATS -> MQTT
        payload = json.dumps({"object_id": "hi", "action": "create", "data": {"text": "from nats"}}).encode()
        n.send(f"PUB {SUBJ}.c.n-1.hi {len(payload)}\r\n".encode() + payload + b"\r\n")
        n.expect(b"+OK")
        _, got, _ = m.wait_for(f"{TOPIC}/c/n-1/hi")
        assert json.loads(got)["data"]["text"] == "from nats"
        # Outside its scene: refused.
        n.send(b"SUB realm.s.lab.elsewhere.> 2\r\n")
        err = n.expect(b"-ERR")
        assert b"Permissions Violation" in err, err
        n.send(b"SUB > 3\r\n")
        assert b"Permissions Violation" in n.expect(b"-ERR")
    finally:
        n.close()
        m.close()


def test_viewer_over_nats_cannot_edit(srv):
    vt = srv.token("vic", SCENE, "viewer")
    et = srv.token("lab", SCENE, "editor")
    obs = xr.connect(srv.mqtt_port, "lab", et)
    assert obs.subscribe(TOPIC + "/#") == 1
    n = Nats(srv.port("nats"), "vic", vt)
    try:
        n.expect(b"+OK")
        n.expect(b"PONG")
        p = json.dumps(xr.obj_msg("evil", object_type="box")).encode()
        n.send(f"PUB {SUBJ}.o.v-1.evil {len(p)}\r\n".encode() + p + b"\r\n")
        assert b"Permissions Violation" in n.expect(b"-ERR")
        # Its camera pose is allowed.
        p = json.dumps({"object_id": "cam", "action": "update", "data": {}}).encode()
        n.send(f"PUB {SUBJ}.u.v-1.cam {len(p)}\r\n".encode() + p + b"\r\n")
        n.expect(b"+OK")
        obs.wait_for(f"{TOPIC}/u/v-1/cam")
        assert not obs.received(f"{TOPIC}/o/v-1/evil")
        objs = srv.objects("lab", "natsroom", et)
        assert "evil" not in objs
    finally:
        n.close()
        obs.close()


@pytest.mark.parametrize("what", ["no token", "garbage token", "wrong user", "expired token"])
def test_nats_connect_refused(srv, what):
    user, tok = "lab", srv.token("lab", SCENE, "editor", ttl="1s" if what == "expired token" else "1h")
    if what == "no token":
        tok = None
    elif what == "garbage token":
        tok = "x.y.z"
    elif what == "wrong user":
        user = "mallory"
    else:
        exp = xr.jwt_claims(tok)["exp"]
        while time.time() < exp + 1.05:
            time.sleep(0.05)
    n = Nats(srv.port("nats"), user, tok)
    try:
        err = n.expect(b"-ERR")
        assert b"Authorization Violation" in err, err
    finally:
        n.close()
