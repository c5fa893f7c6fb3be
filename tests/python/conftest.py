"""Fixtures that run the real `xrealm serve` binary ($XREALM_BIN).

`xrealm` starts one server (HTTP + MQTT/TCP on free loopback ports) in a
temp data dir and yields an xr.XRealm: .addrs/.port(), .http, .mqtt_port,
.token(user, scene, role, ttl), .get_persist(...), .objects(...).
`xrealm_factory(**kw)` starts more (other listeners, fixed ports, cluster
flags). At the end every server still running gets SIGTERM and must exit 0.
When a test fails, the tail of each live server's stderr is added to the
report.
"""

import os

import pytest

import xr


def pytest_configure(config):
    if not os.path.isfile(xr.XREALM_BIN) or not os.access(xr.XREALM_BIN, os.X_OK):
        raise pytest.UsageError(f"XREALM_BIN={xr.XREALM_BIN} is not an executable; build it with go build -o bin/xrealm ./cmd/xrealm")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        servers = list(xr.ACTIVE) + [s for s in getattr(item, "_xr_servers", []) if s not in xr.ACTIVE]
        for s in servers:
            rep.sections.append((f"xrealm {s.name} stderr (tail of {s.log_path})", s.tail(80)))


def _make_factory(request, base_dir):
    started = []

    def factory(name="xr", data_dir=None, listeners=("http", "mqtt"), fixed=None, extra=(), start=True, timeout=30):
        s = xr.XRealm(data_dir or os.path.join(base_dir, f"{name}-{len(started)}"), name=name, listeners=listeners, fixed=fixed, extra=extra)
        started.append(s)
        if hasattr(request, "node"):
            request.node._xr_servers = getattr(request.node, "_xr_servers", []) + [s]
        if start:
            s.start(timeout=timeout)
        return s

    def finish():
        bad = []
        for s in started:
            if s.running():
                rc = s.stop()
                if rc != 0:
                    bad.append(f"xrealm {s.name} exited with {rc} on SIGTERM (want 0):\n{s.tail(40)}")
        if bad:
            pytest.fail("\n\n".join(bad))

    return factory, finish


@pytest.fixture
def xrealm_factory(request, tmp_path):
    factory, finish = _make_factory(request, str(tmp_path))
    yield factory
    finish()


@pytest.fixture
def xrealm(xrealm_factory):
    return xrealm_factory()


@pytest.fixture(scope="module")
def xrealm_module_factory(request, tmp_path_factory):
    """xrealm_factory for servers shared by a module's tests."""
    factory, finish = _make_factory(request, str(tmp_path_factory.mktemp("xrmod")))
    yield factory
    finish()


@pytest.fixture(scope="module")
def xrealm_module(xrealm_module_factory):
    """One server shared by a module's tests (e.g. a parametrized matrix)."""
    return xrealm_module_factory()
