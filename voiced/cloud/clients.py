"""The cloud client: OpenAI-compatible transcription and chat completions over httpx.

``POST {base}/v1/audio/transcriptions`` uploads the utterance as a 16-bit WAV (built in
memory, so audio never touches the SD card) and returns its text.
``POST {base}/v1/chat/completions`` asks for one JSON object
``{"intent": name|null, "slots": {...}}`` given the known intents and slot values, and
checks the answer against them (:meth:`IntentCatalog.interpret`).

Every failure — network, TLS, timeout, 4xx/5xx, malformed answer — is a
:class:`CloudError`; nothing else escapes. Each call is logged with its status, time and
size, never its content, and counted.
"""

from __future__ import annotations

import json
import logging
import time
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from voiced.audio.wav import encode_wav
from voiced.cloud.access import Access, http_client, status_error, transport_error
from voiced.cloud.catalog import IntentCatalog
from voiced.cloud.config import CloudConfig
from voiced.cloud.deadline import deadline
from voiced.cloud.errors import CloudError, CloudErrorKind
from voiced.intents import Intent
from voiced.stages import Counters

if TYPE_CHECKING:
    import httpx

__all__ = ["CallKind", "CloudClient", "Count", "wav_bytes"]

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 1 << 20
"""Answers larger than this are refused: a transcript or an intent is a few hundred bytes."""

MALFORMED_JSON = (ValueError, RecursionError)
"""What ``json.loads`` raises for text that is no JSON it can hold: nesting deeper than
Python's recursion limit (a few KB of ``[[[[``) is a RecursionError, not a ValueError."""

INTENT_PROMPT = (
    "You map one spoken smart-home command to one of the known intents. The command comes "
    "from speech recognition and may contain recognition errors. Answer with one JSON object "
    'and nothing else: {{"intent": NAME or null, "slots": {{SLOT: VALUE}}, "confidence": 0..1}}. '
    "Use only the intents, slot names and values listed here (for a list, give one of its "
    "values exactly as written; for a number, a number; for free text, the words from the "
    'command). When no intent fits, answer {{"intent": null, "slots": {{}}}}.\n'
    "Language: {language}\nKnown intents (intent → slot → allowed values):\n{intents}"
)


class CallKind(Enum):
    ASR = "asr"
    INTENT = "intent"


class Count(StrEnum):
    """Counter names of the cloud's stats, as ``cloud_{kind}_{name}`` (see :meth:`of`)."""

    CALLS = "calls"
    FAILURES = "failures"
    NO_INTENT = "no_intent"
    SKIPPED = "skipped"
    TIMED_OUT = "timed_out"
    BUSY = "busy"

    def of(self, kind: CallKind) -> str:
        """The counter's name for ``kind``; prefixed so it can share the daemon's Counters."""
        return f"cloud_{kind.value}_{self.value}"


