"""Every MQTT listener with paho-mqtt: TCP, TLS (verified against the
self-signed certificate the server generated into its data dir), WebSocket
on --mqtt-ws-addr, and WebSocket at /mqtt on the HTTP and HTTPS ports. One
client per transport, all in one scene: each receives what every other
publishes. HTTPS serves the same REST routes with the same certificate."""

import json
import os
import ssl

import paho.mqtt.client as mqtt
import requests

import xr

SCENE = "lab/transports"
BASE = "realm/s/" + SCENE


def make(kind, srv, tok, ca):
    c = xr.Client(0, "lab", tok, client_id=f"c-{kind}")
    if kind == "tcp":
        c.port = srv.port("mqtt")
        return c
    if kind in ("ws", "ws-http", "wss-https"):
        c.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=c.client_id, protocol=mqtt.MQTTv311, transport="websockets")
        c.c.username_pw_set("lab", tok)
        c.c.ws_set_options(path="/mqtt")
        c.c.on_connect, c.c.on_message, c.c.on_subscribe = c._on_connect, c._on_message, c._on_subscribe
        c.c.on_disconnect = lambda *a: c.disconnected.set()
        c.port = srv.port({"ws": "mqtt_ws", "ws-http": "http", "wss-https": "https"}[kind])
    else:
        c.port = srv.port("mqtts")
    if kind in ("tls", "wss-https"):
        ctx = ssl.create_default_context(cafile=ca)  # verifies the chain and the host name
        c.c.tls_set_context(ctx)
        c.host = "localhost"
    return c


def test_all_transports_interoperate(xrealm_factory):
    srv = xrealm_factory(name="tr", listeners=("http", "https", "mqtt", "mqtts", "mqtt_ws"))
    ca = os.path.join(srv.data_dir, "tls", "cert.pem")
    assert os.path.isfile(ca), f"no self-signed certificate in {srv.data_dir}/tls: {os.listdir(srv.data_dir)}"
    tok = srv.token("lab", SCENE, "editor")
    kinds = ["tcp", "tls", "ws", "ws-http", "wss-https"]
    clients = {}
    try:
        for k in kinds:
            c = make(k, srv, tok, ca)
            assert c.connect() == 0, k
            assert c.subscribe(BASE + "/#") == 1, k
            clients[k] = c
        for k, c in clients.items():
            c.publish(f"{BASE}/o/c-{k}/from-{k}", json.dumps(xr.obj_msg(f"from-{k}", object_type="box", via=k)), qos=1)
        for k, c in clients.items():
            for other in kinds:
                _, payload, _ = c.wait_for(f"{BASE}/o/c-{other}/from-{other}", timeout=10)
                assert json.loads(payload)["data"]["via"] == other
        # HTTPS: same routes, same certificate, verified.
        https = f"https://localhost:{srv.port('https')}"
        r = requests.get(f"{https}/persist/lab/transports", headers={"Authorization": f"Bearer {tok}"}, verify=ca, timeout=5)
        assert r.status_code == 200
        assert {o["object_id"] for o in r.json()} == {f"from-{k}" for k in kinds}
        d = requests.get(f"{https}/conf/defaults.json", verify=ca, timeout=5).json()["ARENADefaults"]
        assert d["persistPath"] == "/persist/" and d["latencyTopic"] == "$NETWORK/latency"
        h = requests.get(f"{https}/healthz", verify=ca, timeout=5).json()
        assert h["mqtt_connections"] == len(kinds)
        # Prometheus metrics on HTTP count the connections.
        m = requests.get(srv.http + "/metrics", timeout=5)
        assert m.status_code == 200 and "xrealm" in m.text
    finally:
        for c in clients.values():
            c.close()
