"""Malformed MQTT input over a raw TCP socket: each bad connection is closed
(and logged) on its own; a bystander client and the server carry on."""

import json
import socket
import struct
import time
import uuid

import pytest
import requests

import xr

SCENE = "lab/raw"
BASE = "realm/s/" + SCENE


def s16(b):
    return struct.pack(">H", len(b)) + b


def varint(n):
    out = b""
    while True:
        d, n = n % 128, n // 128
        out += bytes([d | (0x80 if n else 0)])
        if not n:
            return out


def pkt(first, body):
    return bytes([first]) + varint(len(body)) + body


def connect_pkt(user, token, proto=b"MQTT", level=4, client_id=None):
    flags = 0x02 | (0x80 if user else 0) | (0x40 if token else 0)
    body = s16(proto) + bytes([level, flags]) + struct.pack(">H", 30) + s16((client_id or f"raw-{uuid.uuid4().hex[:6]}").encode())
    if user:
        body += s16(user.encode())
    if token:
        body += s16(token.encode())
    return pkt(0x10, body)


def subscribe_pkt(mid, flt, qos=0):
    return pkt(0x82, struct.pack(">H", mid) + s16(flt.encode()) + bytes([qos]))


def publish_pkt(topic, payload, qos=0, mid=1):
    body = s16(topic.encode()) + (struct.pack(">H", mid) if qos else b"") + payload
    return pkt(0x30 | (qos << 1), body)


