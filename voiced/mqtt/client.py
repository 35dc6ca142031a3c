"""The broker client: paho-mqtt 2.x behind connect / publish / subscribe / close.

Start-up never waits for the broker: ``connect()`` returns at once and paho's network
thread keeps trying. Reconnect delays come from the shared :class:`Backoff`: before each
wait, paho's ``reconnect_delay_set`` is set to the next delay of our Backoff, so paho's
loop only carries out the wait our policy chose (jitter included), and the Backoff is
reset on every accepted connection.

Every ``publish`` goes through the durable :class:`Outbox`. One thread, ``mqtt-outbox``,
hands stored messages to paho in outbox order, at most ``max_inflight`` unacknowledged at
a time; a message leaves the outbox only on its PUBACK. The outbox is the only copy that
counts: on every (re)connection paho's unacknowledged messages are dropped and sending
starts again from the oldest message in the outbox, so the backlog goes out in order,
before newer messages, and paho never holds more than the window in memory. A message
is sent once per connection; it comes twice only when a connection ends between the
broker forwarding it and its PUBACK reaching us (QoS 1 is at least once).

The availability topic gets ``online`` on every connection and ``offline`` as last will
and on close; both bypass the outbox so a stale ``offline`` can never follow ``online``.
State that is published again on every connection (Home Assistant's discovery configs, by a
connect listener) bypasses it too: listeners run before the backlog is sent, so Home
Assistant knows an entity before the first event for it arrives.
"""

from __future__ import annotations

import logging
import ssl
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from voiced.errors import VoicedError
from voiced.mqtt.config import MqttConfig
from voiced.mqtt.hermes import MalformedMessage
from voiced.mqtt.outbox import SPILLED, Outbox, OutboxMessage
from voiced.runtime.backoff import Backoff
from voiced.runtime.lograte import sparse_level

__all__ = ["Handler", "MqttClient"]

log = logging.getLogger(__name__)

Handler = Callable[[str, bytes], None]
"""Called on paho's thread with (topic, payload) for each message matching its filter.
Raise MalformedMessage for a payload that is not valid; any exception is logged and counted."""

QOS = 1
"""Every message, both ways: at least once, and the broker's PUBACK ends our responsibility."""
BRIEF_S = 5.0
"""A connection the broker ends sooner than this after accepting it counts as brief."""
BRIEF_IN_A_ROW = 3
"""This many brief connections in a row: most likely another client holds the same client id."""
_CUT_IN_HANDSHAKE = (ssl.SSLError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)
"""Failures of a TLS connect once TCP is up: the peer spoke no TLS, or closed on our ClientHello."""


@dataclass(frozen=True)
class _Subscription:
    topic_filter: str
    handler: Handler
    max_payload_bytes: int | None
    """None: the config's ``max_payload_bytes``."""
    on_oversized: Callable[[str, int], None] | None


