"""aiortc (a third-party WebRTC stack) publishes and subscribes through
xrealm's SFU over WebSocket signalling: a publisher on node 1 and a
subscriber on node 2, so that the video crosses a relay link."""

import asyncio
import json

import pytest

aiortc = pytest.importorskip("aiortc", reason="aiortc not installed: pip install -r tests/requirements.txt")
websockets = pytest.importorskip("websockets", reason="websockets not installed: pip install -r tests/requirements.txt")

from aiortc import RTCPeerConnection, RTCSessionDescription, VideoStreamTrack  # noqa: E402


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
