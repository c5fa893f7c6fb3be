"""Fixtures for the SFU tests: a bus (xrealm serve) and two SFU nodes with
WebSocket signalling, node 1 at site a, node 2 at site b."""

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

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
    """Yields the HTTP ports of SFU node 1 (site a) and node 2 (site b)."""
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
                                "--mqtt-ws-addr", "", "--nats-ws-addr", "", "--ubiq-addr", "", "--ubiq-wss-addr", ""],
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
