"""arena-py 1.6.0, unmodified from PyPI, against a real `xrealm serve`.

arena-py fetches https://{host}/conf/defaults.json and skips certificate
checks only for host "localhost", and always uses MQTT/TLS on 8883, so the
server runs with HTTPS on 127.0.0.1:443 and MQTT/TLS on 127.0.0.1:8883.
Those fixed ports are guarded by an inter-process lock so that two test
runs on this machine do not collide.
"""

import fcntl
import json
import os
import queue
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import requests

import xr

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

NS, SCENE = "lab", "arenapy"
BASE = f"realm/s/{NS}/{SCENE}"

PROGRAM = textwrap.dedent(
    r'''
    # An ordinary arena-py program using the public API only.
    import json, sys
    from arena import Scene, Box, Sphere, Position, Color

    scene = Scene(host="localhost", namespace="%(ns)s", scene="%(scene)s")
    state = {"events": 0}

    def say(*a):
        print(*a, flush=True)

    def on_click(scn, evt, msg):
        state["events"] += 1
        say("EVENT", json.dumps({"type": evt.type, "object_id": evt.object_id, "source": msg.get("data", {}).get("source")}))
        if state["events"] > 1:
            return
        # React to the click: recolor and move the box, delete the sphere
        # (its child goes with it), and update the object made before us.
        scn.update_object(box, color=Color(0, 255, 0), position=Position(4, 5, 6))
        scn.delete_object(sphere)
        pre = scn.get_persisted_obj("xr_pre")
        scn.update_object(pre, position=Position(7, 8, 9))
        say("REACTED")

    box = Box(object_id="xr_box", position=Position(1, 2, 3), color=Color(255, 0, 0),
              persist=True, clickable=True, evt_handler=on_click)
    sphere = Sphere(object_id="xr_sphere", position=Position(0, 1, 0), persist=True)
    child = Box(object_id="xr_child", parent="xr_sphere", position=Position(0, 1, 0), persist=True)
    temp = Box(object_id="xr_temp", position=Position(0, 0, 0))  # not persisted

    @scene.run_once
    def setup():
        # The persisted scene as arena-py loaded it at connect (GET /persist with the cookie).
        pre = scene.get_persisted_obj("xr_pre")
        c = pre.data.color
        say("PRE", json.dumps({"object_id": pre.object_id, "color": [c.red, c.green, c.blue]}))
        # An object that is not stored: ARENA answers [] and arena-py raises
        # ValueError (an error status would end the program: sys.exit).
        try:
            scene.get_persisted_obj("xr_missing")
            say("MISSING found")
        except ValueError as e:
            say("MISSING not found", e)
        scene.add_objects([box, sphere, child, temp])
        say("READY")

    scene.run_tasks()
    '''
)