class MqttClient:
    """One broker connection with a durable outbox; thread-safe. Owns ``outbox`` (closes it)."""

    def __init__(self, config: MqttConfig, outbox: Outbox) -> None:
        self.config = config
        self._outbox = outbox
        self._backoff = Backoff(config.backoff)
        self._paho = self._make_paho(config)

        self._cond = threading.Condition()
        self._started = False
        self._stopping = False
        self._closed = False
        self._connected = False
        self._attempted = False
        """The first connection attempt has ended, accepted, refused or failed."""
        self._ready = False
        """May hand outbox messages to paho: connected and set up."""
        self._generation = 0
        """Counts connections: a message handed for an older one is not recorded as in flight."""
        self._send_lock = threading.Lock()
        """Serializes handing a message to paho with resetting for a new connection."""
        self._kick = True
        """The outbox may hold messages not yet handed (new appends, freed window, reconnect)."""
        self._inflight: dict[int, int] = {}
        """paho message id → outbox id, for messages handed and not yet acknowledged."""
        self._early_acks: set[int] = set()
        """paho message ids acknowledged before their sender recorded them; at most the one being
        recorded now is of use (senders hand under ``_send_lock``), so each record clears the rest."""
        self._direct: dict[int, bool] = {}
        """paho message id → counted as published, for messages sent past the outbox (the birth
        message and ``publish_live``: not counted; ``publish_state``: counted) and not yet acknowledged."""
        self._last_handed = 0
        self._connected_at = 0.0
        self._brief = 0
        """Connections in a row the broker ended within ``BRIEF_S``."""
        self._refusals = 0
        """Refusals in a row with ``_refused_reason`` (bad credentials…), for the log's pace."""
        self._refused_reason = ""
        self._answered = False
        """The broker answered this connection's CONNECT (accepted or refused)."""
        self._unanswered = 0
        """Connections in a row the broker closed before answering CONNECT, for the log's pace."""
        self._handlers: list[_Subscription] = []
        self._listeners: list[Callable[[], None]] = []
        self._counts = dict.fromkeys(
            (
                "published", "received", "malformed", "handler_errors", "dropped_oversized",
                "connects", "reconnects", "connect_failures",
            ),
            0,
        )
        self._malformed_by_filter: Counter[str] = Counter()
        """Malformed messages per subscription (bounded: one key per ``subscribe``), for the log's pace."""
        self._sender = threading.Thread(target=self._send_loop, name="mqtt-outbox", daemon=True)

    def _make_paho(self, config: MqttConfig) -> mqtt.Client:
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=config.resolved_client_id, clean_session=True)
        if config.username is not None:
            client.username_pw_set(config.username, config.read_password())
        if config.uses_tls:
            client.tls_set_context(config.tls_context())
        client.will_set(config.availability_topic, b"offline", qos=QOS, retain=True)
        client.max_inflight_messages_set(0)  # unlimited in paho: our window bounds it, and paho never queues
        client.reconnect_delay_set(config.backoff.initial, config.backoff.maximum)  # type: ignore[arg-type]
        client.suppress_exceptions = True
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        client.on_message = self._on_message
        return client

    # ------------------------------------------------------------------ public API

    def connect(self) -> None:
        """Start connecting in the background; returns at once, whether the broker is up or not."""
        with self._cond:
            if self._started or self._closed:
                return
            self._started = True
        log.info("connecting to mqtt%s://%s:%d as %s", "s" if self.config.uses_tls else "",
                 self.config.host, self.config.port, self.config.resolved_client_id)
        self._sender.start()
        self._paho.connect_async(self.config.host, self.config.port, self.config.keepalive)
        self._paho.loop_start()

    @property
    def connected(self) -> bool:
        with self._cond:
            return self._connected

    def wait_connected(self, timeout: float) -> bool:
        """Wait until the broker accepted us; False after ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self._connected, timeout)

    def wait_first_attempt(self, timeout: float) -> bool:
        """Wait until the first connection attempt has ended either way; True if it got us connected.

        A refused or unreachable broker ends it at once, so start-up (READY) waits only for a
        broker that answers slowly, never for one that is down.
        """
        with self._cond:
            self._cond.wait_for(lambda: self._attempted or self._connected, timeout)
            return self._connected

    def _attempt_ended(self) -> None:
        with self._cond:
            self._attempted = True
            self._cond.notify_all()

    def publish(self, topic: str, payload: bytes | str, retain: bool = False) -> bool:
        """Store the message in the outbox for delivery (QoS 1); False if it was dropped.

        Dropped: a payload over ``max_payload_bytes``, or one the outbox cannot hold.
        """
        data = _topic_and_data(topic, payload)
        if len(data) > self.config.max_payload_bytes:
            with self._cond:
                self._counts["dropped_oversized"] += 1
            log.warning("dropped a %d-byte message on %s: over max_payload_bytes %d",
                        len(data), topic, self.config.max_payload_bytes)
            return False
        try:
            message_id = None if self._closed else self._outbox.append(topic, data, QOS, retain)
        except VoicedError:  # closed meanwhile, by another thread
            log.warning("message on %s published after close: not stored", topic)
            return False
        if message_id is None:
            return False
        log.debug("stored %s (%d bytes) as outbox message %s", topic, len(data),
                  "held in memory" if message_id == SPILLED else message_id)
        with self._cond:
            self._kick = True
            self._cond.notify_all()
        return True

    def publish_state(self, topic: str, payload: bytes | str) -> bool:
        """Retained, QoS 1, straight to paho and never stored: for state a connect listener
        publishes again on every connection (discovery configs). False when not connected now:
        the next connection's listener sends the state then, so nothing piles up offline."""
        data = _topic_and_data(topic, payload)
        with self._send_lock:
            with self._cond:
                if not self._connected or self._stopping:
                    return False
            info = self._paho.publish(topic, data, qos=QOS, retain=True)
            if info.rc != mqtt.MQTT_ERR_SUCCESS:
                return False
            with self._cond:
                if self._early_ack(info.mid):
                    self._counts["published"] += 1
                else:
                    self._direct[info.mid] = True
        return True

    def publish_live(self, topic: str, payload: bytes | str) -> bool:
        """QoS 0, never stored: for messages worth nothing later (arbitration claims). False when
        the broker is not connected now; the caller then acts alone."""
        data = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        with self._send_lock:
            with self._cond:
                if not self._connected or self._closed:
                    return False
            info = self._paho.publish(topic, data, qos=0)
            # paho calls on_publish for QoS 0 too: recorded, its mid is never taken for an early
            # ack of an outbox message that gets the same mid after paho's counter wraps.
            with self._cond:
                if not self._early_ack(info.mid):
                    self._direct[info.mid] = False
        return info.rc == mqtt.MQTT_ERR_SUCCESS

    def subscribe(self, topic_filter: str, handler: Handler, max_payload_bytes: int | None = None,
                  on_oversized: Callable[[str, int], None] | None = None) -> None:
        """Call ``handler`` for every message matching ``topic_filter``, now and after reconnects.

        A payload over ``max_payload_bytes`` (default: the config's) is dropped, logged and counted;
        ``on_oversized(topic, size)`` may still answer its sender (e.g. from an id in the topic).
        """
        if not _is_filter(topic_filter):
            raise ValueError(f"{topic_filter!r} is not a topic filter")
        with self._cond:
            self._handlers.append(_Subscription(topic_filter, handler, max_payload_bytes, on_oversized))
            subscribe_now = self._connected
        if subscribe_now:
            self._paho.subscribe(topic_filter, qos=QOS)

    def add_connect_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after each accepted connection (e.g. HA discovery), on paho's
        thread, before the outbox's backlog is sent; if connected already, also once now, so
        no connection is missed."""
        with self._cond:
            self._listeners.append(listener)
            connected = self._connected
        if connected:
            listener()

    def stats(self) -> dict[str, int | bool]:
        """Counters since start: published (acknowledged: outbox and ``publish_state``
        messages), queued (in the outbox), inflight (both kinds sent, not yet acknowledged),
        dropped_* (oversized and the outbox bounds), received, malformed, handler_errors,
        connects, reconnects, connect_failures, and connected."""
        outbox = self._outbox.stats()
        with self._cond:
            out: dict[str, int | bool] = dict(self._counts)
            out["inflight"] = len(self._inflight) + sum(self._direct.values())
            out["connected"] = self._connected
        out.update({k: v for k, v in outbox.items() if k != "queued_bytes"})
        return out

    def close(self, drain_timeout: float = 5.0) -> None:
        """Deliver what the outbox holds (while connected, up to ``drain_timeout`` s), publish
        ``offline``, disconnect and close the outbox. Undelivered messages stay for the next start."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            started = self._started
        if started:
            deadline = time.monotonic() + drain_timeout
            with self._cond:
                self._cond.wait_for(lambda: not self._connected or len(self._outbox) == 0,
                                    max(0.0, deadline - time.monotonic()))
                self._stopping = True
                connected = self._connected
                self._cond.notify_all()
            if connected:
                info = self._paho.publish(self.config.availability_topic, b"offline", qos=QOS, retain=True)
                try:
                    info.wait_for_publish(max(0.5, min(2.0, deadline - time.monotonic())))
                except (ValueError, RuntimeError):
                    pass  # the connection went meanwhile: the last will says offline instead
            self._paho.disconnect()
            self._paho.loop_stop()
            self._sender.join()
        left = len(self._outbox)
        self._outbox.close()
        log.info("mqtt closed; %d messages left in the outbox for the next start", left)

    # ------------------------------------------------------------------ sending

    def _send_loop(self) -> None:
        window = self.config.max_inflight
        while True:
            held = self._outbox.held_in_memory  # a full disk: look again each second for space
            with self._cond:
                woke = self._cond.wait_for(
                    lambda: self._stopping or (self._ready and self._kick and len(self._inflight) < window),
                    timeout=1.0 if held else None,
                )
                if self._stopping:
                    return
                if not woke and not (self._ready and len(self._inflight) < window):
                    continue
                self._kick = False
                budget = window - len(self._inflight)
                after = self._last_handed
                generation = self._generation
            try:
                messages = self._outbox.peek(after, budget)
            except Exception:  # a broken database must not end the thread silently
                log.exception("reading the outbox failed")
                with self._cond:
                    self._cond.wait(1.0)
                    self._kick = True
                continue
            for m in messages:
                if not self._hand(m, generation):
                    break
            else:
                if len(messages) == budget:
                    with self._cond:
                        self._kick = True  # a full batch: there may be more

    def _hand(self, m: OutboxMessage, generation: int) -> bool:
        """Give one message to paho; False when the connection changed meanwhile."""
        with self._send_lock:
            with self._cond:
                if self._stopping or not self._ready or self._generation != generation:
                    self._kick = True
                    return False
            try:
                info = self._paho.publish(m.topic, m.payload, qos=m.qos, retain=m.retain)
            except ValueError as exc:  # e.g. a row from an older version paho refuses: never sendable
                log.error("dropping outbox message %d on %r: %s", m.id, m.topic, exc)
                with self._cond:
                    self._last_handed = m.id
                self._outbox.ack(m.id)
                return True
            with self._cond:
                self._last_handed = m.id
                acked = self._early_ack(info.mid)
                if not acked:
                    self._inflight[info.mid] = m.id
        if acked:
            self._acknowledged(m.id)
        return True

    def _early_ack(self, mid: int) -> bool:
        """Whether paho's ``mid`` was acknowledged before its sender recorded it (then forgotten:
        the sender counts it now). Call holding ``_cond`` and ``_send_lock``."""
        early = mid in self._early_acks
        # Only the mid being recorded can have come early: any other is stray and would
        # match a later message that reuses its mid, so none is kept past this record.
        self._early_acks.clear()
        return early

    def _acknowledged(self, outbox_id: int) -> None:
        self._outbox.ack(outbox_id)
        with self._cond:
            self._counts["published"] += 1
            self._kick = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ paho callbacks (paho's thread)

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._answered = True
        self._unanswered = 0
        if reason.is_failure:
            # Bad credentials are refused on every retry, for ever: warn on the first refusal and on
            # a new reason, the repeats sparsely (one line per 30 s backoff was ~2,880 a day).
            refused = str(reason)
            self._refusals = self._refusals + 1 if refused == self._refused_reason else 1
            self._refused_reason = refused
            log.log(sparse_level(self._refusals), "broker %s:%d refused the connection: %s (%d in a row)",
                    self.config.host, self.config.port, reason, self._refusals)
            self._attempt_ended()
            return
        self._refusals = 0
        self._refused_reason = ""
        if self._brief < BRIEF_IN_A_ROW:  # flapping with a twin client: the backoff goes on growing
            self._backoff.reset()
        with self._send_lock:
            # Paho would retransmit what it holds right after this callback; the outbox has all
            # of it, in order, so paho forgets it and sending restarts from the oldest message.
            client.drop_out_messages()
            birth = client.publish(self.config.availability_topic, b"online", qos=QOS, retain=True)
            with self._cond:
                self._inflight.clear()
                self._early_acks.clear()
                self._direct = {birth.mid: False}
                self._last_handed = 0
                self._generation += 1
                self._connected = True
                self._connected_at = time.monotonic()
                self._counts["connects"] += 1
                if self._counts["connects"] > 1:
                    self._counts["reconnects"] += 1
                filters = list(dict.fromkeys(sub.topic_filter for sub in self._handlers))
                listeners = list(self._listeners)
            # Subscriptions go out before any outbox message, so we hear our own messages too.
            for topic_filter in filters:
                client.subscribe(topic_filter, qos=QOS)
        log.info("connected to %s:%d (%d messages in the outbox)", self.config.host, self.config.port, len(self._outbox))
        # Not yet ready: the listeners' state goes out before the backlog.
        for listener in listeners:
            try:
                listener()
            except Exception:
                log.exception("connect listener %r failed", listener)
        with self._cond:
            self._ready = self._kick = True
            self._cond.notify_all()

    def _on_connect_fail(self, client: mqtt.Client, userdata: Any) -> None:
        self._attempt_ended()
        self._count("connect_failures")
        delay = self._next_delay()
        # paho calls this inside its ``except OSError`` around the connect: the exception at hand says why.
        log.log(logging.WARNING if self._backoff.failures == 1 else logging.DEBUG, "%s; retrying in %.2f s",
                self._connect_failure(sys.exception()), delay)

    def _connect_failure(self, exc: BaseException | None) -> str:
        """Why a connect failed, for the log: a TLS mismatch must not read as a network fault."""
        where = f"{self.config.host}:{self.config.port}"
        if not self.config.uses_tls or not isinstance(exc, _CUT_IN_HANDSHAKE):
            return f"broker {where} unreachable" + (f" ({exc.strerror or exc})" if isinstance(exc, OSError) else "")
        if isinstance(exc, ssl.SSLCertVerificationError):
            return (f"TLS handshake with {where} failed ({exc.verify_message}): the broker's certificate is not "
                    "trusted; check [mqtt] ca_file and that mqtt.host is the name it was issued for")
        why = getattr(exc, "reason", None) or exc.strerror or exc  # SSLError's reason is short (WRONG_VERSION_NUMBER)
        return f"TLS handshake with {where} failed ({why}): is that port TLS? [mqtt] tls is on"

    def _on_disconnect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        with self._cond:
            was_connected = self._connected
            self._connected = False
            self._ready = False
            stopping = self._stopping
            self._cond.notify_all()
        if stopping:
            return
        answered, self._answered = self._answered, False
        if not was_connected and not answered:
            self._unanswered += 1
        if was_connected:
            brief = time.monotonic() - self._connected_at < BRIEF_S
            self._brief = self._brief + 1 if brief else 0
            if not brief:
                self._backoff.reset()  # it worked a while: come back soon
        delay = self._next_delay()
        # A broker drops the older of two clients with one id: both then reconnect, for ever. Each
        # drop was a warning twice a second; now the delay grows and the warnings are paced.
        flapping = self._brief >= BRIEF_IN_A_ROW
        log.log(logging.WARNING if was_connected and not flapping else logging.DEBUG,
                "disconnected from %s:%d (%s); retrying in %.2f s", self.config.host, self.config.port, reason, delay)
        if not was_connected and not answered:
            # TCP got through but the broker closed it on our CONNECT: what a TLS listener does with
            # plain MQTT (and a plain one with TLS); the network is fine, so the warning says so.
            hint = ("is that port TLS-only? [mqtt] tls is off (8883 is usual for TLS)" if not self.config.uses_tls
                    else "is that port TLS? [mqtt] tls is on")
            log.log(sparse_level(self._unanswered), "broker %s:%d closed the connection without answering CONNECT "
                    "(%s; %d in a row): %s", self.config.host, self.config.port, reason, self._unanswered, hint)
        if was_connected and flapping:
            log.log(sparse_level(self._brief - BRIEF_IN_A_ROW + 1, every=20),
                    "the broker ended %d connections in a row within %.0f s of accepting them: is another "
                    "client using client id %r (devices cloned from one image share a host name)? "
                    "Set [mqtt] client_id (retrying in %.1f s)", self._brief, BRIEF_S, self.config.resolved_client_id,
                    delay)

    def _next_delay(self) -> float:
        # Called before each of paho's reconnect waits: the wait is then exactly our delay.
        delay = self._backoff.next_delay()
        self._paho.reconnect_delay_set(delay, delay)  # type: ignore[arg-type]
        return delay

    def _on_publish(self, client: mqtt.Client, userdata: Any, mid: int, reason: Any, properties: Any) -> None:
        with self._cond:
            outbox_id = self._inflight.pop(mid, None)
            if outbox_id is None:
                if mid in self._direct:
                    if self._direct.pop(mid):
                        self._counts["published"] += 1
                else:
                    self._early_acks.add(mid)  # acknowledged before the sender recorded it
                return
        if reason.is_failure:
            log.warning("broker rejected outbox message %d: %s", outbox_id, reason)
        self._acknowledged(outbox_id)

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        try:
            self._dispatch(message.topic, bytes(message.payload))
        except Exception:  # nothing may escape into paho's loop
            log.exception("handling a message failed")

    def _dispatch(self, topic: str, payload: bytes) -> None:
        with self._cond:
            self._counts["received"] += 1
            subs = [sub for sub in self._handlers if mqtt.topic_matches_sub(sub.topic_filter, topic)]
        for sub in subs:
            topic_filter, handler = sub.topic_filter, sub.handler
            try:
                limit = sub.max_payload_bytes or self.config.max_payload_bytes
                if len(payload) > limit:
                    n = self._count("dropped_oversized")
                    log.log(sparse_level(n, first=10), "dropped a %d-byte message on %s: over its %d-byte limit "
                            "(%d so far)", len(payload), topic, limit, n)
                    if sub.on_oversized is not None:
                        sub.on_oversized(topic, len(payload))
                    continue
                handler(topic, payload)
            except MalformedMessage as exc:
                n = self._count("malformed")
                # sparse per subscription: ten bad messages on one topic must not hide the first on another
                with self._cond:
                    self._malformed_by_filter[topic_filter] += 1
                    seen = self._malformed_by_filter[topic_filter]
                log.log(sparse_level(seen, first=10), "malformed message on %s: %s (%d so far, %d in all)", topic, exc,
                        seen, n)
            except Exception:
                n = self._count("handler_errors")
                log.exception("handler %r failed on %s (%d so far)", handler, topic, n)

    def _count(self, key: str) -> int:
        with self._cond:
            self._counts[key] += 1
            return self._counts[key]


def _is_filter(topic_filter: str) -> bool:
    levels = topic_filter.split("/")
    return bool(topic_filter) and "\0" not in topic_filter and all(
        ("+" not in level or level == "+") and ("#" not in level or (level == "#" and i == len(levels) - 1))
        for i, level in enumerate(levels)
    )


def _topic_and_data(topic: str, payload: bytes | str) -> bytes:
    if not topic or set("+#\0") & set(topic):
        raise ValueError(f"cannot publish to {topic!r}: not a topic name")
    return payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
