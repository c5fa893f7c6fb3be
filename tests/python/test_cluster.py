"""Three `xrealm serve` nodes clustered on loopback (R3 JetStream state).

Checks: a client on node 1 receives what a client on node 3 publishes;
persisted state written through node 1 is served by every node; killing one
node with SIGKILL loses no persisted object.
"""

import json
import socket
import subprocess
import time

import pytest

import xr

N_OBJ = 30


@pytest.fixture
def cluster(xrealm_factory, tmp_path):
    names = ["n1", "n2", "n3"]
    cports = {n: xr.free_port() for n in names}
    dirs = {n: str(tmp_path / n) for n in names}
    # One signing key for the whole cluster: made once, copied to every node.
    r = subprocess.run([xr.XREALM_BIN, "token", "--data", dirs["n1"], "--user", "x", "--scene", "x/y"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    for n in names[1:]:
        xr.copy_keys(dirs["n1"], dirs[n])
    nodes = []
    for n in names:
        routes = ",".join(f"nats-route://127.0.0.1:{cports[m]}" for m in names if m != n)
        # The NATS client listener must be on: see test_cluster_without_nats_listener.
        nodes.append(xrealm_factory(name=n, data_dir=dirs[n], start=False, listeners=("http", "mqtt", "nats"),
                                    extra=["--cluster-name", "xr", "--cluster-addr", f"127.0.0.1:{cports[n]}", "--routes", routes]))
    for node in nodes:  # start together: JetStream needs a quorum to be ready
        node.start(timeout=0)
    for node in nodes:
        node.wait_healthy(timeout=60)
    return nodes


def test_three_node_cluster(cluster):
    n1, n2, n3 = cluster
    tok = n1.token("lab", "lab/cluster", "editor")
    # Tokens signed with node 1's key are accepted by every node.
    base = "realm/s/lab/cluster"

    # 1. Pub/sub across nodes: subscribe on node 1, publish on node 3. The
    # scene subscription between nodes is set up asynchronously, so probe
    # until the first message arrives, then require every later one.
    sub = xr.connect(n1.mqtt_port, "lab", tok, client_id="sub-n1")
    assert sub.subscribe(base + "/#") == 1
    pub = xr.connect(n3.mqtt_port, "lab", tok, client_id="pub-n3")

    def probe():
        t = f"{base}/u/pub-n3/probe"
        pub.publish(t, json.dumps({"object_id": "probe", "action": "update", "data": {}}), qos=0)
        return sub.received(t)

    xr.wait_until(probe, 20, interval=0.2, what="node 3 -> node 1 delivery")
    for i in range(20):
        pub.publish(f"{base}/u/pub-n3/cam{i}", json.dumps({"object_id": f"cam{i}", "action": "update", "data": {"i": i}}), qos=1)
    for i in range(20):
        _, payload, _ = sub.wait_for(f"{base}/u/pub-n3/cam{i}", timeout=10)
        assert json.loads(payload)["data"] == {"i": i}
    # ...and the other way round, node 1 -> node 2 and node 3.
    subs = []
    for node in (n2, n3):
        s = xr.connect(node.mqtt_port, "lab", tok, client_id=f"sub-{node.name}")
        assert s.subscribe(base + "/c/#") == 1
        subs.append(s)
    w = xr.connect(n1.mqtt_port, "lab", tok, client_id="w-n1")

    def chat():
        w.publish(f"{base}/c/w-n1/hello", json.dumps({"object_id": "hello", "action": "create", "data": {"text": "hi"}}), qos=0)
        return all(s.received(f"{base}/c/w-n1/hello") for s in subs)

    xr.wait_until(chat, 20, interval=0.2, what="node 1 -> nodes 2 and 3 delivery")

    # 2. Persisted state written via node 1 is served by every node.
    for i in range(N_OBJ):
        w.publish(f"{base}/o/w-n1/obj{i}", json.dumps(xr.obj_msg(f"obj{i}", object_type="box", index=i)), qos=1)
    w.publish(f"{base}/o/w-n1/obj0", json.dumps({"object_id": "obj0", "action": "update", "persist": True, "data": {"color": "#00ff00"}}), qos=1)
    want = {f"obj{i}" for i in range(N_OBJ)}

    def complete(o):
        return want <= o.keys() and o["obj0"]["attributes"].get("color") == "#00ff00"

    for node in (n1, n2, n3):
        objs = node.wait_objects("lab", "cluster", tok, complete, timeout=20, what=f"objects on {node.name}")
        assert objs["obj7"]["attributes"] == {"object_type": "box", "index": 7}, objs["obj7"]
        assert objs["obj0"]["attributes"]["index"] == 0
        # The cookie works on every node too (arena-py's way).
        assert node.get_persist("lab", "cluster", tok, cookie=True).status_code == 200

    # 3. kill -9 one node: nothing persisted is lost, and the rest keep working.
    for c in [sub, pub, w] + subs:
        c.close()
    n3.kill9()
    for node in (n1, n2):
        objs = node.wait_objects("lab", "cluster", tok, complete, timeout=20, what=f"objects on {node.name} after n3 died")
        assert want <= objs.keys()
    # Writes through a surviving node are still acknowledged and persisted
    # (2 of 3 replicas are a quorum).
    w2 = xr.connect(n2.mqtt_port, "lab", tok, client_id="w-n2")
    w2.publish(f"{base}/o/w-n2/after", json.dumps(xr.obj_msg("after", object_type="sphere")), qos=1, timeout=20)
    w2.close()
    for node in (n1, n2):
        node.wait_objects("lab", "cluster", tok, lambda o: want | {"after"} <= o.keys(), timeout=20,
                          what=f"post-kill write on {node.name}")

    # The killed node comes back and catches up.
    n3.start(timeout=0)
    n3.wait_healthy(60)
    n3.wait_objects("lab", "cluster", tok, lambda o: want | {"after"} <= o.keys(), timeout=30, what="n3 caught up after restart")


# Regression: nats-server starts routing only after its client listener is up,
# so a cluster node with --nats-addr "" must still listen (on loopback).
def test_cluster_without_nats_listener(tmp_path):
    """Cluster routes must not depend on the NATS client listener being on."""
    names = ["m1", "m2", "m3"]
    cports = {n: xr.free_port() for n in names}
    # One signing key for the cluster, as the README says (nodes with
    # different keys start, but log an error).
    r = subprocess.run([xr.XREALM_BIN, "token", "--data", str(tmp_path / "m1"), "--user", "x", "--scene", "x/y"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    for n in names[1:]:
        xr.copy_keys(str(tmp_path / "m1"), str(tmp_path / n))
    nodes = []
    try:
        for n in names:
            routes = ",".join(f"nats-route://127.0.0.1:{cports[m]}" for m in names if m != n)
            node = xr.XRealm(tmp_path / n, name=n, listeners=("http",),
                             extra=["--cluster-name", "xr", "--cluster-addr", f"127.0.0.1:{cports[n]}", "--routes", routes])
            nodes.append(node)
            node.start(timeout=0)

        def listening():
            for n in names:
                with socket.socket() as s:
                    s.settimeout(0.5)
                    if s.connect_ex(("127.0.0.1", cports[n])) != 0:
                        return False
            return True

        xr.wait_until(listening, 8, interval=0.2, what="the cluster route listeners")
        # Once routes listen, the nodes must also become healthy and stop on SIGTERM.
        for node in nodes:
            node.wait_healthy(60)
        for node in nodes:
            assert node.stop() == 0
    finally:
        for node in nodes:
            if node.running():
                node.kill9()
