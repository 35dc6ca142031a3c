"""MqttClient against a real mosquitto: delivery, outages, restarts, last will, bad input."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import make_certificates, wait_until
from voiced.configfile import section_from_dict
from voiced.errors import ConfigError
from voiced.mqtt.client import MqttClient
from voiced.mqtt.config import MqttConfig
from voiced.mqtt.hermes import MalformedMessage, Topic, parse_nlu_query, parse_tts_say
from voiced.mqtt.outbox import Outbox, OutboxConfig

from tests.disk_fixtures import SmallDisk

from .conftest import Broker, Gate, Subscriber, raw_publish

REPO = Path(__file__).resolve().parents[2]
AVAILABILITY = "voiced/test/availability"


def numbered(payloads: list[bytes]) -> list[int]:
    return [int(p) for p in payloads]


def test_publish_is_delivered_in_order_and_acknowledged(
    broker: Broker, subscriber_factory: Callable[..., Subscriber], client_factory: Callable[..., MqttClient]
) -> None:
    sub = subscriber_factory(broker, "data/#")
    client = client_factory(broker, max_inflight=4)  # a small window: the refill path is exercised
    for i in range(100):
        assert client.publish("data/n", str(i).encode())
    assert numbered(sub.wait_count(100)) == list(range(100))
    wait_until(lambda: client.stats()["published"] == 100, what="every PUBACK")
    stats = client.stats()
    assert stats["queued"] == 0 and stats["inflight"] == 0 and stats["connected"] is True


def test_birth_is_retained_online_and_close_publishes_offline(
    broker: Broker, subscriber_factory: Callable[..., Subscriber], client_factory: Callable[..., MqttClient]
) -> None:
    client = client_factory(broker)
    first = subscriber_factory(broker, AVAILABILITY)
    first.wait_for(lambda ms: any(p == b"online" for _, p, _ in ms), "online")
    late = subscriber_factory(broker, AVAILABILITY)  # subscribes after the birth: sees it retained
    late.wait_for(lambda ms: (AVAILABILITY, b"online", True) in ms, "retained online")
    client.close(drain_timeout=5)
    late.wait_for(lambda ms: ms[-1][1] == b"offline", "offline on close")


class Producer(threading.Thread):
    """Publishes 0, 1, 2, … as a steady stream; can pause at a message boundary."""

    def __init__(self, client: MqttClient, topic: str, total: int) -> None:
        super().__init__(name="producer")
        self.client, self.topic, self.total = client, topic, total
        self.published = 0
        self._run = threading.Event()
        self._run.set()
        self._paused = threading.Event()

    def run(self) -> None:
        for i in range(self.total):
            if not self._run.is_set():
                self._paused.set()
                self._run.wait()
                self._paused.clear()
            assert self.client.publish(self.topic, str(i).encode())
            self.published = i + 1
            if i % 10 == 0:
                threading.Event().wait(0.002)

    def pause(self) -> None:
        self._run.clear()
        assert self._paused.wait(20) or not self.is_alive()

    def resume(self) -> None:
        self._run.set()


def test_broker_killed_and_restarted_mid_stream_loses_and_repeats_nothing(
    broker: Broker,
    gate_factory: Callable[..., Gate],
    subscriber_factory: Callable[..., Subscriber],
    client_factory: Callable[..., MqttClient],
) -> None:
    sub = subscriber_factory(broker, "stream/#")
    gate = gate_factory(broker)
    client = client_factory(gate)
    assert client.wait_connected(20)
    total = 600
    producer = Producer(client, "stream/n", total)
    producer.start()
    sub.wait_count(100)
    # The kill comes when nothing is in flight. With a message in flight QoS 1 itself allows
    # a duplicate (the broker forwarded it and died before its PUBACK reached us; that case
    # has its own test below), and a broker without persistence that dies loses what it
    # acknowledged but had not yet forwarded. Publishing goes on while the broker is down.
    producer.pause()
    wait_until(lambda: client.stats()["queued"] == 0, what="everything so far acknowledged")
    sub.wait_count(producer.published)  # … and forwarded
    gate.shut()  # the client may come back only after the subscriber (see below)
    broker.stop(signal.SIGKILL)
    producer.resume()
    at_kill = producer.published
    wait_until(lambda: producer.published >= min(total, at_kill + 100), what="publishing while the broker is down")
    broker.start()
    # The restarted broker knows no subscription: let the client in once the subscriber is back.
    sub.wait_subscribed(2)
    gate.open()
    producer.join()
    got = sub.wait_count(total)
    wait_until(lambda: client.stats()["queued"] == 0, what="an empty outbox")
    assert numbered(got) == list(range(total))  # every message, once, in order
    stats = client.stats()
    assert stats["reconnects"] >= 1
    assert stats["published"] == total
    assert numbered(sub.payloads()) == list(range(total))  # and nothing more arrived later


def test_connection_cut_with_messages_in_flight_resends_only_those_in_order(
    broker: Broker,
    gate_factory: Callable[..., Gate],
    subscriber_factory: Callable[..., Subscriber],
    client_factory: Callable[..., MqttClient],
) -> None:
    # The network fails while messages are in flight. The broker stays up and delivers
    # whatever reached it; what the client did not see acknowledged it sends
    # again (QoS 1: at least once), first, in order, then the rest of the stream.
    sub = subscriber_factory(broker, "flight/#")
    gate = gate_factory(broker)
    window = 8
    client = client_factory(gate, max_inflight=window)
    assert client.wait_connected(20)
    total = 400
    producer = Producer(client, "flight/n", total)
    producer.start()
    sub.wait_count(100)
    # Held with nothing in flight, so no acknowledgement is on its way when the gate holds them.
    producer.pause()
    wait_until(lambda: client.stats()["queued"] == 0, what="everything so far acknowledged")
    gate.hold_replies()  # PUBACKs stop reaching the client: the window fills and stays full
    producer.resume()
    wait_until(lambda: client.stats()["inflight"] == window, what="a full window")
    handed = client.stats()["published"] + window
    sub.wait_count(handed)  # the broker forwarded every message in flight
    gate.cut()
    producer.join()
    sub.wait_for(lambda ms: {p for _, p, _ in ms} >= {str(n).encode() for n in range(total)}, "every message")
    wait_until(lambda: client.stats()["queued"] == 0, what="an empty outbox")
    got = numbered(sub.payloads())
    assert client.stats()["reconnects"] >= 1
    # Exactly the window in flight at the cut comes again, first and in order: a rewind to
    # the first unacknowledged message, then the rest of the stream; no gap, no disorder.
    assert got == list(range(handed)) + list(range(handed - window, total))


def test_client_started_while_the_broker_is_down_delivers_its_backlog(
    broker_factory: Callable[..., Broker],
    gate_factory: Callable[..., Gate],
    subscriber_factory: Callable[..., Subscriber],
    client_factory: Callable[..., MqttClient],
) -> None:
    broker = broker_factory(start=False)
    gate = gate_factory(broker, open=False)
    client = client_factory(gate)  # connect() returns although nothing listens
    assert not client.connected
    for i in range(30):
        client.publish("backlog/n", str(i).encode())
    wait_until(lambda: client.stats()["connect_failures"] >= 2, what="retries with backoff")
    assert client.stats()["queued"] == 30
    broker.start()
    sub = subscriber_factory(broker, "backlog/#")
    gate.open()
    assert numbered(sub.wait_count(30)) == list(range(30))
    wait_until(lambda: client.stats()["queued"] == 0, what="an empty outbox")


def test_outbox_survives_the_process_and_a_new_client_delivers_the_rest(
    tmp_path: Path,
    broker_factory: Callable[..., Broker],
    subscriber_factory: Callable[..., Subscriber],
    client_factory: Callable[..., MqttClient],
) -> None:
    broker = broker_factory(start=False)
    db = tmp_path / "state" / "outbox.sqlite"
    script = textwrap.dedent(f"""
        from voiced.mqtt.client import MqttClient
        from voiced.mqtt.config import MqttConfig
        from voiced.mqtt.outbox import Outbox, OutboxConfig
        from voiced.runtime.backoff import BackoffPolicy
        client = MqttClient(
            MqttConfig(host="127.0.0.1", port={broker.port}, backoff=BackoffPolicy(0.02, 0.2)),
            Outbox(OutboxConfig({str(db)!r})),
        )
        client.connect()
        for i in range(25):
            client.publish("restart/n", str(i).encode())
        client.close(drain_timeout=0)
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=60)
    with Outbox(OutboxConfig(str(db))) as box:
        assert len(box) == 25  # on disk, written by the process that is gone
    broker.start()
    sub = subscriber_factory(broker, "restart/#")
    client = client_factory(broker, outbox=str(db.relative_to(tmp_path)))
    assert numbered(sub.wait_count(25)) == list(range(25))
    wait_until(lambda: client.stats()["queued"] == 0, what="an empty outbox")


