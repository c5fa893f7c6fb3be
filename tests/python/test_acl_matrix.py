"""Access-control matrix with paho-mqtt and requests against a real server.

Roles: an editor and a viewer of lab/room1 (tokens from `xrealm token`), an
anonymous viewer of public/lobby (token from POST /user/v2/mqtt_auth with
id_auth=anonymous) and an expired editor token. Each tries to publish and
subscribe on its own scene, another scene of the same namespace, another
namespace, and wildcards at the root.

MQTT 3.1.1 has no negative PUBACK, so a publish's outcome is observed by an
editor of the target scene subscribed to the whole scene: after the PUBACK
(the server has routed or dropped it by then) the observer publishes a
marker; local fan-out is in order, so if the marker arrives and the probe
did not, the probe was not delivered. Persisted creates are checked the same
way through GET /persist, behind a persisted marker.
"""

import json
import time
import uuid

import pytest
import requests

import xr

OWN = {"editor": "lab/room1", "viewer": "lab/room1", "anonymous": "public/lobby"}
OTHER_SCENE = {"editor": "lab/room2", "viewer": "lab/room2", "anonymous": "public/other"}
OTHER_NS = {"editor": "other/room1", "viewer": "other/room1", "anonymous": "lab/room1"}
SCENES = sorted(set(OWN.values()) | set(OTHER_SCENE.values()) | set(OTHER_NS.values()))


def base(scene):
    return "realm/s/" + scene


class World:
    """The shared server, tokens, and one editor observer per scene."""

    def __init__(self, srv):
        self.srv = srv
        self.tokens, self.users = {}, {}
        for role in ("editor", "viewer"):
            self.users[role] = f"{role}-user"
            self.tokens[role] = srv.token(self.users[role], OWN[role], role)
        r = srv.mqtt_auth("public/lobby", username="visitor", userclient="")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["username"].startswith("anonymous-") and body["ids"]["userid"] == body["username"]
        assert r.cookies.get("mqtt_token") == body["token"], "mqtt_auth must set the mqtt_token cookie"
        claims = xr.jwt_claims(body["token"])
        assert claims["sub"] == body["username"] and claims["exp"] > time.time()
        assert all(f.startswith("realm/s/public/lobby/") for f in claims["publ"] + claims["subs"]), claims
        self.users["anonymous"], self.tokens["anonymous"] = body["username"], body["token"]
        # An editor token with the shortest TTL the CLI allows; waited out below.
        self.users["expired"] = "late-user"
        self.tokens["expired"] = srv.token("late-user", "lab/room1", "editor", ttl="1s")
        self.expired_at = xr.jwt_claims(self.tokens["expired"])["exp"]

        self.obs, self.obs_tok = {}, {}
        for sc in SCENES:
            user = "obs-" + sc.replace("/", "-")
            self.obs_tok[sc] = srv.token(user, sc, "editor")
            c = xr.connect(srv.mqtt_port, user, self.obs_tok[sc])
            assert c.subscribe(base(sc) + "/#") == 1
            self.obs[sc] = c

    def client(self, role):
        return xr.connect(self.srv.mqtt_port, self.users[role], self.tokens[role])

    def wait_expired(self):
        # exp has 1 s resolution and is checked against the server's clock.
        while time.time() < self.expired_at + 1.05:
            time.sleep(0.05)

    def barrier(self, scene):
        """Returns once everything routed before now reached the observer."""
        t = f"{base(scene)}/c/obs/marker-{uuid.uuid4().hex[:8]}"
        self.obs[scene].publish(t, json.dumps({"object_id": t.rsplit("/", 1)[1], "action": "create"}), qos=1)
        self.obs[scene].wait_for(t, timeout=10)

    def persist_barrier(self, scene):
        """Returns once every persisted message routed before now was applied."""
        oid = "pmarker-" + uuid.uuid4().hex[:8]
        self.obs[scene].publish(f"{base(scene)}/o/obs/{oid}", xr.obj_msg(oid, object_type="box"), qos=1)
        ns, sc = scene.split("/")
        return self.srv.wait_objects(ns, sc, self.obs_tok[scene], lambda o: oid in o, what="persisted marker")


@pytest.fixture(scope="module")
def world(xrealm_module):
    w = World(xrealm_module)
    yield w
    for c in w.obs.values():
        c.close()


# ------------------------------------------------------------------ subscribe

