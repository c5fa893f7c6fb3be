"""A third-party MQTT client for the web end-to-end tests: Eclipse paho-mqtt
(from PyPI, in the repository's .venv) publishing on behalf of the test.

Usage: pypub.py HOST PORT CLIENT_ID USER TOKEN. Prints "ready" once
connected; then reads one JSON line per message from stdin,
{"topic", "payload", "qos"}, publishes it, waits until the broker has it
(PUBACK at QoS 1), and prints "ok" (or "error <reason>").
"""
import json
import sys

import paho.mqtt.client as mqtt

host, port, client_id, user, token = sys.argv[1:6]
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
c.username_pw_set(user, token)
c.connect(host, int(port), keepalive=30)
c.loop_start()
print("ready", flush=True)
for line in sys.stdin:
    try:
        m = json.loads(line)
        info = c.publish(m["topic"], m["payload"], qos=int(m.get("qos", 0)))
        info.wait_for_publish(timeout=10)
        if info.rc != mqtt.MQTT_ERR_SUCCESS or not info.is_published():
            print(f"error publish rc={info.rc}", flush=True)
        else:
            print("ok", flush=True)
    except Exception as e:  # the test reads the reason
        print(f"error {e!r}", flush=True)
c.loop_stop()
c.disconnect()
