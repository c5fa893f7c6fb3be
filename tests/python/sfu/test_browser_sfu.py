"""Browser test: headless Chromium with a fake camera publishes video on SFU
node 1 (site a); a second Chromium, signalling with node 2 (site b),
receives it across the relay link and decodes it (getStats framesDecoded
and the video element's size, reported back to this test's HTTP server).

Chromium comes from Debian (installed here with apt-get when missing and
running as root); the test skips when it cannot be had."""

import json
import os
import shutil
import subprocess
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from queue import Empty, Queue

import pytest

PAGES = Path(__file__).resolve().parent / "browser"


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("Chromium is not installed and this is not root with apt-get: apt-get install chromium")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            pytest.skip(f"cannot install Chromium ({' '.join(cmd)}): {r.stderr.strip()[-300:]}")
    path = shutil.which("chromium")
    if not path:
        pytest.skip("apt-get installed chromium but no chromium binary is on PATH")
    return path


@pytest.fixture(scope="module")
def page_server():
    """Serves the test pages and collects the pages' POST /result bodies."""
    results = Queue()

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(PAGES), **kw)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            role = self.path.split("role=")[-1]
            results.put((role, json.loads(body or b"{}")))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1], results
    srv.shutdown()


def launch(binary, url, profile):
    return subprocess.Popen([binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                             "--disable-background-networking", "--disable-component-update", "--disable-sync",
                             "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
                             "--allow-loopback-in-peer-connection", "--disable-features=WebRtcHideLocalIpsWithMdns",
                             "--autoplay-policy=no-user-gesture-required", f"--user-data-dir={profile}",
                             "--remote-debugging-port=0", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_chromium_video_across_nodes(sfu_nodes, page_server):
    binary = chromium()
    ws1, ws2 = sfu_nodes
    port, results = page_server
    base = f"http://127.0.0.1:{port}/client.html"
    procs, dirs = [], []
    try:
        for role, ws in (("pub", ws1), ("sub", ws2)):
            site = "a" if role == "pub" else "b"
            d = tempfile.mkdtemp(prefix="xrealm-chromium-")
            dirs.append(d)
            procs.append(launch(binary, f"{base}?role={role}&ws=ws://127.0.0.1:{ws}/sfu/ws?site%3D{site}", d))
        got = {}
        while "framesDecoded" not in got.get("sub", {}) and "error" not in got.get("sub", {}) \
                and "error" not in got.get("pub", {}):
            try:
                role, body = results.get(timeout=90)
            except Empty:
                pytest.fail(f"no result from the pages within 90 s; so far {got}")
            got[role] = body
        assert "error" not in got.get("pub", {}), got
        sub = got["sub"]
        assert "error" not in sub, got
        assert sub["framesDecoded"] >= 10 and sub["videoWidth"] > 0, sub
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
