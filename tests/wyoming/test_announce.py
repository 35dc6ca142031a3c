"""The zeroconf announcement follows the network: a Pi that boots before its router, a DHCP address
that changes, a ``zeroconf_host`` or ``uri`` address that is assigned only after start.

Each scenario runs in a network namespace of its own (``unshare -n``) so the test can take the
default route away and hand out addresses: the server, real zeroconf and a real browser run in
a child process there (``python -m tests.wyoming.test_announce SCENARIO``), addresses live on the
namespace's loopback device with a default route through it (no dummy or veth driver needed).
The intervals are shortened; the loops are the real ones.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from wyoming.info import Info

from tests.support import wait_until
from tests.wyoming.test_discovery import _describe
from voiced.config import Config
from voiced.core import Core
from voiced.runtime.backoff import BackoffPolicy
from voiced.wyoming.server import WyomingServer

REPO = Path(__file__).resolve().parents[2]
PORT = 10700
"""Free in a fresh namespace."""
NAME = "voiced-attic._wyoming._tcp.local."
FAST = BackoffPolicy(initial=0.05, maximum=0.2)


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


needs_netns = pytest.mark.skipif(not _unshare_works(), reason="needs unshare -n (root or user namespaces)")


def _in_netns(scenario: Callable[[], None]) -> None:
    done = subprocess.run(["unshare", "-n", sys.executable, "-m", "tests.wyoming.test_announce", scenario.__name__],
                          cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{scenario.__name__} in its namespace:\n{done.stdout}\n{done.stderr}"


@needs_netns
def test_a_pi_that_boots_before_its_router_is_announced_once_it_has_an_address_and_again_when_it_changes() -> None:
    _in_netns(boot_before_the_router)


@needs_netns
def test_a_zeroconf_host_not_assigned_at_start_is_retried_and_kept() -> None:
    _in_netns(zeroconf_host_assigned_late)


@needs_netns
def test_a_uri_address_not_assigned_at_start_is_bound_once_it_is() -> None:
    _in_netns(uri_address_assigned_late)


# -- the scenarios (in the child, inside the namespace) ---------------------------------------------


def boot_before_the_router() -> None:
    with _server(uri=f"tcp://0.0.0.0:{PORT}") as (server, records):
        assert _announced("127.0.0.1", timeout_ms=1500) is None, "loopback announced to the LAN as if reachable"
        wait_until(lambda: _logged(records, "no default route"), what="the no-route warning")
        _address("10.77.0.2")  # the router is up: DHCP lease and default route
        wait_until(lambda: _announced("10.77.0.2") == "10.77.0.2", what="the announcement of 10.77.0.2")
        assert isinstance(_describe(f"tcp://10.77.0.2:{PORT}"), Info)  # what Home Assistant does next
        _address("10.77.0.3", instead_of="10.77.0.2")  # months later, another lease
        wait_until(lambda: _announced("10.77.0.3") == "10.77.0.3", what="the announcement of 10.77.0.3")
        assert _logged(records, "no default route") == 1
        assert _logged(records, "announced voiced-attic again on 10.77.0.3") == 1


def zeroconf_host_assigned_late() -> None:
    with _server(uri=f"tcp://0.0.0.0:{PORT}", zeroconf_host="10.77.0.5") as (server, records):
        wait_until(lambda: server.counters.get("wyoming_zeroconf_failures") >= 3, what="retried announcements")
        _address("10.77.0.6")  # the default route's address: the configured host is kept all the same
        subprocess.run(["ip", "addr", "add", "10.77.0.5/32", "dev", "lo"], check=True)
        wait_until(lambda: _announced("10.77.0.5") == "10.77.0.5", what="the announcement of 10.77.0.5")
        assert _logged(records, "announcement on 10.77.0.5 failed", logging.WARNING) == 1


def uri_address_assigned_late() -> None:
    with _server(uri=f"tcp://10.77.0.9:{PORT}", zeroconf=False) as (server, records):
        assert _logged(records, "10.77.0.9 is not an address of this host yet") == 1
        with pytest.raises(OSError):
            _describe(f"tcp://10.77.0.9:{PORT}")
        subprocess.run(["ip", "addr", "add", "10.77.0.9/32", "dev", "lo"], check=True)
        wait_until(lambda: server.port == PORT, what="the bind")
        assert isinstance(_describe(f"tcp://10.77.0.9:{PORT}"), Info)
        assert _logged(records, "not an address of this host", logging.WARNING) == 1, "one warning, not one a retry"


# -- helpers (in the child) --------------------------------------------------------------------------


@contextmanager
def _server(**wyoming: object) -> Iterator[tuple[WyomingServer, list[logging.LogRecord]]]:
    from voiced.wyoming import announce, server as server_module

    announce.RECHECK_S = 0.1  # shortened in this child process only
    announce.RETRY = FAST
    server_module.BIND_RETRY = FAST
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("voiced.wyoming")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with tempfile.TemporaryDirectory() as state:
        config = Config.from_dict({"site": {"id": "attic"}, "daemon": {"state_dir": state}, "wyoming": wyoming})
        server = WyomingServer(Core(config), config.wyoming)
        server.start()
        try:
            yield server, records
        finally:
            server.stop()


def _address(new: str, instead_of: str | None = None) -> None:
    """Assign ``new`` and make it the default route's source, as a DHCP lease does."""
    if instead_of is not None:
        subprocess.run(["ip", "route", "del", "default"], check=True)
        subprocess.run(["ip", "addr", "del", f"{instead_of}/32", "dev", "lo"], check=True)
    subprocess.run(["ip", "addr", "add", f"{new}/32", "dev", "lo"], check=True)
    subprocess.run(["ip", "route", "add", "default", "dev", "lo", "src", new], check=True)


def _announced(interface: str, timeout_ms: int = 1000) -> str | None:
    """The address a browser on ``interface`` resolves the server to, as Home Assistant would."""
    from zeroconf import IPVersion, Zeroconf

    browser = Zeroconf(interfaces=[interface], ip_version=IPVersion.V4Only)
    try:
        info = browser.get_service_info("_wyoming._tcp.local.", NAME, timeout=timeout_ms)
    finally:
        browser.close()
    return socket.inet_ntoa(info.addresses[0]) if info is not None and info.addresses else None


def _logged(records: list[logging.LogRecord], text: str, level: int = logging.DEBUG) -> int:
    return sum(1 for r in records if text in r.getMessage() and r.levelno >= level)


SCENARIOS = {f.__name__: f for f in (boot_before_the_router, zeroconf_host_assigned_late, uri_address_assigned_late)}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