SUB_CASES = []
for role in ("editor", "viewer", "anonymous"):
    own, other, other_ns = OWN[role], OTHER_SCENE[role], OTHER_NS[role]
    # (role, what, filter, allowed, probe topic the filter matches, or None)
    SUB_CASES += [
        (role, "own scene #", base(own) + "/#", True, base(own) + "/o/obs/p1"),
        (role, "own scene +/+/+ (arena-py)", base(own) + "/+/+/+", True, base(own) + "/u/obs/p2"),
        (role, "own scene objects", base(own) + "/o/#", True, base(own) + "/o/obs/p3"),
        (role, "own scene private to me", base(own) + "/+/+/+/someone/#", True, base(own) + "/o/obs/p4/someone"),
        (role, "other scene", base(other) + "/#", False, base(other) + "/o/obs/p5"),
        (role, "other namespace", base(other_ns) + "/#", False, base(other_ns) + "/o/obs/p6"),
        (role, "namespace wildcard", "realm/s/+/" + own.split("/")[1] + "/#", False, base(other_ns) + "/o/obs/p7"
         if other_ns.split("/")[1] == own.split("/")[1] else base(own) + "/o/obs/p7"),
        (role, "root #", "#", False, base(other) + "/o/obs/p8"),
        (role, "realm/#", "realm/#", False, base(other_ns) + "/o/obs/p9"),
        (role, "+/s/#", "+/s/#", False, base(other) + "/o/obs/p10"),
        (role, "$SYS/#", "$SYS/#", False, None),
    ]


def scene_of(t):
    return "/".join(t.split("/")[2:4])


@pytest.mark.parametrize("role,what,flt,allowed,probe", SUB_CASES, ids=[f"{c[0]}-{c[1]}" for c in SUB_CASES])
def test_subscribe(world, role, what, flt, allowed, probe):
    c = world.client(role)
    try:
        code = c.subscribe(flt, qos=1)
        assert code == (1 if allowed else 0x80), f"SUBACK {code:#x} for {role} on {flt}"
        if probe:
            sc = scene_of(probe)
            oid = probe.split("/")[6]
            world.obs[sc].publish(probe, json.dumps({"object_id": oid, "action": "clientEvent", "type": "mousedown"}))
            world.barrier(sc)
            if allowed:
                c.wait_for(probe, timeout=5)
            else:
                # In-order proof of non-delivery: a granted subscription's
                # marker, published after the probe was routed, arrives
                # and the probe did not.
                own = OWN[role]
                assert c.subscribe(base(own) + "/c/#") == 1
                mark = base(own) + "/c/obs/after"
                world.obs[own].publish(mark, json.dumps({"object_id": "after", "action": "create"}))
                c.wait_for(mark, timeout=5)
                got = [t for t, _, _ in c.received() if t != mark]
                assert got == [], f"denied filter {flt} still delivered {got}"
        assert c.is_connected(), "a denied SUBSCRIBE must not close the connection"
    finally:
        c.close()


# -------------------------------------------------------------------- publish

def create(oid):
    return xr.obj_msg(oid, object_type="box", position={"x": 1, "y": 1, "z": 1})


def click(oid):
    return {"object_id": oid, "action": "clientEvent", "type": "mousedown", "data": {"target": oid, "source": "cam"}}


def pose(oid):
    return {"object_id": oid, "action": "update", "type": "object", "data": {"object_type": "camera", "position": {"x": 0, "y": 1.6, "z": 0}}}


PUB_CASES = []
for role in ("editor", "viewer", "anonymous"):
    edit = role == "editor"
    PUB_CASES += [
        (role, "own scene persisted create", "own", "o", create, edit),
        (role, "own scene delete", "own", "o", lambda oid: {"object_id": oid, "action": "delete"}, edit),
        (role, "own scene clientEvent", "own", "o", click, True),
        (role, "own scene camera pose", "own", "u", pose, True),
        (role, "own scene chat", "own", "c", lambda oid: {"object_id": oid, "action": "create", "type": "chat", "data": {"text": "hi"}}, True),
        (role, "own scene env", "own", "e", lambda oid: {"object_id": oid, "action": "update", "data": {}}, edit),
        (role, "other scene persisted create", "other_scene", "o", create, False),
        (role, "other scene clientEvent", "other_scene", "o", click, False),
        (role, "other scene camera pose", "other_scene", "u", pose, False),
        (role, "other namespace persisted create", "other_ns", "o", create, False),
        (role, "other namespace clientEvent", "other_ns", "o", click, False),
    ]