@pytest.fixture
def fixed_ports_lock():
    """Serializes use of ports 443/8883 between test runs on this machine."""
    with open("/tmp/xrealm-tests-443-8883.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        for port in (443, 8883):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError as e:
                    pytest.fail(f"port {port} is in use ({e}); the arena-py test needs 443 and 8883 free")
        yield
        fcntl.flock(f, fcntl.LOCK_UN)


class Program:
    """The arena-py program as a time-bounded subprocess with captured output."""

    def __init__(self, script, env, cwd):
        self.proc = subprocess.Popen([sys.executable, "-u", script], env=env, cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        self.lines = []
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self.q.put(line.rstrip("\n"))
        self.q.put(None)

    def expect(self, prefix, timeout):
        """Waits for an output line starting with prefix; returns it."""
        for line in self.lines:
            if line.startswith(prefix):
                return line
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"arena-py program printed no {prefix!r} line within {timeout}s")
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"arena-py program exited ({self.proc.wait()}) before printing {prefix!r}")
            if line.startswith(prefix):
                return line

    def output(self):
        return "\n".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_arena_py_program(xrealm_factory, fixed_ports_lock, tmp_path, request):
    srv = xrealm_factory(name="arena", listeners=("http", "mqtt"),
                         fixed={"https": "127.0.0.1:443", "mqtts": "127.0.0.1:8883"})
    user = "lab"  # the namespace's owner
    token = srv.token(user, f"{NS}/{SCENE}", "editor")
    viewer_tok = srv.token("clicker", f"{NS}/{SCENE}", "viewer")

    # What arena-py reads first, over HTTPS on 443.
    d = requests.get("https://localhost/conf/defaults.json", verify=False, timeout=5).json()["ARENADefaults"]
    for k in ("mqttHost", "persistHost", "persistPath", "latencyTopic"):
        assert k in d, f"defaults.json lacks {k}: {d}"
    assert d["persistHost"] == "localhost" and d["mqttHost"] == "localhost"

    # An object that exists before the program starts: arena-py loads it.
    ed = xr.connect(srv.mqtt_port, user, token)
    ed.subscribe(BASE + "/#")
    ed.publish(BASE + "/o/setup/xr_pre", xr.obj_msg("xr_pre", object_type="cylinder", color="#0000ff",
                                                   position={"x": 0, "y": 0, "z": 0}), qos=1)
    srv.wait_objects(NS, SCENE, token, lambda o: "xr_pre" in o)

    home = tmp_path / "home"
    (home / ".arena" / "python").mkdir(parents=True)
    # arena-py checks PyPI for a newer version at most daily: say it just did.
    (home / ".arena" / "python" / ".arena_package_settings").write_text(
        json.dumps({"version_check": {"last_check": time.time(), "latest_version": "1.6.0"}}))
    script = tmp_path / "arena_program.py"
    script.write_text(PROGRAM % {"ns": NS, "scene": SCENE})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARENA_", "MQTTH", "REALM", "NAMESPACE", "SCENE"))}
    env.update(HOME=str(home), MQTTH="localhost", ARENA_USERNAME=user, ARENA_PASSWORD=token, PYTHONWARNINGS="ignore")
    # (PROGRAM_STATS_UPDATE_INTERVAL_MS cannot shorten the 5 s status interval:
    # arena-py 1.6.0 divides the env string by 1000 and crashes.)

    prog = Program(str(script), env, str(tmp_path))
    try:
        try:
            pre = json.loads(prog.expect("PRE ", 40)[4:])
            assert pre["object_id"] == "xr_pre" and pre["color"] == [0, 0, 255], pre
            missing = prog.expect("MISSING", 10)
            assert missing.startswith("MISSING not found"), missing
            prog.expect("READY", 10)

            # The creates reached persistence (arena-py publishes at QoS 0).
            objs = srv.wait_objects(NS, SCENE, token, lambda o: {"xr_box", "xr_sphere", "xr_child"} <= o.keys(),
                                    what="arena-py's persisted creates")
            box = objs["xr_box"]
            assert box["type"] == "object"
            assert box["attributes"]["object_type"] == "box"
            assert box["attributes"]["position"] == {"x": 1, "y": 2, "z": 3}
            assert box["attributes"]["color"].lower() == "#ff0000"
            assert objs["xr_child"]["attributes"]["parent"] == "xr_sphere"
            assert "xr_temp" not in objs, "a create without persist was persisted"
            # Other clients saw the creates live, from pyClient-N userClient topics.
            t, payload, _ = ed.wait_any(lambda m: re.fullmatch(BASE + r"/o/pyClient-\d+/xr_box", m[0]) is not None)
            assert json.loads(payload)["action"] == "create"

            # A second client (a viewer, paho-mqtt) clicks the box.
            vw = xr.connect(srv.mqtt_port, "clicker", viewer_tok)
            click = {"object_id": "xr_box", "action": "clientEvent", "type": "mousedown",
                     "data": {"target": "xr_box", "source": "camera_clicker",
                              "position": {"x": 1, "y": 2, "z": 3}, "clickPos": {"x": 0, "y": 1.6, "z": 0}}}
            vw.publish(BASE + "/o/clicker-1/xr_box", click, qos=1)
            ev = json.loads(prog.expect("EVENT ", 15)[6:])
            assert ev == {"type": "mousedown", "object_id": "xr_box", "source": "camera_clicker"}, ev
            prog.expect("REACTED", 10)

            # The program's update and deletes, as persisted.
            def reacted(o):
                b = o.get("xr_box")
                return (b and b["attributes"].get("color", "").lower() == "#00ff00"
                        and "xr_sphere" not in o and "xr_child" not in o
                        and o.get("xr_pre", {}).get("attributes", {}).get("position") == {"x": 7, "y": 8, "z": 9})

            objs = srv.wait_objects(NS, SCENE, token, reacted, what="arena-py's update and deletes")
            b = objs["xr_box"]["attributes"]
            assert b["position"] == {"x": 4, "y": 5, "z": 6}
            assert b["object_type"] == "box", "the update lost keys it did not mention"
            assert objs["xr_pre"]["attributes"]["color"].lower() == "#0000ff", "delta update on xr_pre lost its color"
            assert objs["xr_pre"]["attributes"]["object_type"] == "cylinder"
            # Single-object and filtered reads agree.
            one = srv.get_persist(NS, SCENE, token, cookie=True, obj="xr_box")
            assert one.status_code == 200 and one.json()[0]["attributes"]["color"].lower() == "#00ff00"
            cyl = srv.get_persist(NS, SCENE, token, params={"type": "object"})
            assert {o["object_id"] for o in cyl.json()} == {"xr_box", "xr_pre"}

            # Its program status (every 5 s on p/) reaches other clients, and
            # it is still connected after its QoS 2 $NETWORK/latency publish.
            t, payload, _ = ed.wait_any(lambda m: re.fullmatch(BASE + r"/p/(pyClient-\d+)/\1", m[0]) is not None,
                                        timeout=12, what="arena-py program status on p/")
            assert json.loads(payload)["object_id"] == t.rsplit("/", 1)[1]

            # arena-py stayed connected the whole time (it exits on disconnect).
            assert prog.proc.poll() is None, f"arena-py exited with {prog.proc.returncode}"
            assert "Connected!" in prog.output()
            for bad in ("Disconnected", "FAILURE", "Something went wrong", "Traceback"):
                assert bad not in prog.output(), f"arena-py printed {bad!r}"
            ed.close()
            vw.close()
        except BaseException:
            print("----- arena-py program output -----")
            print(prog.output())
            raise
    finally:
        prog.stop()