class CloudClient:
    """One connection pool to the service; thread-safe (httpx's pool is)."""

    def __init__(self, config: CloudConfig, access: Access, counters: Counters | None = None) -> None:
        self.config = config
        self._access = access
        self.counters = counters or Counters()
        self._http: httpx.Client | None = None

    @property
    def access(self) -> Access:
        return self._access

    def connect(self) -> httpx.Client:
        """Prepare the connection pool (no network traffic until the first call)."""
        import httpx

        if self._http is None:
            c = self.config
            self._http = http_client(c, self._access, httpx.Timeout(
                c.request_timeout_s, connect=c.connect_timeout_s, pool=c.local_budget_s))
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def transcribe(self, samples: np.ndarray, rate: int = 16_000, language: str | None = None,
                   timeout_s: float | None = None) -> str:
        """The text of mono ``samples`` (float in [-1, 1] or int16) at ``rate``."""
        audio = wav_bytes(samples, rate)
        data = {"model": self.config.asr_model, "response_format": "json"}
        if language:
            data["language"] = language
        answer = self._post(CallKind.ASR, "/v1/audio/transcriptions", timeout_s, len(audio),
                            files={"file": ("utterance.wav", audio, "audio/wav")}, data=data)
        text = answer.get("text") if isinstance(answer, dict) else None
        if not isinstance(text, str):
            self._failed(CallKind.ASR, CloudError(CloudErrorKind.MALFORMED, "the answer has no 'text' string"))
        return text.strip()

    def recognize_intent(self, text: str, catalog: IntentCatalog, timeout_s: float | None = None) -> Intent | None:
        """The intent the model chose among ``catalog``'s for ``text``, or None."""
        if not catalog.intents or not text.strip():
            return None
        prompt = INTENT_PROMPT.format(language=catalog.language or "unknown",
                                      intents=json.dumps(catalog.describe(), ensure_ascii=False))
        body = {
            "model": self.config.intent_model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": prompt}, {"role": "user", "content": text}],
        }
        payload = json.dumps(body, ensure_ascii=False).encode()
        answer = self._post(CallKind.INTENT, "/v1/chat/completions", timeout_s, len(payload),
                            content=payload, headers={"Content-Type": "application/json"})
        try:
            content = answer["choices"][0]["message"]["content"]
            if not isinstance(content, str):
                raise TypeError("content is not text")
            intent = catalog.interpret(json.loads(_strip_fence(content)), text)
        except CloudError as exc:
            self._failed(CallKind.INTENT, exc)
        except (KeyError, IndexError, TypeError, *MALFORMED_JSON):
            self._failed(CallKind.INTENT, CloudError(CloudErrorKind.MALFORMED,
                                                     "the completion holds no JSON object as promised"))
        if intent is None:
            self.counters.add(Count.NO_INTENT.of(CallKind.INTENT))
        return intent

    # -- internals -----------------------------------------------------------------------------

    def _post(self, kind: CallKind, path: str, timeout_s: float | None, sent: int, **request: Any) -> Any:
        """POST and parse the JSON answer; counts and logs the call, raises CloudError."""
        import httpx

        http = self.connect()
        self.counters.add(Count.CALLS.of(kind))
        c = self.config
        t = c.local_budget_s if timeout_s is None else max(0.001, timeout_s)
        limit = min(c.request_timeout_s, t)
        timeout = httpx.Timeout(limit, connect=min(c.connect_timeout_s, t), pool=t)
        start = time.monotonic()
        try:
            # httpx's timeouts restart with each read: the deadline bounds the whole call, so a
            # server trickling its answer cannot hold this worker (see voiced.cloud.deadline).
            with deadline(start + limit), http.stream("POST", c.root + path, timeout=timeout, **request) as response:
                status = response.status_code
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise CloudError(CloudErrorKind.MALFORMED, f"answer larger than {MAX_ANSWER_BYTES} bytes")
        except CloudError as exc:
            self._failed(kind, exc, start)
        except Exception as exc:  # noqa: BLE001 - every transport failure becomes a CloudError
            self._failed(kind, transport_error(exc), start)
        error = status_error(status)
        if error is not None:
            self._failed(kind, error, start)
        try:
            answer = json.loads(bytes(body))
        except MALFORMED_JSON:
            self._failed(kind, CloudError(CloudErrorKind.MALFORMED, f"HTTP {status} answer is not JSON", status), start)
        log.info("cloud %s: HTTP %d in %.0f ms (%d bytes sent, %d received)",
                 kind.value, status, (time.monotonic() - start) * 1000, sent, len(body))
        return answer

    def _failed(self, kind: CallKind, error: CloudError, start: float | None = None) -> NoReturn:
        """Count, log (without content) and raise ``error``."""
        self.counters.add(Count.FAILURES.of(kind))
        self.counters.add(f"cloud_{kind.value}_error_{error.kind.value}")
        took = f" after {(time.monotonic() - start) * 1000:.0f} ms" if start is not None else ""
        log.warning("cloud %s failed%s: %s", kind.value, took, error)
        raise error


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """A 16-bit mono WAV file of ``samples``, in memory."""
    data = np.asarray(samples)
    if data.ndim == 2 and data.shape[1] == 1:
        data = data[:, 0]
    if data.ndim != 1 or data.size == 0:
        raise CloudError(CloudErrorKind.CLIENT_ERROR, f"need non-empty mono samples, got shape {data.shape}")
    return encode_wav(data, rate)


def _strip_fence(content: str) -> str:
    """Some models wrap JSON in a Markdown code fence despite ``response_format``."""
    text = content.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text.strip()
