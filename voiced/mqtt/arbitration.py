"""Wake word arbitration over MQTT: claims on ``voiced/arbitration/<group>/claim``, stand-downs on
``voiced/arbitration/<group>/standDown``.

Claims go out live (QoS 0, not through the outbox: a claim is worth nothing a second later);
with the broker away a site answers its own wake words at once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from voiced.mqtt.client import MqttClient
from voiced.mqtt.hermes import MalformedMessage
from voiced.stages import Counters
from voiced.wake.arbitration import Claim, winner

__all__ = ["MqttArbiter", "claim_topic", "stand_down_topic"]

log = logging.getLogger(__name__)

KEEP_S = 10.0
"""Claims older than this are forgotten."""
MAX_CLAIMS = 1000
"""At most this many claims are kept (the oldest go first): a few sites hear a wake word a few
times in ``KEEP_S``; a chatty or broken peer must not grow the list without bound."""


def claim_topic(group: str) -> str:
    return f"voiced/arbitration/{group}/claim"


def stand_down_topic(group: str) -> str:
    return f"voiced/arbitration/{group}/standDown"


def parse_claim(payload: bytes) -> Claim:
    try:
        data = json.loads(payload)
        claim = Claim(site_id=data["siteId"], wake_word=data["wakewordId"], score=float(data["score"]),
                      snr_db=float(data["snrDb"]), session_id=str(data.get("sessionId", "")))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MalformedMessage(f"arbitration claim: {exc}") from exc
    except RecursionError:
        raise MalformedMessage("arbitration claim: nested too deeply") from None
    if not isinstance(claim.site_id, str) or not isinstance(claim.wake_word, str):
        raise MalformedMessage("arbitration claim: siteId and wakewordId must be strings")
    return claim


class MqttArbiter:
    """One site's side of the arbitration; ``contest`` is called on the listen thread."""

    def __init__(self, client: MqttClient, site_id: str, group: str, window_s: float, counters: Counters) -> None:
        self.client = client
        self.site_id = site_id
        self.group = group
        self.window_s = window_s
        self.counters = counters
        self._lock = threading.Lock()
        self._seen: deque[tuple[float, Claim]] = deque(maxlen=MAX_CLAIMS)
        """(monotonic time received, claim) of other sites, oldest first."""
        client.subscribe(claim_topic(group), self._on_claim)

    def _on_claim(self, topic: str, payload: bytes) -> None:
        claim = parse_claim(payload)
        if claim.site_id == self.site_id:
            return
        with self._lock:
            # Claims arrive in time order: the aged ones are at the left, so each claim costs
            # O(1) amortized on paho's network thread instead of rebuilding the list.
            now = time.monotonic()
            while self._seen and now - self._seen[0][0] >= KEEP_S:
                self._seen.popleft()
            self._seen.append((now, claim))

    def contest(self, claim: Claim, decided: Callable[[bool], None]) -> None:
        body = json.dumps({"siteId": claim.site_id, "wakewordId": claim.wake_word, "score": round(claim.score, 4),
                           "snrDb": claim.snr_db, "sessionId": claim.session_id})
        started = time.monotonic()
        if not self.client.publish_live(claim_topic(self.group), body):
            self.counters.add("wake_arbitration_local")  # nobody to ask: answer here
            decided(True)
            return
        timer = threading.Timer(self.window_s, self._decide, args=(claim, started, decided))
        timer.daemon = True
        timer.start()

    def _decide(self, own: Claim, started: float, decided: Callable[[bool], None]) -> None:
        with self._lock:
            rivals = [c for t, c in self._seen if c.wake_word == own.wake_word and t >= started - self.window_s]
        best = winner([own, *rivals])
        won = best.site_id == own.site_id
        if not won:
            log.info("wake word %s: %s heard it better (SNR %.1f dB vs %.1f dB); standing down",
                     own.wake_word, best.site_id, best.snr_db, own.snr_db)
            self.client.publish(stand_down_topic(self.group), json.dumps({
                "siteId": self.site_id, "wakewordId": own.wake_word, "sessionId": own.session_id,
                "winner": best.site_id, "snrDb": own.snr_db, "winnerSnrDb": best.snr_db}))
        decided(won)