@pytest.mark.parametrize("role,what,where,msgtype,body,allowed", PUB_CASES, ids=[f"{c[0]}-{c[1]}" for c in PUB_CASES])
def test_publish(world, role, what, where, msgtype, body, allowed):
    scene = {"own": OWN, "other_scene": OTHER_SCENE, "other_ns": OTHER_NS}[where][role]
    oid = f"{role}-{msgtype}-{uuid.uuid4().hex[:6]}"
    t = f"{base(scene)}/{msgtype}/{role}-client/{oid}"
    payload = body(oid)
    c = world.client(role)
    try:
        c.publish(t, json.dumps(payload), qos=1)  # acknowledged in every case
        world.barrier(scene)
        delivered = bool(world.obs[scene].received(t))
        assert delivered == allowed, f"{role} publish on {t}: delivered={delivered}, want {allowed}"
        if payload.get("persist"):
            objs = world.persist_barrier(scene)
            assert (oid in objs) == allowed, f"{role} persisted create on {t}: persisted={oid in objs}, want {allowed}"
        assert c.is_connected(), "a denied PUBLISH must not close the connection"
    finally:
        c.close()


def test_viewer_cannot_delete_or_overwrite_persisted(world):
    """A viewer's delete/update of an existing persisted object changes nothing."""
    sc = OWN["viewer"]
    ns, name = sc.split("/")
    oid = "keep-" + uuid.uuid4().hex[:6]
    world.obs[sc].publish(f"{base(sc)}/o/obs/{oid}", xr.obj_msg(oid, object_type="box", color="#123456"), qos=1)
    world.srv.wait_objects(ns, name, world.obs_tok[sc], lambda o: oid in o)
    v = world.client("viewer")
    try:
        v.publish(f"{base(sc)}/o/v-1/{oid}", json.dumps({"object_id": oid, "action": "delete"}), qos=1)
        v.publish(f"{base(sc)}/o/v-1/{oid}", json.dumps({"object_id": oid, "action": "update", "persist": True, "data": {"color": "#ffffff"}}), qos=1)
        # A clientEvent-looking payload must not smuggle an edit: action decides.
        v.publish(f"{base(sc)}/o/v-1/{oid}", json.dumps({"object_id": oid, "action": "clientEvent", "persist": True, "data": {"color": "#000000"}}), qos=1)
        objs = world.persist_barrier(sc)
        assert oid in objs and objs[oid]["attributes"]["color"] == "#123456", objs.get(oid)
    finally:
        v.close()


# -------------------------------------------------------------------- connect

CONNECT_CASES = [
    ("expired editor token", "expired", None, 5),
    ("user name not the token's sub", "editor", "somebody-else", 4),
    ("no password", "editor", "", 5),
    ("garbage token", "editor", "garbage", 5),
    ("anonymous token, anonymous name", "anonymous", None, 0),
    ("viewer", "viewer", None, 0),
]


@pytest.mark.parametrize("what,role,override,rc", CONNECT_CASES, ids=[c[0] for c in CONNECT_CASES])
def test_connect(world, what, role, override, rc):
    if role == "expired":
        world.wait_expired()
    user, tok = world.users[role], world.tokens[role]
    if override == "":
        tok = None
    elif override == "garbage":
        tok = "not.a.jwt"
    elif override:
        user = override
    c = xr.Client(world.srv.mqtt_port, user, tok)
    try:
        got = c.connect()
        assert got == rc, f"CONNACK {got}, want {rc}"
        if rc:
            assert c.disconnected.wait(5), "server kept a refused connection open"
    finally:
        c.close()


# ----------------------------------------------------------------------- REST

def _set_private(world, scene):
    ns, sc = scene.split("/")
    owner_tok = world.srv.token(ns, scene, "editor")
    r = requests.put(f"{world.srv.http}/scenes/{ns}/{sc}/settings", headers={"Authorization": f"Bearer {owner_tok}"},
                     json={"editors": [], "viewers": ["viewer-user"], "public_read": False, "public_write": False, "anonymous_users": False}, timeout=5)
    assert r.status_code == 200, r.text
    # A non-owner may not change settings.
    r = requests.put(f"{world.srv.http}/scenes/{ns}/{sc}/settings", headers={"Authorization": f"Bearer {world.tokens['editor']}"},
                     json={"public_read": True}, timeout=5)
    assert r.status_code == 403, r.text
    # Nor may a request without a token, and it is told what it lacks.
    r = requests.put(f"{world.srv.http}/scenes/{ns}/{sc}/settings", json={"public_read": True}, timeout=5)
    assert r.status_code == 401 and "needs a token" in r.json()["error"], r.text


