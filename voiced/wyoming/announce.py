"""The zeroconf announcement of the Wyoming server (``_wyoming._tcp.local.``), kept true while it runs.

Why a loop and not one registration at start: after a power cut the Pi boots before the router,
so there is no address to announce yet, and months later DHCP may hand out another one. Without
``[wyoming] zeroconf_host`` the address the default route leaves from is checked every
``RECHECK_S`` and announced again when it changes; a registration that fails is retried with
backoff. Loopback is never announced: nothing on the LAN could reach it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from dataclasses import dataclass

from voiced.runtime.backoff import Backoff, BackoffPolicy
from voiced.stages import Counters

__all__ = ["Announcement", "Announcer", "RECHECK_S", "RETRY", "SERVICE_TYPE", "route_address"]

log = logging.getLogger(__name__)

SERVICE_TYPE = "_wyoming._tcp.local."
"""Where Home Assistant looks for Wyoming services."""
RECHECK_S = 30.0
"""How often the default-route address is checked: one connect() of a UDP socket, no packet sent."""
RETRY = BackoffPolicy(initial=2.0, maximum=300.0)
"""Delays between attempts of a registration that failed (no multicast yet, the address not assigned yet)."""
_MDNS_GROUP = ("224.0.0.251", 5353)
FAILURES = "wyoming_zeroconf_failures"
"""The counter of failed registrations (each attempt counts)."""


@dataclass(frozen=True)
class Announcement:
    """What is announced; the address is ``host``, or unset: the default route's, followed."""

    name: str
    """The instance name (``voiced-<site id>`` by default)."""
    port: int
    site: str
    host: str | None = None
    """``[wyoming] zeroconf_host``: announced as given and never replaced."""


class Announcer:
    """Registers one Announcement and keeps it on the current address; runs on the server's loop."""

    def __init__(self, announcement: Announcement, counters: Counters) -> None:
        self.announcement = announcement
        self.counters = counters
        self.host: str | None = None
        """The address announced now; None while nothing is."""
        self._zeroconf: object | None = None
        self._last: str | None = None
        """The address announced last, for the log line of a change."""

    async def run(self) -> None:
        """Announce, then follow the default route's address until cancelled (a fixed host: until announced)."""
        fixed = self.announcement.host
        backoff = Backoff(RETRY)
        waiting = False
        while True:
            host = fixed or route_address()
            if host is None:
                # A route lost after an announcement keeps it: the address may well still be ours.
                if self.host is None and not waiting:
                    log.warning("wyoming: no default route yet; zeroconf will announce the server once there is one")
                waiting = True
            elif host != self.host:
                waiting = False
                try:
                    await self._register(host)
                except Exception as exc:  # no multicast, address not assigned yet: try again later
                    self.counters.add(FAILURES)
                    delay = backoff.next_delay()
                    # Once per run of failures: a network without multicast would log every few minutes.
                    log.log(logging.WARNING if backoff.failures == 1 else logging.DEBUG,
                            "wyoming: zeroconf announcement on %s failed (%s); retrying in %.0f s "
                            "(Home Assistant can add the server by host and port)", host, exc, delay)
                    await asyncio.sleep(delay)
                    continue
                backoff.reset()
                if fixed:
                    return
            await asyncio.sleep(RECHECK_S)

    async def close(self) -> None:
        """Withdraw the announcement (goodbye packets) and close the sockets."""
        zc, self._zeroconf, self.host = self._zeroconf, None, None
        if zc is None:
            return
        try:
            await zc.async_unregister_all_services()  # type: ignore[attr-defined]
            await zc.async_close()  # type: ignore[attr-defined]
        except Exception as exc:  # the old address may be gone already
            log.debug("zeroconf close: %s", exc)

    async def _register(self, host: str) -> None:
        from zeroconf import IPVersion
        from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

        await self.close()  # the stale address first, so Home Assistant does not keep it
        a = self.announcement
        info = AsyncServiceInfo(SERVICE_TYPE, f"{a.name}.{SERVICE_TYPE}", addresses=[socket.inet_aton(host)],
                                port=a.port, properties={"version": "1", "site": a.site})
        zc = AsyncZeroconf(ip_version=IPVersion.V4Only, interfaces=[host])
        self._zeroconf = zc
        broadcast = await zc.async_register_service(info)
        self.host = host
        if self._last is None:
            log.info("wyoming: announced %s on %s:%s by zeroconf", a.name, host, a.port)
        else:
            log.info("wyoming: address changed from %s; announced %s again on %s:%s", self._last, a.name, host, a.port)
        self._last = host
        await broadcast  # sent by a task of zeroconf's: awaited, so shutdown does not leave it pending


def route_address() -> str | None:
    """The address the default route leaves from (no packet is sent); None without one, or when it is loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(_MDNS_GROUP)
            address: str = s.getsockname()[0]
        except OSError:
            return None
    return None if ipaddress.ip_address(address).is_loopback else address
