"""kill -9 durability: a persisted create acknowledged at QoS 1 survives a
SIGKILL of the server and a restart on the same data dir."""

import json

import xr

N = 50


def test_acked_creates_survive_kill9(xrealm_factory, tmp_path):
    data = tmp_path / "data"
    srv = xrealm_factory(name="dur", data_dir=str(data))
    tok = srv.token("lab", "lab/durable", "editor")
    c = xr.connect(srv.mqtt_port, "lab", tok)
    base = "realm/s/lab/durable/o/writer-1"
    # Fire all N without waiting, then wait for every PUBACK.
    infos = []
    for i in range(N):
        oid = f"obj{i:03d}"
        msg = xr.obj_msg(oid, object_type="box", position={"x": i, "y": 0, "z": 0}, index=i)
        infos.append(c.c.publish(f"{base}/{oid}", json.dumps(msg), qos=1))
    # A few updates and a delete, also acknowledged before the kill.
    infos.append(c.c.publish(f"{base}/obj000", json.dumps({"object_id": "obj000", "action": "update", "persist": True, "data": {"color": "#abcdef"}}), qos=1))
    infos.append(c.c.publish(f"{base}/obj049", json.dumps({"object_id": "obj049", "action": "delete"}), qos=1))
    for info in infos:
        info.wait_for_publish(15)
        assert info.is_published(), f"message {info.mid} was not acknowledged"
    srv.kill9()  # immediately after the last PUBACK
    c.close()
    assert srv.returncodes[-1] == -9

    srv.start()
    want = {f"obj{i:03d}" for i in range(N - 1)}
    # The applier catches up from the stream after the restart: wait for the
    # whole acknowledged state (creates, the update, the delete).
    objs = srv.wait_objects("lab", "durable", tok,
                            lambda o: want <= o.keys() and "obj049" not in o and o["obj000"]["attributes"].get("color") == "#abcdef",
                            timeout=20, what=f"{N - 1} acknowledged objects, the update and the delete after kill -9 and restart")
    for i in range(N - 1):
        a = objs[f"obj{i:03d}"]["attributes"]
        assert a["index"] == i and a["position"] == {"x": i, "y": 0, "z": 0} and a["object_type"] == "box", a
    assert objs["obj000"]["attributes"]["index"] == 0, "the update replaced instead of merging"
    assert set(objs) == want, f"unexpected objects: {set(objs) - want}"


def test_kill9_mid_burst_keeps_every_acked_create(xrealm_factory, tmp_path):
    """SIGKILL while creates are in flight: every one acknowledged before the
    kill is there after the restart (the others may or may not be)."""
    srv = xrealm_factory(name="burst", data_dir=str(tmp_path / "data"))
    tok = srv.token("lab", "lab/burst", "editor")
    c = xr.Client(srv.mqtt_port, "lab", tok)
    c.c.max_inflight_messages_set(1000)
    assert c.connect() == 0
    base = "realm/s/lab/burst/o/writer-1"
    total = 600
    infos = {}
    for i in range(total):
        oid = f"b{i:04d}"
        infos[oid] = c.c.publish(f"{base}/{oid}", json.dumps(xr.obj_msg(oid, object_type="box", index=i)), qos=1)
    xr.wait_until(lambda: sum(i.is_published() for i in infos.values()) >= total // 3, 20, interval=0.002,
                  what="a third of the burst acknowledged")
    srv.kill9()
    acked = {oid for oid, info in infos.items() if info.is_published()}
    c.close()
    assert total // 3 <= len(acked), len(acked)

    srv.start()
    objs = srv.wait_objects("lab", "burst", tok, lambda o: acked <= o.keys(), timeout=20,
                            what=f"{len(acked)} creates acknowledged before kill -9")
    for oid in acked:
        assert objs[oid]["attributes"]["index"] == int(oid[1:])