REST_CASES = [
    # token role, via, scene, expected status
    ("editor", "bearer", "lab/room1", 200),
    ("editor", "cookie", "lab/room1", 200),
    ("viewer", "bearer", "lab/room1", 200),
    ("viewer", "cookie", "lab/room1", 200),
    ("anonymous", "cookie", "public/lobby", 200),
    # A token for another scene reads what its user may read by the scene's
    # settings: unconfigured scenes are public_read, so a token never reads
    # less than no token at all.
    ("anonymous", "bearer", "lab/room1", 200),
    ("editor", "bearer", "lab/room2", 200),
    ("editor", "cookie", "other/room1", 200),
    ("viewer", "bearer", "other/room1", 200),
    # lab/private lists only viewer-user.
    ("viewer", "bearer", "lab/private", 200),
    ("editor", "bearer", "lab/private", 403),
    ("anonymous", "cookie", "lab/private", 403),
    ("expired", "bearer", "lab/room1", 401),
    ("expired", "cookie", "lab/room1", 401),
    ("garbage", "bearer", "lab/room1", 401),
    ("garbage", "cookie", "lab/room1", 401),
    (None, None, "public/lobby", 200),
    (None, None, "lab/room1", 200),  # a scene nobody configured is public_read
    (None, None, "lab/private", 401),
]


@pytest.mark.parametrize("role,via,scene,status", REST_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in REST_CASES])
def test_rest_get_persist(world, role, via, scene, status):
    if scene == "lab/private":
        _set_private(world, scene)
    if role == "expired":
        world.wait_expired()
    tok = {"garbage": "not.a.jwt"}.get(role) or (world.tokens[role] if role else None)
    ns, sc = scene.split("/")
    r = world.srv.get_persist(ns, sc, tok, cookie=(via == "cookie"))
    assert r.status_code == status, f"GET /persist/{scene} as {role} via {via}: {r.status_code} {r.text}"
    if status == 200:
        assert isinstance(r.json(), list)
    else:
        assert "error" in r.json()


def test_rest_private_scene_and_writes(world):
    _set_private(world, "lab/private")
    srv = world.srv
    # A token for the private scene still reads it; the scene settings do not
    # override token rights.
    vt = srv.token("viewer-user", "lab/private", "viewer")
    assert srv.get_persist("lab", "private", vt).status_code == 200
    # Anonymous token requests are refused for a scene without anonymous users,
    # and allowed for the public namespace.
    r = srv.mqtt_auth("lab/private")
    assert r.status_code == 403, r.text
    assert srv.mqtt_auth("public/anything").status_code == 200
    # A signed-in user gets the role the settings give: listed viewer -> viewer.
    r = srv.mqtt_auth("lab/private", anonymous=False, token=world.tokens["viewer"])
    assert r.status_code == 200 and r.json()["role"] == "viewer", r.text
    r = srv.mqtt_auth("lab/private", anonymous=False, token=world.tokens["editor"])
    assert r.status_code == 403, r.text
    # The namespace owner is an editor.
    r = srv.mqtt_auth("lab/private", anonymous=False, token=srv.token("lab", "lab/x", "viewer"))
    assert r.status_code == 200 and r.json()["role"] == "editor", r.text
    # Tokens are asked for with POST; a GET is told so.
    r = requests.get(f"{srv.http}/user/v2/mqtt_auth", timeout=5)
    assert r.status_code == 405 and r.headers["Allow"] == "POST" and "use POST" in r.json()["error"], r.text

    # DELETE needs a writer's token.
    url = f"{srv.http}/persist/lab/room1"
    assert requests.delete(url, timeout=5).status_code == 401
    assert requests.delete(url, headers={"Authorization": f"Bearer {world.tokens['viewer']}"}, timeout=5).status_code == 403
    assert requests.delete(url, cookies={"mqtt_token": world.tokens["anonymous"]}, timeout=5).status_code == 403
    assert requests.delete(f"{srv.http}/persist/lab/room2", headers={"Authorization": f"Bearer {world.tokens['editor']}"}, timeout=5).status_code == 403
    # !allscenes lists only what the caller may read.
    r = requests.get(f"{srv.http}/persist/!allscenes", timeout=5)
    assert r.status_code == 200 and "lab/private" not in r.json()
