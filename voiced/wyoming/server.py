"""The Wyoming server: one asyncio loop on its own thread, the models' work on a small thread pool.

Why asyncio: Home Assistant keeps connections open (a satellite's for hours) and opens one
per STT/TTS request; idle connections cost a coroutine each, not a thread, and the loop
thread only parses and writes. The models run in ``workers`` threads, so a long Whisper
decode never delays another client's events, and neither side ever waits on MQTT.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import socket
import stat
import threading
from collections.abc import Coroutine
from pathlib import Path

from voiced.core.engine import Core
from voiced.errors import ConfigError
from voiced.runtime.backoff import Backoff, BackoffPolicy
from voiced.wyoming.announce import Announcement, Announcer
from voiced.wyoming.config import Scheme, WyomingConfig
from voiced.wyoming.connection import Connection
from voiced.wyoming.framing import FramingError, Limits
from voiced.wyoming.timers import load_bell

__all__ = ["WyomingServer"]

log = logging.getLogger(__name__)

BIND_RETRY = BackoffPolicy(initial=1.0, maximum=30.0)
"""Delays between binds of a ``tcp://`` address this host does not have yet (DHCP still to come at boot)."""
BIND_NAG_S = 600.0
"""While the address is still missing, the warning is repeated this often (each retry in between logs at debug)."""


class WyomingServer:
    """Serves every Wyoming service the core's models allow, on ``[wyoming] uri``."""

    def __init__(self, core: Core, config: WyomingConfig) -> None:
        endpoint = config.endpoint
        if endpoint is None:
            raise ValueError("WyomingServer needs [wyoming] uri")
        self.core = core
        self.config = config
        self.endpoint = endpoint
        self.counters = core.counters
        self.limits = Limits(config.max_line_bytes, config.max_data_bytes, config.max_payload_bytes,
                             config.read_timeout_s)
        self.pool = concurrent.futures.ThreadPoolExecutor(config.workers, thread_name_prefix="wyoming-work")
        where = str(core.config.path) if core.config.path else None
        self.bell = load_bell(config.timer_finished_wav, where) if config.satellite else None
        """What the satellite rings when a timer finishes (loaded now: a bad file fails the start)."""
        self.connections: set[Connection] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port: int | None = None
        """The TCP port bound (useful with port 0)."""
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._announcer: Announcer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        """Announcing, or binding an address not yet assigned: cancelled at shutdown."""

    # -- life cycle (any thread) ----------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> None:
        """Bind and serve on the ``wyoming`` thread; returns once listening (raises if binding failed),
        or once waiting for a ``tcp://`` address this host does not have yet (bound when it appears)."""
        self._thread = threading.Thread(target=self._run, name="wyoming", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)
        if self._error is not None:
            raise self._error

    def stop(self, timeout: float = 2.0) -> None:
        loop = self.loop
        if loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def status(self) -> str:
        return f"wyoming {len(self.connections)} client{'s' if len(self.connections) != 1 else ''}"

    def stats(self) -> dict[str, object]:
        snapshot = self.core.counters.snapshot()
        return {"clients": len(self.connections), "uri": self.config.uri,
                **{k: v for k, v in snapshot.items() if k.startswith("wyoming_")}}

    # -- the loop thread ---------------------------------------------------------------------

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._listen())
        except BaseException as exc:  # reported to start()'s caller
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    async def _listen(self) -> None:
        e = self.endpoint
        if e.scheme is Scheme.TCP:
            try:
                await self._bind_tcp()
            except OSError as exc:  # in use, bad address: one line naming the key, not a traceback
                if exc.errno != errno.EADDRNOTAVAIL:
                    raise self._uri_error(f"cannot listen on {e.host}:{e.port}: {exc.strerror or exc}") from None
                # Not ours yet (the DHCP lease comes after boot): failing start would end in
                # systemd's start limit, so wait for the address on the loop instead.
                log.warning("wyoming: %s is not an address of this host yet; listening once it is", e.host)
                self._spawn(self._bind_when_assigned())
            return
        path = Path(e.path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _clear_stale_socket(path)
            self._server = await asyncio.start_unix_server(self._serve, e.path, limit=self.limits.line_bytes)
        except (OSError, ValueError) as exc:
            raise self._uri_error(f"cannot listen on {path}: {exc}") from None
        log.info("wyoming: serving on %s", self.config.uri)

    async def _bind_tcp(self) -> None:
        e = self.endpoint
        self._server = await asyncio.start_server(self._serve, e.host, e.port, limit=self.limits.line_bytes)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("wyoming: serving on tcp://%s:%s", e.host, self.port)
        if self.config.zeroconf:
            name = self.config.zeroconf_name or f"voiced-{self.core.config.site.id}"
            self._announcer = Announcer(Announcement(name, self.port, self.core.config.site.id,
                                                     self.config.zeroconf_host), self.counters)
            self._spawn(self._announcer.run())

    async def _bind_when_assigned(self) -> None:
        assert self.loop is not None
        backoff = Backoff(BIND_RETRY)
        nagged = self.loop.time()
        while True:
            await asyncio.sleep(backoff.next_delay())
            try:
                await self._bind_tcp()
                return
            except OSError as exc:
                if exc.errno != errno.EADDRNOTAVAIL:  # taken meanwhile, say: start() can no longer report it
                    log.error("wyoming: cannot listen on %s:%s: %s", self.endpoint.host, self.endpoint.port,
                              exc.strerror or exc)
                    return
                if self.loop.time() - nagged >= BIND_NAG_S:
                    nagged = self.loop.time()
                    log.warning("wyoming: %s is still not an address of this host; waiting", self.endpoint.host)
                else:
                    log.debug("wyoming: %s not assigned yet", self.endpoint.host)

    def _spawn(self, work: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _uri_error(self, problem: str) -> ConfigError:
        path = self.core.config.path
        return ConfigError("wyoming.uri", problem, str(path) if path else None)

    async def _shutdown(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._announcer is not None:
            await self._announcer.close()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.connections) >= self.config.max_clients:
            log.warning("wyoming: refusing a client (%d connected, max_clients)", len(self.connections))
            self.counters.add("wyoming_refused")
            writer.close()
            return
        conn = Connection(self, reader, writer)
        self.connections.add(conn)
        self.counters.add("wyoming_connections")
        try:
            await conn.run()
        except FramingError as exc:
            log.warning("wyoming: dropping a client: %s", exc)
            self.counters.add("wyoming_malformed")
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.info("wyoming: client went away (%s)", exc)
            self.counters.add("wyoming_disconnects")
        except Exception:  # a bug in one request handler must not take the server down
            log.exception("wyoming: request failed; dropping the client")
            self.counters.add("wyoming_failures")
        finally:
            self.connections.discard(conn)
            await conn.cleanup()


def _clear_stale_socket(path: Path) -> None:
    """Remove the socket a previous run left at ``path``; refuse to remove anything else (a typo
    must not delete a file) or a socket another server still listens on."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a file"
        raise ValueError(f"it is {kind}, not a socket; remove it or choose another path")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:  # nobody answers: left behind by a run that ended
        path.unlink()
        return
    finally:
        probe.close()
    raise ValueError("another server is listening on it")