def test_a_second_client_on_the_same_outbox_sends_only_what_was_not_acknowledged(
    broker: Broker, subscriber_factory: Callable[..., Subscriber], client_factory: Callable[..., MqttClient]
) -> None:
    sub = subscriber_factory(broker, "rest/#")
    first = client_factory(broker, outbox="shared.sqlite")
    for i in range(10):
        first.publish("rest/n", str(i).encode())
    sub.wait_count(10)
    wait_until(lambda: first.stats()["queued"] == 0, what="the first ten acknowledged")
    broker.stop()
    for i in range(10, 20):
        first.publish("rest/n", str(i).encode())
    first.close(drain_timeout=0)
    broker.start()
    sub.wait_subscribed(2)
    client_factory(broker, outbox="shared.sqlite")
    assert numbered(sub.wait_count(20)) == list(range(20))
    assert numbered(sub.payloads()) == list(range(20))


def test_last_will_says_offline_when_the_client_dies(
    tmp_path: Path, broker: Broker, subscriber_factory: Callable[..., Subscriber]
) -> None:
    sub = subscriber_factory(broker, "lwt/#")
    script = textwrap.dedent(f"""
        import threading
        from voiced.mqtt.client import MqttClient
        from voiced.mqtt.config import MqttConfig
        from voiced.mqtt.outbox import Outbox, OutboxConfig
        client = MqttClient(
            MqttConfig(host="127.0.0.1", port={broker.port}, availability_topic="lwt/availability"),
            Outbox(OutboxConfig({str(tmp_path / "lwt.sqlite")!r})),
        )
        client.connect()
        threading.Event().wait()
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        sub.wait_for(lambda ms: ("lwt/availability", b"online", False) in ms, "online")
        proc.send_signal(signal.SIGKILL)  # no DISCONNECT: the broker publishes the will
        proc.wait(timeout=20)
        sub.wait_for(lambda ms: ms[-1][:2] == ("lwt/availability", b"offline"), "the last will")
    finally:
        proc.kill()
        proc.wait()


def test_bad_payloads_are_counted_and_survived(
    broker: Broker, subscriber_factory: Callable[..., Subscriber], client_factory: Callable[..., MqttClient]
) -> None:
    client = client_factory(broker, max_payload_bytes=1024)
    queries: list[str] = []
    client.subscribe(Topic.NLU_QUERY, lambda topic, payload: queries.append(parse_nlu_query(payload).input))

    def explode(topic: str, payload: bytes) -> None:
        raise RuntimeError("handler bug")

    client.subscribe("boom", explode)
    assert client.wait_connected(20)
    wait_until(lambda: client.stats()["connected"], what="subscriptions")
    # A message to ourselves proves the subscriptions are in place before the bad input.
    client.publish(Topic.NLU_QUERY, json.dumps({"input": "first"}))
    wait_until(lambda: queries == ["first"], what="the first query")
    bad = [
        b"not json {",
        b"\xff\xfe",
        b"[1, 2, 3]",
        json.dumps({"siteId": "default"}).encode(),  # input missing
        json.dumps({"input": 42}).encode(),  # wrong type
        json.dumps({"input": "x", "intentFilter": "HassTurnOn"}).encode(),  # not a list
    ]
    for payload in bad:
        raw_publish(broker, Topic.NLU_QUERY, payload)
    raw_publish(broker, Topic.NLU_QUERY, json.dumps({"input": "y" * 2000}).encode())  # oversized
    raw_publish(broker, "boom", b"{}")
    raw_publish(broker, Topic.NLU_QUERY, json.dumps({"input": "still here"}).encode())
    wait_until(lambda: queries == ["first", "still here"], what="the valid query after the bad ones")
    stats = client.stats()
    assert stats["malformed"] == len(bad)
    assert stats["dropped_oversized"] == 1
    assert stats["handler_errors"] == 1
    # The client still publishes, and refuses oversized payloads of its own.
    sub = subscriber_factory(broker, "after/#")
    assert client.publish("after/ok", b"fine")
    assert not client.publish("after/big", b"z" * 1025)
    assert sub.wait_count(1) == [b"fine"]
    assert client.stats()["dropped_oversized"] == 2


def test_a_subscription_may_take_larger_payloads_and_answer_the_ones_over_its_own_limit(
    broker: Broker, client_factory: Callable[..., MqttClient]
) -> None:
    """playBytes carries whole WAVs: its subscription takes more than the config's limit, and one
    over even that is still answered (the sender waits for playFinished)."""
    client = client_factory(broker, max_payload_bytes=1024)
    got: list[int] = []
    too_big: list[tuple[str, int]] = []
    client.subscribe("audio/+", lambda topic, payload: got.append(len(payload)), max_payload_bytes=100_000,
                     on_oversized=lambda topic, size: too_big.append((topic, size)))
    client.subscribe("small", lambda topic, payload: got.append(-len(payload)))
    assert client.wait_connected(20)
    client.publish("audio/a", b"x")
    wait_until(lambda: got == [1], what="the subscriptions")
    raw_publish(broker, "audio/b", b"w" * 50_000)  # over the config's 1024, within the subscription's
    raw_publish(broker, "audio/c", b"w" * 100_001)
    raw_publish(broker, "small", b"s" * 2000)  # other subscriptions keep the config's limit
    raw_publish(broker, "small", b"s" * 10)
    wait_until(lambda: got == [1, 50_000, -10], what="the payloads within their limits")
    assert too_big == [("audio/c", 100_001)]
    assert client.stats()["dropped_oversized"] == 2


def test_two_clients_with_one_client_id_are_told_about(
    broker: Broker, client_factory: Callable[..., MqttClient], caplog: pytest.LogCaptureFixture
) -> None:
    """Satellites cloned from one image share a host name: with one client id the broker drops the
    older connection each time the other connects, for ever. The log says why; and the retries
    back off instead of flapping at the first delay with a warning each time (two a second)."""
    from voiced.mqtt.client import BRIEF_IN_A_ROW

    with caplog.at_level(logging.DEBUG, logger="voiced.mqtt.client"):
        first = client_factory(broker, client_id="voiced-raspberrypi", outbox="a.sqlite")
        second = client_factory(broker, client_id="voiced-raspberrypi", outbox="b.sqlite")
        wait_until(lambda: "another client using client id 'voiced-raspberrypi'" in caplog.text, timeout=60,
                   what="the warning")
        wait_until(lambda: first.stats()["reconnects"] + second.stats()["reconnects"] >= 12, timeout=60,
                   what="more reconnects")
    dropped = [r for r in caplog.records if r.getMessage().startswith("disconnected from")]
    warned = [r for r in dropped if r.levelno == logging.WARNING]
    assert len(warned) <= 2 * (BRIEF_IN_A_ROW - 1) < len(dropped)  # the rest are debug lines
    delays = [float(r.getMessage().rsplit(" ", 2)[-2]) for r in dropped]
    assert max(delays) >= 0.15 > 0.02 * 1.1 * 2  # grown towards FAST's maximum (0.2 s), not reset each time


def test_the_daemon_s_default_client_id_carries_its_site() -> None:
    config = MqttConfig()
    assert config.for_site("kitchen").client_id == f"voiced-{socket.gethostname()}-kitchen"
    assert config.for_site("kitchen").for_site("den").client_id.endswith("-kitchen")  # set once, then kept
    assert MqttConfig(client_id="mine").for_site("kitchen").client_id == "mine"


def test_the_log_paces_malformed_messages_per_subscription(
    broker: Broker, client_factory: Callable[..., MqttClient], caplog: pytest.LogCaptureFixture
) -> None:
    """Ten bad messages on one topic used to turn every later one, on any topic, into a DEBUG line:
    a newly broken automation went unseen."""
    client = client_factory(broker)
    seen: list[str] = []
    client.subscribe(Topic.NLU_QUERY, lambda topic, payload: seen.append(parse_nlu_query(payload).input))
    client.subscribe(Topic.TTS_SAY, lambda topic, payload: seen.append(parse_tts_say(payload).text))
    assert client.wait_connected(20)
    client.publish(Topic.NLU_QUERY, json.dumps({"input": "first"}))
    wait_until(lambda: seen == ["first"], what="the subscriptions")
    with caplog.at_level(logging.DEBUG, logger="voiced.mqtt.client"):
        for _ in range(12):
            raw_publish(broker, Topic.NLU_QUERY, b"not json")
        raw_publish(broker, Topic.TTS_SAY, b'{"text": 42}')
        wait_until(lambda: client.stats()["malformed"] == 13, what="13 malformed messages")
    levels = [(r.levelno, Topic.TTS_SAY in r.getMessage()) for r in caplog.records if "malformed" in r.getMessage()]
    assert levels[:10] == [(logging.WARNING, False)] * 10 and levels[10:12] == [(logging.DEBUG, False)] * 2
    assert levels[12] == (logging.WARNING, True), "the first bad message on another topic is a warning"


def test_malformed_message_is_a_voiced_error() -> None:
    from voiced.errors import VoicedError

    assert issubclass(MalformedMessage, VoicedError)


def test_subscriptions_come_back_after_a_broker_restart(
    broker: Broker, client_factory: Callable[..., MqttClient]
) -> None:
    client = client_factory(broker)
    seen: list[bytes] = []
    client.subscribe("cmd/#", lambda t, p: seen.append(p))
    assert client.wait_connected(20)
    client.publish("cmd/x", b"1")
    wait_until(lambda: seen == [b"1"], what="our own message")
    broker.restart()
    wait_until(lambda: client.stats()["reconnects"] >= 1 and client.connected, what="the reconnect")
    client.publish("cmd/x", b"2")
    wait_until(lambda: seen == [b"1", b"2"], what="the message after the restart")


def test_password_file_and_tls_files_must_exist(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(ConfigError) as err:
        MqttConfig(username="u", password_file=missing)
    assert err.value.key == "mqtt.password_file" and missing in str(err.value)
    with pytest.raises(ConfigError) as err:
        MqttConfig(ca_file=missing)
    assert missing in str(err.value)
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    assert MqttConfig(username="u", password_file=str(secret)).read_password() == "s3cret"


def test_tls_with_a_client_certificate_to_a_real_broker_and_bad_files_named(
        tmp_path: Path, broker_factory: Callable[..., Broker], client_factory: Callable[..., MqttClient]) -> None:
    """A ca_file that is no certificate, or a certificate with another's key, failed inside paho at
    start with a Python traceback (after the models had loaded), while doctor called the config valid."""
    make_certificates(tmp_path)
    broker = broker_factory(start=False)
    broker.conf.write_text(broker.conf.read_text() + f"cafile {tmp_path / 'ca.crt'}\n"
                           f"certfile {tmp_path / 'server.crt'}\nkeyfile {tmp_path / 'server.key'}\n"
                           "require_certificate true\n")
    broker.start()
    files = {"ca_file": str(tmp_path / "ca.crt"), "cert_file": str(tmp_path / "client.crt"),
             "key_file": str(tmp_path / "client.key")}
    client = client_factory(broker, **files)
    assert client.publish("tls/x", b"1")
    wait_until(lambda: client.stats()["published"] == 1, what="the PUBACK over TLS")
    with pytest.raises(ConfigError, match=r"^mqtt\.ca_file in voiced\.toml: .*client\.key holds no CA certificate"):
        section_from_dict(MqttConfig, {**files, "ca_file": files["key_file"]}, "mqtt", "voiced.toml")
    with pytest.raises(ConfigError, match=r"^mqtt\.cert_file in voiced\.toml: .*client\.crt with key_file .*server\.key"):
        section_from_dict(MqttConfig, {**files, "key_file": str(tmp_path / "server.key")}, "mqtt", "voiced.toml")


def test_the_mqtt_table_is_validated_with_keys_and_file_named(tmp_path: Path) -> None:
    config = section_from_dict(
        MqttConfig, {"host": "broker", "port": 8883, "tls": True, "backoff": {"initial": 1, "maximum": 10}},
        "mqtt", "voiced.toml",
    )
    assert config.port == 8883 and config.uses_tls and config.backoff.maximum == 10.0
    for data, key in [
        ({"port": 0}, "mqtt.port"),
        ({"keepalive": 1}, "mqtt.keepalive"),
        ({"availability_topic": "a/#"}, "mqtt.availability_topic"),
        ({"cert_file": str(tmp_path)}, "mqtt.cert_file"),
        ({"password_file": str(tmp_path / "pw")}, "mqtt.username"),
        ({"username": "u", "password_file": str(tmp_path / "pw")}, "mqtt.password_file"),
    ]:
        with pytest.raises(ConfigError) as err:
            section_from_dict(MqttConfig, data, "mqtt", "voiced.toml")
        assert err.value.key == key and err.value.source == "voiced.toml"


def test_publish_before_connect_is_kept_and_sent_later(
    broker: Broker, subscriber_factory: Callable[..., Subscriber], client_factory: Callable[..., MqttClient]
) -> None:
    sub = subscriber_factory(broker, "early/#")
    client = client_factory(broker, connect=False)
    client.publish("early/n", b"0")
    assert client.stats()["queued"] == 1
    client.connect()
    assert sub.wait_count(1) == [b"0"]



def test_first_attempt_ends_with_a_refused_broker_and_with_an_accepting_one(
    broker_factory: Callable[..., Broker],
    gate_factory: Callable[..., Gate],
    client_factory: Callable[..., MqttClient],
) -> None:
    """voiced run sends READY after the first attempt: a broker that is down must not hold it back."""
    down = broker_factory(start=False)
    refused = client_factory(gate_factory(down, open=False))
    # a long bound: it must return because the attempt failed (counted), not because the bound ran out
    assert refused.wait_first_attempt(60.0) is False
    assert refused.stats()["connect_failures"] >= 1 and not refused.connected
    up = broker_factory()
    accepted = client_factory(up)
    assert accepted.wait_first_attempt(60.0) is True and accepted.connected


def test_publishing_goes_on_while_the_disk_is_full(
    broker: Broker, small_disk: SmallDisk, subscriber_factory: Callable[..., Subscriber],
    client_factory: Callable[..., MqttClient], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A daemon started on a full disk publishes at once from memory, and one whose disk fills up goes on
    publishing; the file's older messages follow once there is room. Nothing lost, nothing twice."""
    import voiced.mqtt.outbox as outbox_module

    monkeypatch.setattr(outbox_module, "_REOPEN_EVERY_S", 0.0)
    path = str(small_disk.path / "outbox.sqlite3")
    offline = client_factory(broker, outbox_config=OutboxConfig(path), connect=False)
    for i in range(5):
        offline.publish("disk/n", str(i).encode())  # never sent: they wait in the file
    offline.close(drain_timeout=0)
    small_disk.fill()
    sub = subscriber_factory(broker, "disk/#")
    client = client_factory(broker, outbox_config=OutboxConfig(path))  # starts although the disk is full
    for i in range(5, 25):
        assert client.publish("disk/n", str(i).encode())
    assert numbered(sub.wait_count(20)) == list(range(5, 25))  # delivered from memory
    wait_until(lambda: client.stats()["held_in_memory"] == 0, what="every PUBACK: nothing left to write")
    small_disk.free()
    for i in range(25, 30):
        client.publish("disk/n", str(i).encode())
    assert sorted(numbered(sub.wait_count(30))) == list(range(30))
    wait_until(lambda: client.stats()["queued"] == 0, what="an empty outbox")
    assert len(sub.payloads()) == 30


def test_live_publishes_are_no_early_acks_that_drop_an_outbox_message_reusing_their_mid(
    broker: Broker, subscriber_factory: Callable[..., Subscriber], client_factory: Callable[..., MqttClient]
) -> None:
    """paho calls on_publish for QoS 0 too: each live publish (arbitration claims) was filed as an early
    ack and kept for the whole connection. Once paho's mid counter wrapped (65,535 publishes), an outbox
    message given such a mid was deleted from the outbox the moment it was handed, before any PUBACK."""
    live = 200
    sub = subscriber_factory(broker, "live/#")
    client = client_factory(broker)
    assert client.wait_connected(20)
    wait_until(lambda: client.stats()["inflight"] == 0, what="the birth message's PUBACK")
    first_mid = client._paho._last_mid + 1
    for i in range(live):
        assert client.publish_live("live/claim", str(i).encode())
    live_mids = range(first_mid, client._paho._last_mid + 1)
    assert len(live_mids) == live
    sub.wait_count(live)  # all written: paho has called on_publish for each
    wait_until(lambda: not client._direct, what="every live publish's on_publish")
    assert not client._early_acks & set(live_mids), "live publishes' mids were kept as early acks"
    assert len(client._early_acks) <= 1
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGSTOP)  # frozen: no PUBACK can come until SIGCONT
    try:
        client._paho._last_mid = live_mids[0] - 1  # what 65,535 more publishes on this connection do
        assert client.publish("hermes/intent/important", b"1")
        wait_until(lambda: client.stats()["inflight"] == 1 or client.stats()["queued"] == 0,
                   what="the outbox message handed to paho")
        stats = client.stats()
        assert (stats["queued"], stats["inflight"], stats["published"]) == (1, 1, 0), \
            "the outbox message was taken as acknowledged before its PUBACK"
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    wait_until(lambda: client.stats()["queued"] == 0 and client.stats()["published"] == 1, what="the real PUBACK")


