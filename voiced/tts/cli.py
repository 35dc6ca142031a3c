"""``voiced say``: speak text through ALSA, or write it to a WAV file, with timing figures.

Hooked into ``voiced`` by ``add_say_parser(subparsers)``; runs on its own too:
``python -m voiced.tts.cli say --voice en_US-lessac-medium.onnx --output hi.wav "Hello."``.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from voiced.errors import AudioError, ConfigError, VoicedError

__all__ = ["DEFAULT_VOICE", "add_say_parser", "cmd_say", "main"]

log = logging.getLogger(__name__)

DEFAULT_VOICE = "piper-en_US-lessac-medium"
"""The model-store voice ``say`` uses without ``--voice`` (``voiced models pull`` installs it)."""

EXIT_OK, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 130


def add_say_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``say`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``); returns its parser."""
    p = subparsers.add_parser(
        "say", help="speak text with a Piper voice (ALSA or a WAV file)",
        description="Speak TEXT with a Piper voice, sentence by sentence as it is synthesized, through an ALSA"
        " device or into a WAV file. TEXT '-' reads standard input.")
    p.add_argument("--voice", type=Path, metavar="PATH",
                   help="voice.onnx (with voice.onnx.json beside it), or a directory holding one voice or"
                   f" encoder.onnx + decoder.onnx + config.json (default: the installed {DEFAULT_VOICE})")
    p.add_argument("--speaker", metavar="N|NAME", help="speaker id or name of a multi-speaker voice")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--device", default="default", metavar="PCM",
                     help="ALSA playback PCM, e.g. plughw:CARD=Headphones (default: %(default)s)")
    out.add_argument("--output", type=Path, metavar="FILE.wav", help="write a 16-bit WAV instead of playing")
    p.add_argument("--length-scale", type=float, metavar="X", help="slowness: 1 is the voice's pace, 2 half speed")
    p.add_argument("--noise-scale", type=float, metavar="X", help="voice variation (default: the voice's)")
    p.add_argument("--noise-w", type=float, metavar="X", help="duration variation (default: the voice's)")
    p.add_argument("--volume", type=float, default=1.0, metavar="X", help="gain, 0..4: 1 plays the voice as it is, above 1 louder (a loud voice clips)"
                   " (default: %(default)s)")
    p.add_argument("--sentence-silence", type=float, default=0.0, metavar="S",
                   help="seconds of silence between sentences (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="ONNX Runtime threads (default: %(default)s)")
    p.add_argument("--keep-markup", action="store_true",
                   help="read Markdown marks, tags and emoji as espeak-ng names them (default: drop them, keep the"
                   " words they mark, as the daemon's [tts] strip_markup)")
    p.add_argument("--json", action="store_true", help="print timing figures as one JSON object")
    p.add_argument("text", nargs="+", metavar="TEXT")
    p.set_defaults(func=cmd_say)
    return p


def _voice_path(arg: Path | None) -> Path:
    if arg is not None:
        return arg
    try:
        from voiced.models.store import ModelStore
    except ImportError:
        raise ConfigError("--voice", "no voice given") from None
    store = ModelStore()
    path = store.root / DEFAULT_VOICE
    if not path.is_dir():
        raise ConfigError("--voice", f"no voice given and {DEFAULT_VOICE} is not installed in {store.root}"
                          f" (voiced models pull {DEFAULT_VOICE})")
    return path


def cmd_say(args: argparse.Namespace) -> int:
    from voiced.runtime.graph_cache import default_graph_cache
    from voiced.runtime.onnx import SessionOptions
    from voiced.tts.config import SynthesisOptions, VoiceSettings
    from voiced.tts.voice import PiperVoice

    if args.output is not None and (args.output.is_dir() or not args.output.parent.is_dir()):
        # said before the voice loads and the text is spoken, not as a traceback after
        raise AudioError(f"--output {args.output}: " + ("is a directory" if args.output.is_dir()
                                                        else f"no directory {args.output.parent}"))
    text = " ".join(args.text)
    if text.strip() == "-":
        text = sys.stdin.read()
    speaker: int | str | None = args.speaker
    if isinstance(speaker, str) and speaker.isdigit():
        speaker = int(speaker)
    try:
        options = SynthesisOptions(speaker=speaker, length_scale=args.length_scale, noise_scale=args.noise_scale,
                                   noise_w=args.noise_w, volume=args.volume, sentence_silence=args.sentence_silence)
    except ConfigError as exc:  # named as the user wrote it: --length-scale, not length_scale
        raise exc.as_option() from None
    started = time.perf_counter()
    # The voice's optimized graph is kept: the next ``say`` loads it in ~0.16 s instead of ~0.75 s.
    session = SessionOptions(threads=args.threads, graph_cache=default_graph_cache())
    settings = VoiceSettings(session=session, strip_markup=not args.keep_markup)
    voice = PiperVoice.load(_voice_path(args.voice), settings=settings)
    if speaker is not None and voice.config.num_speakers <= 1:  # Piper ignores it too: say so
        log.warning("--speaker %s does nothing: this voice has one speaker", args.speaker)
    figures: dict[str, Any] = {"voice": str(args.voice or DEFAULT_VOICE), "sample_rate": voice.sample_rate,
                               "streaming_decoder": voice.streaming,
                               "load_s": round(time.perf_counter() - started, 4)}
    if args.output is not None:
        code = _to_file(voice, text, options, args.output, figures)
    else:
        code = _to_device(voice, text, options, args.device, figures)
    if args.json:
        print(json.dumps(figures), flush=True)
    return code


def _timed(chunks: Any, started: float, figures: dict[str, Any]) -> Any:
    """Pass chunks through, recording time to the first one, synthesis time, audio length."""
    synth, audio_s, n, sentences = 0.0, 0.0, 0, 0
    while True:
        t = time.perf_counter()
        chunk = next(chunks, None)
        synth += time.perf_counter() - t
        if chunk is None:
            break
        if n == 0:
            figures["first_audio_s"] = round(time.perf_counter() - started, 4)
        n += 1
        sentences += int(chunk.final)
        audio_s += chunk.duration
        figures.update(chunks=n, sentences=sentences, audio_s=round(audio_s, 4), synth_s=round(synth, 4),
                       rtf=round(synth / audio_s, 4) if audio_s else None)
        yield chunk


def _to_file(voice: Any, text: str, options: Any, path: Path, figures: dict[str, Any]) -> int:
    import numpy as np

    from voiced.audio.wav import write_wav

    started = time.perf_counter()
    pieces = [c.samples for c in _timed(voice.synthesize(text, options), started, figures)]
    try:
        write_wav(path, np.concatenate(pieces) if pieces else np.zeros(0, np.int16), voice.sample_rate)
    except OSError as exc:  # read-only, full, no permission
        raise AudioError(f"--output {path}: {exc.strerror or exc}") from None
    figures["output"] = str(path)
    return EXIT_OK


_PLAYER_LOGGERS = ("voiced.tts.device", "voiced.tts.playback")
"""Loggers of the player's thread, whose device errors ``say`` prints itself."""


class _SaidBelow(logging.Filter):
    """Drops the player's log record of its latest device error: the one a failed stream ends with."""

    def __init__(self, player: Any) -> None:
        super().__init__()
        self._stats = player.stats

    def filter(self, record: logging.LogRecord) -> bool:
        # the player sets stats.last_error before logging it
        return record.levelno < logging.WARNING or record.getMessage() != self._stats.last_error


def _to_device(voice: Any, text: str, options: Any, device: str, figures: dict[str, Any]) -> int:
    from voiced.tts.playback import AlsaPlayer
    from voiced.tts.playconfig import PlaybackConfig, PlaybackOutcome

    player = AlsaPlayer(PlaybackConfig(device=device))
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, lambda *_: player.stop())
        signal.signal(signal.SIGTERM, lambda *_: player.stop())
    # The player logs a device it cannot open, and say prints that error as its own last line: it came twice.
    said_below = _SaidBelow(player)
    loggers = [logging.getLogger(name) for name in _PLAYER_LOGGERS]
    for logger in loggers:
        logger.addFilter(said_below)
    started = time.perf_counter()
    try:
        with player:
            stream = player.stream()
            chunks = voice.synthesize(text, options)  # bad text fails here, before the device opens
            for chunk in _timed(chunks, started, figures):
                if not stream.write(chunk):
                    break
            stream.close()
            result = stream.wait()
    finally:
        for logger in loggers:
            logger.removeFilter(said_below)
    assert result is not None  # close() was called: the stream finishes
    figures.update(device=device, outcome=result.outcome.value, played_frames=result.frames,
                   device_rate=result.device_rate, underruns=result.underruns,
                   total_s=round(time.perf_counter() - started, 4))
    if result.outcome is PlaybackOutcome.FAILED:
        print(f"voiced: {result.error}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_INTERRUPTED if result.outcome is PlaybackOutcome.INTERRUPTED else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m voiced.tts.cli say …`` (the same command ``voiced say`` runs)."""
    parser = argparse.ArgumentParser(prog="voiced")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    add_say_parser(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except VoicedError as exc:
        print(f"voiced: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
