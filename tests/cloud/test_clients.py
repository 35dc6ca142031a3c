"""The cloud client against the fake service: right requests, typed errors, no content in logs."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from voiced.cloud import CloudClient, CloudError, CloudErrorKind, IntentCatalog
from voiced.cloud.access import CloudAccess
from voiced.intents import IntentSource

from .conftest import DEEP, SHORT, BlackHole, FakeCloud, Mode, cloud_config

SECRET = "please open the secret garage door"


def client(url: str, **overrides: object) -> CloudClient:
    config = cloud_config(url, **overrides)
    c = CloudClient(config, CloudAccess(config).get())
    c.connect()
    return c


def speech(seconds: float = 0.5) -> np.ndarray:
    t = np.arange(int(16_000 * seconds)) / 16_000
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def test_transcription_uploads_a_wav(fake: FakeCloud) -> None:
    c = client(fake.url)
    assert c.transcribe(speech(0.5), 16_000, language="en") == "turn on the kitchen light"
    seen = fake.posts()[0]
    assert seen.path == "/v1/audio/transcriptions"
    assert seen.wav == (16_000, 1, 8000)
    assert seen.fields["model"] == "whisper-1" and seen.fields["language"] == "en"
    assert c.counters.get("cloud_asr_calls") == 1
    c.close()


def test_chat_completion_gives_a_cloud_intent(fake: FakeCloud, catalog: IntentCatalog) -> None:
    c = client(fake.url)
    intent = c.recognize_intent("could you put the kitchen light on", catalog)
    assert intent is not None and intent.source is IntentSource.CLOUD
    assert intent.name == "HassTurnOn" and intent.slot_values == {"name": "kitchen light"}
    body = fake.posts()[0].body
    assert body["model"] == "gpt-4o-mini" and body["response_format"] == {"type": "json_object"}
    assert "HassLightSet" in body["messages"][0]["content"] and "living_room" in body["messages"][0]["content"]
    assert body["messages"][1]["content"] == "could you put the kitchen light on"


def test_fenced_json_is_accepted_and_unknown_intent_is_none(fake: FakeCloud, catalog: IntentCatalog) -> None:
    c = client(fake.url)
    fake.chat_content = '```json\n{"intent": "HassTurnOff", "slots": {"name": "fan"}}\n```'
    assert c.recognize_intent("fan off", catalog).name == "HassTurnOff"  # type: ignore[union-attr]
    fake.chat_content = '{"intent": "HassSelfDestruct", "slots": {}}'
    assert c.recognize_intent("boom", catalog) is None
    assert c.counters.get("cloud_intent_no_intent") == 1


@pytest.mark.parametrize(("mode", "content", "kind"), [
    (Mode.MALFORMED, None, CloudErrorKind.MALFORMED),  # the body is not JSON
    (Mode.OK, "sure! turning it on", CloudErrorKind.MALFORMED),  # the content is not JSON
    (Mode.OK, '{"intent": 42}', CloudErrorKind.MALFORMED),
    (Mode.SERVER_ERROR, None, CloudErrorKind.SERVER_ERROR),
    (Mode.SLOW_CALLS, None, CloudErrorKind.TIMEOUT),
    # Each byte well within the read timeout: only the call's whole deadline ends these.
    (Mode.TRICKLE, None, CloudErrorKind.TIMEOUT),
    (Mode.TRICKLE_HEADERS, None, CloudErrorKind.TIMEOUT),
    # Too deep for json.loads (RecursionError): the body, and the JSON inside the completion.
    (Mode.DEEP_JSON, None, CloudErrorKind.MALFORMED),
    (Mode.OK, DEEP, CloudErrorKind.MALFORMED),
])
def test_failures_are_typed(fake: FakeCloud, catalog: IntentCatalog, mode: Mode, content: str | None,
                            kind: CloudErrorKind) -> None:
    fake.mode = mode
    if content is not None:
        fake.chat_content = content
    c = client(fake.url, request_timeout_s=SHORT)
    with pytest.raises(CloudError) as err:
        c.recognize_intent("turn on the light", catalog)
    assert err.value.kind is kind
    assert c.counters.get("cloud_intent_failures") == 1
    assert c.counters.get(f"cloud_intent_error_{kind.value}") == 1
    if content is None:  # the mode spoils every POST, transcriptions too
        with pytest.raises(CloudError) as err:
            c.transcribe(speech(), 16_000)
        assert err.value.kind is kind and c.counters.get("cloud_asr_failures") == 1
        assert c.counters.get(f"cloud_asr_error_{kind.value}") == 1
    if mode is Mode.SLOW_CALLS:
        assert not fake.answered_late.is_set()


def test_unreachable_servers_are_typed(closed_url: str, black_hole: BlackHole, catalog: IntentCatalog) -> None:
    with pytest.raises(CloudError) as err:
        client(closed_url).recognize_intent("turn on the light", catalog)
    assert err.value.kind is CloudErrorKind.REFUSED
    with pytest.raises(CloudError) as err:
        client(black_hole.url).transcribe(speech(), 16_000, timeout_s=0.3)
    assert err.value.kind is CloudErrorKind.TIMEOUT and black_hole.still_holding


def test_calls_are_logged_without_content(fake: FakeCloud, catalog: IntentCatalog,
                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="voiced")
    fake.transcript = SECRET
    fake.chat_content = '{"intent": "HassTurnOn", "slots": {"name": "secret garage door"}}'
    c = client(fake.url)
    c.transcribe(speech(), 16_000)
    c.recognize_intent(SECRET, catalog)
    fake.mode = Mode.MALFORMED
    with pytest.raises(CloudError):
        c.recognize_intent(SECRET, catalog)
    messages = [r.getMessage() for r in caplog.records]
    assert any("cloud asr: HTTP 200" in m for m in messages)
    assert any("cloud intent failed" in m for m in messages)
    assert not any("secret" in m for m in messages)


def test_empty_audio_is_refused_without_a_request(fake: FakeCloud) -> None:
    with pytest.raises(CloudError):
        client(fake.url).transcribe(np.zeros(0, np.float32), 16_000)
    assert fake.posts() == []
