"""How Home Assistant finds and reaches the server: zeroconf on tcp, and a unix socket. No models needed."""

from __future__ import annotations

import asyncio
import socket

import pytest
from wyoming.client import AsyncClient
from wyoming.info import Describe, Info

from tests.support import free_port
from voiced.config import Config
from voiced.core import Core
from voiced.errors import ConfigError
from voiced.wyoming.server import WyomingServer


def _serve(tmp_path, **wyoming) -> WyomingServer:
    config = Config.from_dict({"site": {"id": "attic"}, "daemon": {"state_dir": str(tmp_path / "state")},
                               "wyoming": wyoming})
    server = WyomingServer(Core(config), config.wyoming)
    server.start()
    return server


def _describe(uri: str) -> Info:
    async def go() -> Info:
        client = AsyncClient.from_uri(uri)
        await client.connect()
        await client.write_event(Describe().event())
        event = await client.read_event()
        await client.disconnect()
        assert event is not None
        return Info.from_event(event)

    return asyncio.run(asyncio.wait_for(go(), 30))


def test_zeroconf_announces_the_server_where_home_assistant_looks(tmp_path) -> None:
    from zeroconf import IPVersion, Zeroconf

    port = free_port()
    server = _serve(tmp_path, uri=f"tcp://127.0.0.1:{port}", zeroconf_host="127.0.0.1")
    browser = Zeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)
    try:
        info = browser.get_service_info("_wyoming._tcp.local.", "voiced-attic._wyoming._tcp.local.", timeout=5000)
        assert info is not None, "no _wyoming._tcp.local. announcement"
        assert info.port == port and socket.inet_ntoa(info.addresses[0]) == "127.0.0.1"
        # what Home Assistant does next: connect to the announced address and describe
        described = _describe(f"tcp://127.0.0.1:{info.port}")
        assert described.asr == [] and described.tts == []  # no models configured: nothing offered
    finally:
        browser.close()
        server.stop()


def test_a_unix_socket_serves_the_same_protocol(tmp_path) -> None:
    path = tmp_path / "run" / "wyoming.sock"
    server = _serve(tmp_path, uri=f"unix://{path}")
    try:
        assert path.is_socket()
        assert isinstance(_describe(f"unix://{path}"), Info)
    finally:
        server.stop()


@pytest.mark.parametrize("uri, message", [
    ("http://0.0.0.0:10700", "tcp:// or unix://"),
    ("tcp://0.0.0.0", "host and a port"),
    ("tcp://0.0.0.0:notaport", "host and a port"),
    ("unix://", "socket path"),
])
def test_a_bad_uri_is_a_config_error_naming_the_key(uri: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"wyoming.uri.*{message}"):
        Config.from_dict({"wyoming": {"uri": uri}})



def test_a_socket_path_is_never_a_file_or_a_live_server_and_a_busy_port_is_one_error(tmp_path) -> None:
    """The path of a socket left by a run that ended is reused; a file there (a typo: the config's
    own path, say) used to be deleted without a word, and a busy port or a directory ended in a
    traceback. Each is now a ConfigError naming wyoming.uri; the file is left alone."""
    path = tmp_path / "wyoming.sock"
    first = _serve(tmp_path, uri=f"unix://{path}")
    try:
        with pytest.raises(ConfigError, match="wyoming.uri.*another server is listening"):
            _serve(tmp_path, uri=f"unix://{path}")
        assert isinstance(_describe(f"unix://{path}"), Info), "the first server still serves"
    finally:
        first.stop()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "stale.sock"))  # bound, never listening: what a killed run leaves
    stale.close()
    second = _serve(tmp_path, uri=f"unix://{tmp_path / 'stale.sock'}")
    second.stop()
    precious = tmp_path / "voiced.toml"
    precious.write_text("[site]\n")
    with pytest.raises(ConfigError, match="wyoming.uri.*is a file, not a socket"):
        _serve(tmp_path, uri=f"unix://{precious}")
    assert precious.read_text() == "[site]\n"
    with pytest.raises(ConfigError, match="wyoming.uri.*is a directory"):
        _serve(tmp_path, uri=f"unix://{tmp_path}")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        with pytest.raises(ConfigError, match="wyoming.uri.*cannot listen on 127.0.0.1"):
            _serve(tmp_path, uri=f"tcp://127.0.0.1:{busy.getsockname()[1]}", zeroconf=False)
    finally:
        busy.close()
