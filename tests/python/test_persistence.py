"""Persistence semantics end to end: paho-mqtt writes, GET /persist reads.

Deep merge with null removal, overwrite, cascade delete through
data.parent, ttl expiry (object removed and a delete published on its
topic), ?type= filtering, single-object reads, DELETE of a scene, clone,
and SIGTERM with clients still connected.
"""

import json
import time

import requests

import xr

NS, SC = "lab", "persist"
BASE = f"realm/s/{NS}/{SC}"


def test_persistence_semantics(xrealm_factory):
    srv = xrealm_factory(name="persist")
    tok = srv.token("lab", f"{NS}/{SC}", "editor")
    c = xr.connect(srv.mqtt_port, "lab", tok)
    assert c.subscribe(BASE + "/#") == 1

    def put(oid, action="create", **kw):
        msg = {"object_id": oid, "action": action, "type": kw.pop("type", "object"), "persist": True, **kw}
        c.publish(f"{BASE}/o/ed-1/{oid}", json.dumps(msg), qos=1)

    def state(pred, what):
        return srv.wait_objects(NS, SC, tok, pred, what=what)

    # Deep merge; null removes a key, nested too; unknown keys survive.
    put("lamp", data={"object_type": "box", "material": {"color": "red", "opacity": 0.5}, "position": {"x": 1, "y": 2, "z": 3}})
    put("lamp", "update", data={"material": {"opacity": None, "shader": "flat"}, "position": {"y": 9}, "visible": False})
    o = state(lambda o: "lamp" in o and o["lamp"]["attributes"].get("visible") is False, "merged update")
    assert o["lamp"]["attributes"] == {"object_type": "box", "material": {"color": "red", "shader": "flat"},
                                       "position": {"x": 1, "y": 9, "z": 3}, "visible": False}, o["lamp"]
    # Timestamps in odd formats (arena-py sends "...+00Z") are accepted.
    put("lamp", "update", data={"scale": {"x": 2, "y": 2, "z": 2}}, timestamp="2026-01-01T00:00:00.000+00Z")
    state(lambda o: "scale" in o["lamp"]["attributes"], "update with a malformed timestamp")
    # overwrite:true replaces the whole object.
    put("lamp", "update", overwrite=True, data={"object_type": "sphere"})
    state(lambda o: o["lamp"]["attributes"] == {"object_type": "sphere"}, "overwrite")
    # create on an existing object is an upsert.
    put("lamp", data={"object_type": "cone", "color": "#00ff00"})
    state(lambda o: o["lamp"]["attributes"].get("object_type") == "cone", "upsert")

    # Cascade delete through data.parent, two levels deep.
    put("table", data={"object_type": "box"})
    put("cup", data={"object_type": "cylinder", "parent": "table"})
    put("spoon", data={"object_type": "box", "parent": "cup"})
    put("chair", data={"object_type": "box"})
    state(lambda o: {"table", "cup", "spoon", "chair"} <= o.keys(), "the hierarchy")
    put("table", "delete")
    o = state(lambda o: not ({"table", "cup", "spoon"} & o.keys()), "cascade delete")
    assert {"lamp", "chair"} <= o.keys()

    # ?type= and single-object reads.
    put("scene-options", type="scene-options", data={"env-presets": {"preset": "forest"}})
    r = srv.get_persist(NS, SC, tok, params={"type": "scene-options"})
    assert r.status_code == 200
    xr.wait_until(lambda: [x["object_id"] for x in srv.get_persist(NS, SC, tok, params={"type": "scene-options"}).json()] == ["scene-options"],
                  10, what="?type=scene-options")
    one = srv.get_persist(NS, SC, tok, obj="chair")
    assert one.status_code == 200 and [x["object_id"] for x in one.json()] == ["chair"]
    gone = srv.get_persist(NS, SC, tok, obj="table")  # ARENA's answer for none: 200 []
    assert gone.status_code == 200 and gone.json() == [], (gone.status_code, gone.text)

    # ttl: the object expires, is removed, and a delete goes out on its topic.
    put("bubble", data={"object_type": "sphere"}, ttl=1)
    state(lambda o: "bubble" in o, "the ttl object")
    t0 = time.monotonic()
    _, payload, _ = c.wait_for(f"{BASE}/o/ed-1/bubble", timeout=10, pred=lambda m: json.loads(m[1]).get("action") == "delete")
    assert json.loads(payload) == {"object_id": "bubble", "action": "delete"}
    state(lambda o: "bubble" not in o, "ttl expiry")
    assert time.monotonic() - t0 < 8

    # Non-persisted and invalid messages are not stored; the sender stays connected.
    c.publish(f"{BASE}/o/ed-1/ghost", json.dumps({"object_id": "ghost", "action": "create", "persist": False, "data": {}}), qos=1)
    c.publish(f"{BASE}/o/ed-1/bad", b'{"object_id":"bad","action":"create","persist":true,', qos=1)
    c.publish(f"{BASE}/o/ed-1/wrongid", json.dumps({"object_id": "other", "action": "create", "persist": True, "data": {}}), qos=1)
    c.publish(f"{BASE}/o/ed-1/weird", json.dumps({"object_id": "weird", "action": "explode", "persist": True, "data": {}}), qos=1)
    put("last", data={"object_type": "box"})
    o = state(lambda o: "last" in o, "the marker after invalid messages")
    assert not ({"ghost", "bad", "wrongid", "other", "weird"} & o.keys()), sorted(o)
    assert c.is_connected()
    log = srv.log_text()
    for oid in ("bad", "wrongid", "weird"):
        assert any(f"o/ed-1/{oid}:" in ln and "level=WARN" in ln for ln in log.splitlines()), \
            f"no log line says why {oid} was not persisted"

    # Clone needs write rights on the target: a viewer is refused; the
    # namespace's owner (user "lab") may clone within its namespace.
    viewer_tok = srv.token("vic", f"{NS}/copy", "viewer")
    r = requests.post(f"{srv.http}/persist/{NS}/copy", json={"action": "clone", "namespace": NS, "sceneId": SC},
                      headers={"Authorization": f"Bearer {viewer_tok}"}, timeout=5)
    assert r.status_code == 403, r.text
    owner_tok = srv.token("lab", f"{NS}/other-scene", "editor")
    n_src = len(srv.objects(NS, SC, tok))
    r = requests.post(f"{srv.http}/persist/{NS}/copy", json={"action": "clone", "namespace": NS, "sceneId": SC},
                      headers={"Authorization": f"Bearer {owner_tok}"}, timeout=5)
    assert r.status_code == 200 and r.json()["objectsCloned"] == n_src, r.text
    srv.wait_objects(NS, "copy", tok, lambda o: len(o) == n_src, what="the owner's clone")
    # DELETE of the scene by its editor empties it.
    r = requests.delete(f"{srv.http}/persist/{NS}/{SC}", headers={"Authorization": f"Bearer {tok}"}, timeout=5)
    assert r.status_code in (200, 204), r.text
    assert srv.objects(NS, SC, tok) == {}

    # SIGTERM with a client connected: the client is disconnected, exit 0.
    assert srv.stop() == 0
    assert c.disconnected.wait(5)
    c.close()


def test_clone_insecure(xrealm_factory):
    """Clone itself (in --insecure mode, where any caller may read and write)."""
    srv = xrealm_factory(name="clone", extra=["--insecure"])
    c = xr.connect(srv.mqtt_port, "anyone", "")
    for i in range(5):
        c.publish(f"realm/s/lab/src/o/x/o{i}", json.dumps(xr.obj_msg(f"o{i}", object_type="box", i=i)), qos=1)
    srv.wait_objects("lab", "src", None, lambda o: len(o) == 5)
    r = requests.post(f"{srv.http}/persist/lab/dst", json={"action": "clone", "namespace": "lab", "sceneId": "src"}, timeout=5)
    assert r.status_code == 200 and r.json()["objectsCloned"] == 5, r.text
    # The clone goes through the stream: applied shortly after the answer.
    o = srv.wait_objects("lab", "dst", None, lambda o: len(o) == 5, what="the cloned objects")
    assert {k: v["attributes"]["i"] for k, v in o.items()} == {f"o{i}": i for i in range(5)}
    r = requests.post(f"{srv.http}/persist/lab/dst", json={"action": "clone", "namespace": "lab", "sceneId": "src"}, timeout=5)
    assert r.status_code == 409, r.text
    c.close()