class Raw:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.local_port = self.s.getsockname()[1]
        self.buf = b""

    def send(self, b):
        self.s.sendall(b)

    def read_until_closed(self, timeout=5):
        """Reads until the server closes; returns (bytes, closed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                d = self.s.recv(4096)
            except socket.timeout:
                break
            except ConnectionResetError:
                return self.buf, True
            if not d:
                return self.buf, True
            self.buf += d
        return self.buf, False

    def read_exact(self, n, timeout=5):
        deadline = time.monotonic() + timeout
        while len(self.buf) < n and time.monotonic() < deadline:
            self.s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                d = self.s.recv(4096)
            except socket.timeout:
                break
            if not d:
                break
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_packet(self, timeout=5):
        """Reads one MQTT packet; returns (first byte, body)."""
        head = self.read_exact(2, timeout)
        assert len(head) == 2, f"connection closed or silent; got {head!r}"
        n, mult, b = 0, 1, head[1]
        rest = b""
        while True:
            n += (b & 0x7F) * mult
            if not b & 0x80:
                break
            mult *= 128
            b = self.read_exact(1, timeout)[0]
        body = self.read_exact(n, timeout)
        assert len(body) == n, "truncated packet"
        return head[0], body

    def close(self):
        self.s.close()


@pytest.fixture(scope="module")
def env(xrealm_module):
    srv = xrealm_module
    tok = srv.token("lab", SCENE, "editor")
    bystander = xr.connect(srv.mqtt_port, "lab", tok, client_id="bystander")
    assert bystander.subscribe(BASE + "/#") == 1
    writer = xr.connect(srv.mqtt_port, "lab", tok, client_id="writer")
    yield srv, tok, bystander, writer
    bystander.close()
    writer.close()


def assert_unaffected(srv, bystander, writer):
    oid = "alive-" + uuid.uuid4().hex[:6]
    t = f"{BASE}/o/writer/{oid}"
    writer.publish(t, json.dumps({"object_id": oid, "action": "clientEvent", "type": "mousedown"}), qos=1)
    bystander.wait_for(t, timeout=5)
    assert not bystander.disconnected.is_set() and not writer.disconnected.is_set(), "another client lost its connection"
    assert requests.get(srv.http + "/healthz", timeout=5).status_code == 200
    assert srv.running()


def logged_about(srv, local_port):
    return xr.wait_until(lambda: [l for l in srv.log_text().splitlines() if f"remote=127.0.0.1:{local_port} " in l and ("WARN" in l or "closed" in l)],
                         5, what=f"a log line about connection from port {local_port}")


def _good_connect(tok):
    return connect_pkt("lab", tok)


CASES = [
    # name, bytes to send (a function of the editor token), must the server answer nothing but a refusal?
    ("garbage bytes", lambda tok: b"\xde\xad\xbe\xef garbage \x00\xff" * 8),
    ("HTTP request on the MQTT port", lambda tok: b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("CONNECT with protocol name MQTX", lambda tok: connect_pkt("lab", tok, proto=b"MQTX")),
    ("CONNECT with protocol level 9", lambda tok: connect_pkt("lab", tok, level=9)),
    ("remaining length longer than 4 bytes", lambda tok: b"\x10\xff\xff\xff\xff\x7f" + b"\x00" * 16),
    ("remaining length longer than 4 bytes after CONNECT", lambda tok: _good_connect(tok) + b"\x30\x80\x80\x80\x80\x01"),
    ("first packet is not CONNECT", lambda tok: b"\xc0\x00"),
    ("second CONNECT", lambda tok: _good_connect(tok) + _good_connect(tok)),
    ("reserved packet type 15 after CONNECT", lambda tok: _good_connect(tok) + b"\xf0\x00"),
    ("SUBSCRIBE topic length beyond the packet", lambda tok: _good_connect(tok) + b"\x82\x06\x00\x01\x00\x10ab"),
    ("PUBLISH topic length beyond the packet", lambda tok: _good_connect(tok) + b"\x30\x04\x00\x40ab"),
    ("CONNECT control packet of 300 KB", lambda tok: b"\x10" + varint(300 << 10) + b"\x00" * 1024),
]


@pytest.mark.parametrize("name,data", CASES, ids=[c[0] for c in CASES])
def test_malformed_closes_only_that_connection(env, name, data):
    srv, tok, bystander, writer = env
    r = Raw(srv.mqtt_port)
    try:
        r.send(data(tok))
        got, closed = r.read_until_closed(timeout=12)
        assert closed, f"{name}: the server kept the connection open; got {got[:40]!r}"
        # A refusal CONNACK is allowed; an acceptance only if a valid CONNECT came first.
        if got[:2] == b"\x20\x02" and not name.endswith("after CONNECT") and name not in ("second CONNECT",) and "SUBSCRIBE" not in name and "PUBLISH" not in name:
            assert got[3] != 0, f"{name}: CONNECT accepted"
        logged_about(srv, r.local_port)
    finally:
        r.close()
    assert_unaffected(srv, bystander, writer)


def test_half_packet_then_hangup(env):
    """A client that vanishes mid-packet is cleaned up; others unaffected."""
    srv, tok, bystander, writer = env
    r = Raw(srv.mqtt_port)
    r.send(_good_connect(tok))
    assert r.read_exact(4) == b"\x20\x02\x00\x00"
    r.send(publish_pkt(f"{BASE}/o/raw/x", b'{"object_id":"x","action":"create"}')[:10])
    r.close()
    xr.wait_until(lambda: requests.get(srv.http + "/healthz", timeout=2).json()["mqtt_connections"] == 2, 5,
                  what="the server to drop the half-open connection")
    assert_unaffected(srv, bystander, writer)


def test_valid_raw_session(env):
    """The raw encoder itself is right: a valid session works end to end."""
    srv, tok, bystander, writer = env
    r = Raw(srv.mqtt_port)
    try:
        r.send(_good_connect(tok))
        assert r.read_exact(4) == b"\x20\x02\x00\x00"
        r.send(subscribe_pkt(7, BASE + "/c/#", 1))
        assert r.read_exact(5) == b"\x90\x03\x00\x07\x01"
        r.send(publish_pkt(f"{BASE}/c/raw/hi", b'{"object_id":"hi","action":"create"}', qos=1, mid=9))
        got = {}
        for _ in range(2):  # our own message comes back, and the PUBACK; in either order
            first, body = r.read_packet()
            got[first & 0xF0] = (first, body)
        assert got[0x40] == (0x40, b"\x00\x09"), got
        first, body = got[0x30]
        tl = struct.unpack(">H", body[:2])[0]
        assert first & 0x06 == 0x02 and body[2:2 + tl] == f"{BASE}/c/raw/hi".encode()
        assert body[2 + tl + 2:] == b'{"object_id":"hi","action":"create"}'
        bystander.wait_for(f"{BASE}/c/raw/hi")
    finally:
        r.close()


# Regression: empty payloads used to close the connection (paho's Unpack got
# io.EOF from bytes.Reader on the zero-length read; fixed in cc98402). MQTT
# 3.1.1 allows them; arena-py sends one at QoS 2 to $NETWORK/latency at start
# and every 10 s.
@pytest.mark.parametrize("qos,topic", [(0, BASE + "/c/raw/empty"), (1, BASE + "/c/raw/empty"), (2, "$NETWORK/latency")])
def test_empty_payload_publish_keeps_connection(env, qos, topic):
    srv, tok, bystander, writer = env
    r = Raw(srv.mqtt_port)
    try:
        r.send(_good_connect(tok))
        assert r.read_exact(4) == b"\x20\x02\x00\x00"
        r.send(publish_pkt(topic, b"", qos=qos, mid=5) + subscribe_pkt(6, BASE + "/c/#", 0))
        want = {0: b"", 1: b"\x40\x02\x00\x05", 2: b"\x50\x02\x00\x05"}[qos] + b"\x90\x03\x00\x06\x00"
        got = r.read_exact(len(want), timeout=3)
        assert got == want, f"expected ack and SUBACK {want!r}, got {got!r} (connection closed: {r.read_until_closed(0.2)[1]})"
    finally:
        r.close()
