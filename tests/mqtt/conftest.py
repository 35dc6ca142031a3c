"""A real mosquitto on a free loopback port, a recording subscriber, and client factories."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.support import TIMEOUT, free_port
from voiced.mqtt.client import MqttClient
from voiced.mqtt.config import MqttConfig
from voiced.mqtt.outbox import Outbox, OutboxConfig
from voiced.runtime.backoff import BackoffPolicy

MOSQUITTO = shutil.which("mosquitto") or next(
    (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.access(p, os.X_OK)), None
)
"""Generous: how long to wait for something that must happen."""
FAST = BackoffPolicy(initial=0.02, maximum=0.2, factor=2.0, jitter=0.1)
"""Reconnect quickly in tests."""




class Broker:
    """One mosquitto process on ``port``; ``stop`` and ``start`` again keep the port and its data."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.host = "127.0.0.1"
        self.port = port
        self.workdir = workdir
        self.conf = workdir / "mosquitto.conf"
        self.log = workdir / "mosquitto.log"
        lines = [
            f"listener {port} 127.0.0.1",
            "allow_anonymous true",
            # PUBACKs leave at once instead of waiting for Nagle: a graceful stop then never
            # strands an acknowledgement for a message already forwarded.
            "set_tcp_nodelay true",
            # Run as ourselves: as root mosquitto would switch to its own user, which cannot
            # write its log into our temporary directory.
            f"user {pwd.getpwuid(os.geteuid()).pw_name}",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.proc is None, "already running"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([str(MOSQUITTO), "-c", str(self.conf)], stdout=log, stderr=log)
        deadline = time.monotonic() + TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection((self.host, self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM: mosquitto finishes the packet at hand (a message it forwarded is also
        acknowledged), then exits, forgetting every session; SIGKILL: a crash."""
        if self.proc is None:
            return
        self.proc.send_signal(sig)
        self.proc.wait(timeout=TIMEOUT)
        self.proc = None

    def restart(self, sig: int = signal.SIGTERM) -> None:
        self.stop(sig)
        self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    if MOSQUITTO is None:
        pytest.skip("the mosquitto binary is absent (apt-get install mosquitto)")
    brokers: list[Broker] = []

    def make(start: bool = True) -> Broker:
        workdir = tmp_path / f"broker{len(brokers)}"
        workdir.mkdir()
        b = Broker(workdir, free_port())
        brokers.append(b)
        if start:
            b.start()
        return b

    yield make
    for b in brokers:
        b.stop(signal.SIGKILL)


@pytest.fixture
def broker(broker_factory: Callable[..., Broker]) -> Broker:
    return broker_factory()


class Subscriber:
    """A plain paho client (QoS 1, clean session) that records what it receives.

    It reconnects and subscribes again by itself; ``wait_subscribed(n)`` waits for the n-th
    SUBACK, e.g. the one after a broker restart.
    """

    def __init__(self, broker: Broker, topic: str) -> None:
        self.messages: list[tuple[str, bytes, bool]] = []
        self._cond = threading.Condition()
        self.topic = topic
        self.subacks = 0
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sub-{uuid.uuid4().hex[:8]}")
        self.client.reconnect_delay_set(0.02, 0.2)  # type: ignore[arg-type]
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self.client.connect_async(broker.host, broker.port, keepalive=30)
        self.client.loop_start()
        self.wait_subscribed(1)

    def _on_subscribe(self, *args: Any) -> None:
        with self._cond:
            self.subacks += 1
            self._cond.notify_all()

    def wait_subscribed(self, n: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.subacks >= n, TIMEOUT), f"no SUBACK #{n}"

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if not reason.is_failure:
            client.subscribe(self.topic, qos=1)

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self._cond:
            self.messages.append((msg.topic, bytes(msg.payload), bool(msg.retain)))
            self._cond.notify_all()

    def payloads(self, topic: str | None = None) -> list[bytes]:
        with self._cond:
            return [p for t, p, _ in self.messages if topic is None or t == topic]

    def wait_for(self, predicate: Callable[[list[tuple[str, bytes, bool]]], bool], what: str = "messages") -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self.messages), TIMEOUT):
                raise AssertionError(f"timed out waiting for {what}; got {len(self.messages)} messages")

    def wait_count(self, n: int, topic: str | None = None) -> list[bytes]:
        self.wait_for(lambda ms: sum(1 for t, _, _ in ms if topic is None or t == topic) >= n, f"{n} messages")
        return self.payloads(topic)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def subscriber_factory() -> Iterator[Callable[..., Subscriber]]:
    subs: list[Subscriber] = []

    def make(broker: Broker, topic: str = "#") -> Subscriber:
        s = Subscriber(broker, topic)
        subs.append(s)
        return s

    yield make
    for s in subs:
        s.close()


class Gate:
    """A TCP forwarder in front of the broker that the test opens and shuts.

    A client connected through the gate reaches the broker only while the gate is open, so
    a test decides when the client may come back after a broker restart: e.g. only once the
    subscriber has subscribed again, since a restarted broker remembers no subscription.
    Shutting the gate refuses new connections and leaves established ones alone.
    """

    def __init__(self, broker: Broker) -> None:
        self.host = "127.0.0.1"
        self.port = free_port()
        self.broker = broker
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._replies = threading.Event()
        self._replies.set()

    def open(self) -> None:
        assert self._listener is None
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(16)
        listener.settimeout(0.05)
        self._listener = listener
        self._spawn(self._accept, listener)

    def shut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()  # the accept loop sees the closed socket and ends

    def hold_replies(self) -> None:
        """Keep what the broker sends (PUBACKs…) from the client until ``cut``."""
        self._replies.clear()

    def cut(self) -> None:
        """Sever every established connection at once, both ways, like a network failure.
        Bytes the gate had read and not yet passed on (held replies too) are lost with it."""
        socks, self._socks = self._socks, []
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._replies.set()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                downstream, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.broker.host, self.broker.port))
            except OSError:
                downstream.close()  # the broker is down: the client sees a dropped connection
                continue
            for sock in (downstream, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks += [downstream, upstream]
            self._spawn(self._pump, downstream, upstream, None)
            self._spawn(self._pump, upstream, downstream, self._replies)

    def _pump(self, src: socket.socket, dst: socket.socket, flowing: threading.Event | None) -> None:
        # Everything read is forwarded before the other side is cut: an acknowledgement the
        # broker sent before it died still reaches the client, as it would without the gate.
        try:
            while data := src.recv(65536):
                if flowing is not None:
                    flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        src.close()  # the other direction's pump closes dst

    def close(self) -> None:
        self.shut()
        for t in self._threads:
            t.join(timeout=5)


@pytest.fixture
def gate_factory() -> Iterator[Callable[..., Gate]]:
    gates: list[Gate] = []

    def make(broker: Broker, open: bool = True) -> Gate:
        g = Gate(broker)
        gates.append(g)
        if open:
            g.open()
        return g

    yield make
    for g in gates:
        g.close()


def raw_publish(broker: Broker, topic: str, payload: bytes, retain: bool = False) -> None:
    """Publish one message with a throwaway paho client, waiting for the PUBACK."""
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"raw-{uuid.uuid4().hex[:8]}")
    c.connect(broker.host, broker.port)
    c.loop_start()
    try:
        c.publish(topic, payload, qos=1, retain=retain).wait_for_publish(TIMEOUT)
    finally:
        c.disconnect()
        c.loop_stop()


@pytest.fixture
def client_factory(tmp_path: Path) -> Iterator[Callable[..., MqttClient]]:
    """MqttClients on a broker (running or not) with an outbox in tmp_path; closed at teardown."""
    clients: list[MqttClient] = []

    def make(broker: Broker | Gate, outbox: str = "outbox.sqlite", connect: bool = True, **overrides: Any) -> MqttClient:
        outbox_config = overrides.pop("outbox_config", None) or OutboxConfig(str(tmp_path / outbox))
        options: dict[str, Any] = {
            "host": broker.host,
            "port": broker.port,
            "client_id": f"voiced-test-{uuid.uuid4().hex[:8]}",
            "availability_topic": "voiced/test/availability",
            "backoff": FAST,
        }
        options.update(overrides)
        client = MqttClient(MqttConfig(**options), Outbox(outbox_config))
        clients.append(client)
        if connect:
            client.connect()
        return client

    yield make
    for c in clients:
        c.close(drain_timeout=0)