def test_a_broker_refusing_the_credentials_is_warned_about_once_not_on_every_retry(
    tmp_path: Path, broker_factory: Callable[..., Broker], client_factory: Callable[..., MqttClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A wrong password was refused on every retry with a WARNING, for ever: ~2,880 lines a day at
    the 30 s backoff maximum. The first refusal warns; the repeats are sparse, and retrying goes on."""
    retries = 8
    accounts = tmp_path / "mosquitto.passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(accounts), "voiced", "right"], check=True)
    accounts.chmod(0o600)
    broker = broker_factory(start=False)
    broker.conf.write_text(broker.conf.read_text().replace("allow_anonymous true", "allow_anonymous false")
                           + f"password_file {accounts}\n")
    broker.start()
    wrong = tmp_path / "client-password"
    wrong.write_text("wrong\n")

    def refusals() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "refused the connection" in r.getMessage()]

    with caplog.at_level(logging.DEBUG, logger="voiced.mqtt.client"):
        client = client_factory(broker, username="voiced", password_file=str(wrong))
        wait_until(lambda: len(refusals()) >= retries, what=f"{retries} refusals")
        warned = [r for r in refusals() if r.levelno == logging.WARNING]
        assert len(warned) == 1 < len(refusals()), [r.getMessage() for r in warned]
        assert "Not authorized" in warned[0].getMessage()
        # The client reads its password once; the broker learning it instead shows the retries go on.
        subprocess.run(["mosquitto_passwd", "-b", str(accounts), "voiced", "wrong"], check=True)
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)  # mosquitto reloads its password file
        assert client.wait_connected(20)


def _tls_broker(tmp_path: Path, broker_factory: Callable[..., Broker]) -> Broker:
    """A mosquitto whose only listener speaks TLS (the server certificate of ``make_certificates``)."""
    make_certificates(tmp_path)
    broker = broker_factory(start=False)
    broker.conf.write_text(broker.conf.read_text() + f"cafile {tmp_path / 'ca.crt'}\n"
                           f"certfile {tmp_path / 'server.crt'}\nkeyfile {tmp_path / 'server.key'}\n")
    broker.start()
    return broker


def _warnings_about(caplog: pytest.LogCaptureFixture, host: str, port: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and f"{host}:{port}" in r.getMessage()]


def test_a_tls_client_on_a_plain_port_is_told_the_handshake_failed_not_that_the_broker_is_unreachable(
    tmp_path: Path, broker: Broker, client_factory: Callable[..., MqttClient], caplog: pytest.LogCaptureFixture,
) -> None:
    """[mqtt] tls on against mosquitto's plain 1883-style listener logged "broker … unreachable": the
    user checked the network, not the setting. The warning names the handshake and the setting,
    once, and retrying goes on (counted) at the debug level."""
    make_certificates(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="voiced.mqtt.client"):
        client = client_factory(broker, ca_file=str(tmp_path / "ca.crt"))
        wait_until(lambda: client.stats()["connect_failures"] >= 3, what="three failed TLS connects")
    warned = _warnings_about(caplog, broker.host, broker.port)
    assert len(warned) == 1, warned
    assert f"TLS handshake with {broker.host}:{broker.port} failed" in warned[0]
    assert "is that port TLS? [mqtt] tls is on" in warned[0] and "unreachable" not in warned[0]
    assert not client.connected


def test_a_plain_client_on_a_tls_only_port_is_told_the_port_may_need_tls(
    tmp_path: Path, broker_factory: Callable[..., Broker], client_factory: Callable[..., MqttClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A TLS listener closes a plain client's connection right after its CONNECT: paho saw a TCP
    connection come and go, logged only at the debug level, and the daemon seemed silent. The
    first such close warns that the port may need TLS; repeats are paced (sparse_level)."""
    broker = _tls_broker(tmp_path, broker_factory)
    closes = 4

    def hinted() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "closed the connection without answering CONNECT" in r.getMessage()]

    with caplog.at_level(logging.DEBUG, logger="voiced.mqtt.client"):
        client = client_factory(broker)
        wait_until(lambda: len(hinted()) >= closes, what=f"{closes} connections closed on CONNECT")
    warned = [r.getMessage() for r in hinted() if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert f"broker {broker.host}:{broker.port}" in warned[0]
    assert "is that port TLS-only? [mqtt] tls is off" in warned[0]
    assert not client.connected
