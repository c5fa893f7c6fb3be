"""aiortc (a third-party WebRTC stack) publishes and subscribes through
xrealm's SFU over WebSocket signalling: a publisher on node 1 and a
subscriber on node 2, so that the video crosses a relay link."""

import asyncio
import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

aiortc = pytest.importorskip("aiortc", reason="aiortc not installed: pip install -r tests/requirements.txt")
websockets = pytest.importorskip("websockets", reason="websockets not installed: pip install -r tests/requirements.txt")

from aiortc import RTCPeerConnection, RTCSessionDescription, VideoStreamTrack  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"port {port} did not open")


@pytest.fixture(scope="module")
def sfu_nodes():
    binary = os.environ.get("XREALM_BIN")
    if not binary:
        binary = str(ROOT / "xrealm")
        subprocess.run(["go", "build", "-o", binary, "./cmd/xrealm"], cwd=ROOT, check=True)
    data = tempfile.mkdtemp(prefix="xrealm-sfu-py-")
    nats_port, ws1, ws2 = free_port(), free_port(), free_port()
    procs = []
    try:
        bus = subprocess.Popen([binary, "serve", "--insecure", "--data", data, "--nats-addr", f"127.0.0.1:{nats_port}",
                                "--http-addr", "", "--https-addr", "", "--mqtt-addr", "", "--mqtts-addr", "",
                                "--mqtt-ws-addr", "", "--nats-ws-addr", ""],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(bus)
        wait_port(nats_port, bus)
        for node_id, site, port, extra in (("1", "a", ws1, ["--manager"]), ("2", "b", ws2, [])):
            p = subprocess.Popen([binary, "sfu", "--join", f"nats://127.0.0.1:{nats_port}", "--id", node_id, "--site", site,
                                  "--http-addr", f"127.0.0.1:{port}", "--ice-addrs", "127.0.0.1", "--log-level", "warn", *extra],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            wait_port(port, p)
        yield ws1, ws2
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


async def signal_offer(ws, session, client, pc):
    await pc.setLocalDescription(await pc.createOffer())
    await ws.send(json.dumps({"op": "offer", "session": session, "client": client, "sdp": pc.localDescription.sdp}))
    while True:
        msg = json.loads(await ws.recv())
        if msg.get("op") == "answer":
            break
        if msg.get("op") == "error":
            raise RuntimeError(msg.get("error"))
    await pc.setRemoteDescription(RTCSessionDescription(sdp=msg["sdp"], type="answer"))


async def run(ws1, ws2):
    session = "py"
    pub = RTCPeerConnection()
    pub.addTransceiver(VideoStreamTrack(), direction="sendonly")
    sub = RTCPeerConnection()
    sub.addTransceiver("video", direction="recvonly")
    frames = []
    got = asyncio.Event()

    @sub.on("track")
    def on_track(track):
        async def reader():
            while True:
                try:
                    f = await track.recv()
                except Exception:
                    return
                frames.append((f.width, f.height))
                if len(frames) >= 5:
                    got.set()

        asyncio.ensure_future(reader())

    async with websockets.connect(f"ws://127.0.0.1:{ws1}/sfu/ws?site=a") as wpub, \
            websockets.connect(f"ws://127.0.0.1:{ws2}/sfu/ws?site=b") as wsub:
        await signal_offer(wpub, session, "aiopub", pub)
        await signal_offer(wsub, session, "aiosub", sub)
        try:
            await asyncio.wait_for(got.wait(), 60)
        finally:
            await pub.close()
            await sub.close()
    return frames


def test_aiortc_publish_and_subscribe_across_nodes(sfu_nodes):
    ws1, ws2 = sfu_nodes
    frames = asyncio.run(run(ws1, ws2))
    assert len(frames) >= 5, frames
    assert frames[-1] == (640, 480), frames[-1]
