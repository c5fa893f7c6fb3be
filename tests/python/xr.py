"""Helpers for the integration tests: a real `xrealm serve` process and a
thin synchronous wrapper around paho-mqtt.

The tests run the binary named by $XREALM_BIN (scripts/test.sh builds it
into bin/xrealm) and talk to it only over the wire.
"""

import base64
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid

import paho.mqtt.client as mqtt
import requests

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
XREALM_BIN = os.environ.get("XREALM_BIN") or os.path.join(REPO, "bin", "xrealm")

# Every server started and not yet stopped; conftest.py prints their log
# tails when a test fails.
ACTIVE = []


# Ports free_port has handed out in this process, never handed out again.
_GIVEN = set()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A loopback port that was free a moment ago.

    It is taken below the kernel's ephemeral range (from which the port
    that bind(0) gives comes too): a cluster node dials its routes before
    the other nodes listen, and its outgoing connection could take a port
    of that range as its source port before the node it was chosen for
    binds it ("address already in use", seen in test_three_node_cluster).
    A port is never handed out twice in one run.
    """
    low = _ephemeral_low()
    if low > 11000:
        for _ in range(500):
            port = random.randint(10000, low - 1)
            if port in _GIVEN:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _GIVEN.add(port)
            return port
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Polls pred until it returns a truthy value, which is returned."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last_exc = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc!r})" if last_exc else ""))
        time.sleep(interval)


def jwt_claims(token):
    payload = token.split(".")[1]
    payload += "=" * (-len(payload) % 4)
    return json.loads(base64.urlsafe_b64decode(payload))


class XRealm:
    """One `xrealm serve` process with its own data dir and ports.

    Listeners not asked for are turned off with empty addresses, except
    HTTP and MQTT/TCP, which every test uses.
    """

    LISTENERS = ("http", "https", "mqtt", "mqtts", "mqtt_ws", "nats", "nats_ws", "ubiq", "ubiq_wss", "ubiq_ws")

    def __init__(self, data_dir, name="xr", listeners=("http", "mqtt"), fixed=None, extra=()):
        self.data_dir = str(data_dir)
        self.name = name
        os.makedirs(self.data_dir, exist_ok=True)
        fixed = fixed or {}
        self.addrs = {}
        for what in self.LISTENERS:
            if what in fixed:
                self.addrs[what] = fixed[what]
            elif what in listeners:
                self.addrs[what] = f"127.0.0.1:{free_port()}"
            else:
                self.addrs[what] = ""
        self.extra = list(extra)
        self.log_path = os.path.join(self.data_dir, f"{name}.stderr.log")
        self.proc = None
        self.returncodes = []

    # ---- addresses
    def port(self, what):
        return int(self.addrs[what].rsplit(":", 1)[1])

    @property
    def http(self):
        return f"http://{self.addrs['http']}"

    @property
    def mqtt_port(self):
        return self.port("mqtt")

    # ---- process control
    def args(self):
        a = [XREALM_BIN, "serve", "--data", self.data_dir, "--name", self.name, "--log-level", "debug"]
        for what in self.LISTENERS:
            a += [f"--{what.replace('_', '-')}-addr", self.addrs[what]]
        return a + self.extra

    def start(self, timeout=30):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.log = open(self.log_path, "ab")
        self.log.write(f"\n===== start {' '.join(self.args())}\n".encode())
        self.log.flush()
        self.proc = subprocess.Popen(self.args(), stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        ACTIVE.append(self)
        if timeout:
            self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout=30):
        def ok():
            if self.proc.poll() is not None:
                raise AssertionError(f"xrealm {self.name} exited with {self.proc.returncode} during start:\n{self.tail()}")
            try:
                return requests.get(self.http + "/healthz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        try:
            wait_until(ok, timeout, what=f"{self.name} /healthz")
        except AssertionError as e:
            if "exited" in str(e):
                raise
            raise AssertionError(f"{e}\n{self.tail()}") from None

    def _finish(self):
        self.returncodes.append(self.proc.returncode)
        if self in ACTIVE:
            ACTIVE.remove(self)
        self.log.close()

    def stop(self, timeout=20):
        """SIGTERM, wait; returns the exit code (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None and self in ACTIVE:
                self._finish()
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._finish()
            return None
        self._finish()
        return self.proc.returncode

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._finish()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n=60):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    # ---- tokens and REST
    def token(self, user, scene, role="editor", ttl="1h", userclient=None):
        a = [XREALM_BIN, "token", "--data", self.data_dir, "--user", user, "--scene", scene, "--role", role, "--ttl", ttl]
        if userclient:
            a += ["--userclient", userclient]
        r = subprocess.run(a, capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, f"xrealm token failed: {r.stderr}"
        return r.stdout.strip()

    def mqtt_auth(self, scene, username="guest", anonymous=True, token=None, **fields):
        data = {"username": username, "realm": "realm", "scene": scene, **fields}
        if anonymous:
            data["id_auth"] = "anonymous"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return requests.post(self.http + "/user/v2/mqtt_auth", data=data, headers=headers, timeout=5)

    def get_persist(self, ns, scene, token=None, cookie=False, obj=None, params=None):
        """GET /persist; returns the requests response."""
        url = f"{self.http}/persist/{ns}/{scene}" + (f"/{obj}" if obj else "")
        headers, cookies = {}, {}
        if token and cookie:
            cookies["mqtt_token"] = token
        elif token:
            headers["Authorization"] = f"Bearer {token}"
        return requests.get(url, headers=headers, cookies=cookies, params=params, timeout=5)

    def objects(self, ns, scene, token=None):
        r = self.get_persist(ns, scene, token)
        assert r.status_code == 200, f"GET /persist/{ns}/{scene}: {r.status_code} {r.text}"
        return {o["object_id"]: o for o in r.json()}

    def wait_objects(self, ns, scene, token, pred, timeout=10, what="persisted objects"):
        box = {}

        def ok():
            box["objs"] = self.objects(ns, scene, token)
            return pred(box["objs"])

        try:
            wait_until(ok, timeout, interval=0.1, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}; last seen: {sorted(box.get('objs', {}))}") from None
        return box["objs"]


def copy_keys(src_data, dst_data):
    """Makes dst share src's token signing key."""
    os.makedirs(dst_data, exist_ok=True)
    shutil.copytree(os.path.join(src_data, "keys"), os.path.join(dst_data, "keys"), dirs_exist_ok=True)


V5_TO_V311_CONNACK = {0x84: 1, 0x85: 2, 0x88: 3, 0x86: 4, 0x87: 5}


class Client:
    """A synchronous paho-mqtt 3.1.1 client that records what it receives."""

    def __init__(self, port, user, token, client_id=None, host="127.0.0.1", tls=False, keepalive=30):
        self.client_id = client_id or f"t-{uuid.uuid4().hex[:8]}"
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=mqtt.MQTTv311)
        if user is not None:
            self.c.username_pw_set(user, token)
        if tls:
            self.c.tls_set(cert_reqs=__import__("ssl").CERT_NONE)
            self.c.tls_insecure_set(True)
        self.host, self.port, self.keepalive = host, port, keepalive
        self.cond = threading.Condition()
        self.msgs = []
        self.connack = None
        self.disconnected = threading.Event()
        self.subacks = {}
        self.c.on_connect = self._on_connect
        self.c.on_message = self._on_message
        self.c.on_subscribe = self._on_subscribe
        self.c.on_disconnect = lambda *a: self.disconnected.set()

    def _on_connect(self, c, u, flags, rc, props):
        with self.cond:
            self.connack = rc
            self.cond.notify_all()

    def _on_message(self, c, u, m):
        with self.cond:
            self.msgs.append((m.topic, m.payload, m.qos))
            self.cond.notify_all()

    def _on_subscribe(self, c, u, mid, rcs, props):
        with self.cond:
            self.subacks[mid] = [rc.value for rc in rcs]
            self.cond.notify_all()

    def connect(self, timeout=10):
        """Connects; returns the CONNACK return code (0 = accepted)."""
        self.c.connect(self.host, self.port, keepalive=self.keepalive)
        self.c.loop_start()
        with self.cond:
            if not self.cond.wait_for(lambda: self.connack is not None, timeout):
                raise AssertionError("no CONNACK")
        rc = self.connack
        rc = rc.value if hasattr(rc, "value") else int(rc)
        # paho 2 reports MQTT 3.1.1 CONNACK codes as MQTT 5 reason codes.
        return V5_TO_V311_CONNACK.get(rc, rc)

    def subscribe(self, flt, qos=1, timeout=10):
        """Subscribes; returns the SUBACK code (granted QoS, or 0x80)."""
        res, mid = self.c.subscribe(flt, qos)
        assert res == mqtt.MQTT_ERR_SUCCESS, res
        with self.cond:
            if not self.cond.wait_for(lambda: mid in self.subacks, timeout):
                raise AssertionError(f"no SUBACK for {flt}")
            return self.subacks[mid][0]

    def publish(self, topic, payload, qos=1, timeout=10):
        if not isinstance(payload, (str, bytes)):
            payload = json.dumps(payload)
        info = self.c.publish(topic, payload, qos)
        info.wait_for_publish(timeout)
        assert info.is_published(), f"publish on {topic} not acknowledged within {timeout}s"

    def received(self, topic=None, pred=None):
        with self.cond:
            return [m for m in self.msgs if (topic is None or m[0] == topic) and (pred is None or pred(m))]

    def wait_for(self, topic, timeout=10, pred=None):
        """Waits for a message on topic (and matching pred); returns it."""
        with self.cond:
            ok = self.cond.wait_for(lambda: any(m[0] == topic and (pred is None or pred(m)) for m in self.msgs), timeout)
            if not ok:
                raise AssertionError(f"{self.client_id}: no message on {topic} within {timeout}s; got {[m[0] for m in self.msgs][-10:]}")
            return next(m for m in self.msgs if m[0] == topic and (pred is None or pred(m)))

    def wait_any(self, pred, timeout=10, what="a matching message"):
        """Waits for a message (topic, payload, qos) for which pred is true."""
        with self.cond:
            if not self.cond.wait_for(lambda: any(pred(m) for m in self.msgs), timeout):
                raise AssertionError(f"{self.client_id}: no {what} within {timeout}s; got {[m[0] for m in self.msgs][-10:]}")
            return next(m for m in self.msgs if pred(m))

    def is_connected(self):
        return self.c.is_connected() and not self.disconnected.is_set()

    def close(self):
        try:
            self.c.disconnect()
        finally:
            self.c.loop_stop()


def connect(port, user, token, **kw):
    c = Client(port, user, token, **kw)
    rc = c.connect()
    assert rc == 0, f"CONNECT of {user} refused with {rc}"
    return c


def obj_msg(object_id, action="create", persist=True, **data):
    return {"object_id": object_id, "action": action, "type": "object", "persist": persist, "data": data}
