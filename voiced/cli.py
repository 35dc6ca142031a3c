"""Command line: ``voiced run | wyoming | transcribe | understand | listen | say | models | doctor | bench``."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from voiced import __version__
from voiced.errors import AudioError, ConfigError, VoicedError

if TYPE_CHECKING:
    from voiced.asr.loader import AsrFamily
    from voiced.config import Config
    from voiced.core.events import ListenMode

__all__ = ["add_doctor_arguments", "main"]

log = logging.getLogger("voiced")

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def _add_asr_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    g = p.add_argument_group("speech recognition")
    g.add_argument("--asr-model", type=Path, required=required, metavar="DIR",
                   help="model directory: a transducer (encoder/decoder/joiner(.int8).onnx + tokens.txt) or"
                   " Whisper (NAME-encoder/NAME-decoder(.int8).onnx + NAME-tokens.txt)")
    g.add_argument("--method", choices=["greedy_search", "modified_beam_search"], default="greedy_search",
                   help="search; modified_beam_search enables --hotword (default: %(default)s)")
    g.add_argument("--hotword", action="append", default=[], metavar="PHRASE",
                   help="phrase to boost (repeatable; modified_beam_search only)")
    g.add_argument("--tail-padding-ms", type=int, default=800, metavar="N",
                   help="silence appended at each endpoint before the final result (default: %(default)s)")
    g.add_argument("--threads", type=int, default=1, metavar="N", help="ONNX Runtime threads (default: %(default)s)")
    g.add_argument("--language", default=None, metavar="CODE",
                   help="multilingual Whisper models: language code, e.g. de (default: detected)")
    g.add_argument("--dereverb", action="store_true",
                   help="Whisper: remove late room reverberation (WPE) from each utterance before decoding"
                   " (as [asr] whisper_dereverb does in the daemon)")


def _add_vad_args(p: argparse.ArgumentParser, default: str) -> None:
    g = p.add_argument_group("voice activity detection")
    g.add_argument("--vad", choices=["none", "energy", "silero"], default=None,
                   help="none: the whole input is one utterance; energy: level gate; silero: gate + Silero VAD"
                   f" (default: silero with --vad-model, else {default})")
    g.add_argument("--vad-model", type=Path, metavar="PATH", help="Silero VAD v5 ONNX file (needed by --vad silero)")
    p.set_defaults(vad_default=default)
    g.add_argument("--window-frames", type=int, default=10, metavar="N",
                   help="10 ms frames per processing window (default: %(default)s = 100 ms)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voiced",
        description="Offline-first voice daemon: ALSA capture, VAD, streaming INT8 speech recognition.",
    )
    parser.add_argument("--version", action="version", version=f"voiced {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("run", help="run the daemon (MQTT, Hermes protocol)",
                       description="Run the daemon: capture, VAD, speech recognition, intents, MQTT."
                       " Every config key is documented in README.md, section Configuration.")
    p.add_argument("--config", type=Path, default=Path("/etc/voiced/voiced.toml"), metavar="FILE",
                   help="TOML configuration (default: %(default)s)")
    p.add_argument("--listen-mode", choices=["always", "on_request", "wake"], default=None,
                   help="always: transcribe every utterance; on_request: only inside hermes/asr/startListening"
                   " sessions; wake: only the utterance after a wake word of [wake] models (default: wake for"
                   " a Wyoming satellite with [wake] models, else always)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("wyoming", help="serve Home Assistant's Wyoming protocol only (no MQTT)",
                       description="Serve speech-to-text, text-to-speech, wake words, intents (and, with"
                       " [wyoming] satellite = true, the satellite role) to Home Assistant over Wyoming, from the"
                       " models of the config file, without MQTT. `voiced run` serves the same when [wyoming] uri is set."
                       " Home Assistant finds the server by zeroconf, or add it by host and port"
                       " (Settings > Devices & services > Add integration > Wyoming Protocol).")
    p.add_argument("--config", type=Path, default=Path("/etc/voiced/voiced.toml"), metavar="FILE",
                   help="TOML configuration (default: %(default)s)")
    p.add_argument("--uri", default=None, metavar="URI",
                   help="tcp://HOST:PORT or unix://PATH (default: [wyoming] uri, else tcp://0.0.0.0:10700)")
    p.add_argument("--no-zeroconf", action="store_true", help="do not announce _wyoming._tcp.local. by mDNS")
    p.set_defaults(func=cmd_wyoming)

    p = sub.add_parser("doctor", help="check devices, models, broker, state directory, CPU governor and affinity",
                       description="Check what voiced needs and print what to fix; exit 1 if something is broken.")
    add_doctor_arguments(p)
    p.set_defaults(func=cmd_doctor)

    from voiced.models.cli import add_parser as add_models_parser
    from voiced.tts.cli import add_say_parser

    add_models_parser(sub)
    add_say_parser(sub)

    p = sub.add_parser("transcribe", help="transcribe WAV files",
                       description="Transcribe WAV files (any rate, channels, 16/24/32-bit int or float).")
    _add_asr_args(p)
    _add_vad_args(p, default="none")
    p.add_argument("--json", action="store_true",
                   help='one JSON object per line: {"type", "file", "text", "start", "end"}')
    p.add_argument("files", nargs="+", type=Path, metavar="FILE.wav")
    p.set_defaults(func=cmd_transcribe)

    p = sub.add_parser("understand", help="transcripts and intents of WAV files, as the daemon would give them",
                       description="What the daemon would make of recordings: each utterance's transcript and intent,"
                       " with the models, VAD, endpointing and intents (templates, then the local LLM if set) of a"
                       " voiced config. Offline: no cloud; no wake word (every utterance counts).")
    p.add_argument("--config", type=Path, required=True, metavar="FILE", help="voiced configuration (TOML)")
    p.add_argument("--asr-model", type=Path, metavar="DIR", help="instead of the config's [asr] model")
    p.add_argument("--json", action="store_true",
                   help='one JSON object per utterance: {"file", "start", "end", "text", "from_templates",'
                   ' "intent", "slots", "source"}')
    p.add_argument("files", nargs="*", type=Path, metavar="FILE.wav",
                   help="recordings; none: listen to the config's [audio] source until interrupted")
    p.set_defaults(func=cmd_understand)

    p = sub.add_parser("listen", help="live events from an ALSA capture device",
                       description="Listen on an ALSA device and print speech events until interrupted.")
    p.add_argument("--device", default="default", metavar="PCM", help="ALSA PCM name, e.g. hw:1,0 (default: %(default)s)")
    p.add_argument("--channels", type=int, default=None, metavar="C",
                   help="channels to open the device with (default: 1, or enough for --channel)")
    p.add_argument("--channel", type=int, default=None, metavar="N",
                   help="0-based capture channel to use (default: all channels mixed down)")
    _add_asr_args(p, required=False)
    _add_vad_args(p, default="energy")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_listen)

    from voiced.bench.cli import add_bench_parser

    add_bench_parser(sub)
    return parser


def _recognizer(args: argparse.Namespace):
    from voiced.asr.loader import family_of, load_recognizer
    from voiced.asr.recognizer import RecognizerConfig
    from voiced.asr.search import SearchMethod
    from voiced.asr.whisper import WhisperConfig
    from voiced.audio.dereverb import DereverbConfig
    from voiced.runtime.graph_cache import default_graph_cache
    from voiced.runtime.onnx import SessionOptions

    transducer = RecognizerConfig(
        method=SearchMethod(args.method), hotwords=tuple(args.hotword),
        tail_padding_ms=args.tail_padding_ms, threads=args.threads,
    )
    whisper = WhisperConfig(language=args.language, threads=args.threads,
                            dereverb=DereverbConfig() if args.dereverb else None)
    # The optimized graphs are kept: a second run skips the optimization (a third of a short file's CPU).
    session = SessionOptions(threads=args.threads, graph_cache=default_graph_cache())
    for option in _unused_asr_options(args, family_of(args.asr_model) if args.asr_model.is_dir() else None):
        log.warning("%s does nothing here: ignored", option)
    return load_recognizer(args.asr_model, transducer, whisper, session)


def _unused_asr_options(args: argparse.Namespace, family: AsrFamily | None) -> list[str]:
    """The options given that the model's family or the search cannot use (they used to be
    ignored without a word)."""
    from voiced.asr.loader import AsrFamily
    from voiced.asr.search import SearchMethod

    unused = []
    if args.hotword and (family is AsrFamily.WHISPER or SearchMethod(args.method) is not SearchMethod.MODIFIED_BEAM):
        unused.append("--hotword (modified_beam_search with a transducer only)")
    if family is AsrFamily.TRANSDUCER:
        unused += [f"{flag} (Whisper only)" for flag, given in (("--language", args.language is not None),
                                                                ("--dereverb", args.dereverb)) if given]
    return unused


def _endpointer(args: argparse.Namespace):
    from voiced.runtime.graph_cache import default_graph_cache
    from voiced.runtime.onnx import SessionOptions
    from voiced.vad import VadKind, build_endpointer

    # --vad-model alone means the Silero VAD (as [vad] model does in a config); it used to be ignored
    kind = VadKind(args.vad if args.vad is not None else "silero" if args.vad_model else args.vad_default)
    if kind is VadKind.SILERO and args.vad_model is None:
        raise ConfigError("--vad-model", "--vad silero needs the Silero VAD v5 model file (or --vad energy / none)")
    return build_endpointer(kind, args.vad_model, options=SessionOptions(graph_cache=default_graph_cache()))


def _print_event(ev, as_json: bool, **extra: object) -> None:
    from voiced.listener import ListenEventType

    if as_json:
        print(json.dumps({**ev.to_dict(), **extra}, ensure_ascii=False), flush=True)
    elif ev.type is ListenEventType.FINAL:
        prefix = f"{extra['file']}: " if "file" in extra else ""
        print(f"{prefix}[{ev.start:.2f}-{ev.end:.2f}] {ev.text}", flush=True)


def _listen_mode(config: Config, asked: str | None) -> ListenMode:
    """``--listen-mode``, or what the config implies: a Wyoming satellite with wake words streams the
    utterance after each wake word, which only wake mode ends there (in ``always`` the wake word's
    own utterance ended the pipeline: Home Assistant heard "alexa" and nothing more)."""
    from voiced.core.events import ListenMode

    satellite = config.wyoming.satellite and bool(config.wake.models)
    if asked is None:
        return ListenMode.WAKE if satellite else ListenMode.ALWAYS
    mode = ListenMode(asked)
    if satellite and mode is not ListenMode.WAKE:
        log.warning("--listen-mode %s with a Wyoming satellite: its pipelines end with the wake word's own "
                    "utterance, before the command (--listen-mode wake streams the command)", asked)
    return mode


def cmd_run(args: argparse.Namespace) -> int:
    import faulthandler

    from voiced.config import Config
    from voiced.pipeline import Daemon
    from voiced.runtime.hugepages import advise_huge_pages
    from voiced.runtime.notify import SystemdNotifier
    from voiced.runtime.supervisor import STOP_TIMEOUT_S, leave_now

    faulthandler.enable()  # a watchdog SIGABRT then logs every thread's stack
    # before the models load (up to minutes on a Pi Zero): a HUP meanwhile killed the daemon, and
    # systemd takes a death by SIGHUP for a clean exit, so Restart=on-failure left it dead
    reload_requested = threading.Event()
    signal.signal(signal.SIGHUP, lambda *_: reload_requested.set())
    notifier = SystemdNotifier()
    config = Config.from_file(args.config)
    notifier.status("loading models")
    daemon = Daemon(config, _listen_mode(config, args.listen_mode), notifier)
    signal.signal(signal.SIGTERM, lambda *_: daemon.supervisor.request_stop())
    signal.signal(signal.SIGINT, lambda *_: daemon.supervisor.request_stop())
    daemon.start()
    # READY waits for a broker that answers (so STATUS says connected), never for one that is down
    daemon.client.wait_first_attempt(1.0)
    notifier.ready(daemon.status_line())
    log.info("voiced running as site %s: %s", config.site.id, daemon.status_line())
    advise_huge_pages()  # the weights into huge pages now that READY=1 is out (models load without)
    while not daemon.supervisor.wait(0.5):
        if reload_requested.is_set():
            reload_requested.clear()
            notifier.reloading("reloading configuration")
            try:
                daemon.reload(Config.from_file(args.config))
            except VoicedError as exc:  # a bad edit keeps the running configuration
                log.error("reload failed, keeping the running configuration: %s", exc)
            except Exception:  # noqa: BLE001 - nor may an edit nobody foresaw stop the daemon
                log.exception("reload failed, keeping the running configuration")
            notifier.ready(daemon.status_line())
    log.info("stopping")
    notifier.stopping("stopping: draining the outbox")
    clean = daemon.stop(STOP_TIMEOUT_S)
    if daemon.supervisor.fatal:
        log.error("giving up: %s", daemon.supervisor.fatal)
    if not clean:  # a stage still inside a model run: the interpreter's tear-down would abort
        leave_now(daemon.supervisor.exit_code)
    return daemon.supervisor.exit_code


def cmd_wyoming(args: argparse.Namespace) -> int:
    import dataclasses

    from voiced.config import Config
    from voiced.core import Core
    from voiced.runtime.hugepages import advise_huge_pages
    from voiced.runtime.notify import SystemdNotifier
    from voiced.runtime.supervisor import STOP_TIMEOUT_S, leave_now
    from voiced.wyoming.server import WyomingServer

    # voiced wyoming reloads nothing; a HUP (logrotate, a habit) must not end it
    signal.signal(signal.SIGHUP, lambda *_: log.warning("SIGHUP: voiced wyoming does not reload its configuration; "
                                                        "restart it to apply changes"))
    notifier = SystemdNotifier()
    config = Config.from_file(args.config)
    wy = config.wyoming
    wy = dataclasses.replace(wy, uri=args.uri or wy.uri or "tcp://0.0.0.0:10700",
                             zeroconf=wy.zeroconf and not args.no_zeroconf)
    config = dataclasses.replace(config, wyoming=wy)
    notifier.status("loading models")
    server: WyomingServer | None = None
    core = Core(config, _listen_mode(config, None), notifier=notifier,
                status=lambda: f"{core.status_line()} · {server.status() if server else ''}")
    server = WyomingServer(core, wy)
    signal.signal(signal.SIGTERM, lambda *_: core.supervisor.request_stop())
    signal.signal(signal.SIGINT, lambda *_: core.supervisor.request_stop())
    server.start()
    core.start()
    notifier.ready(core.status_line())
    log.info("voiced wyoming serving on %s%s", wy.uri, f" (port {server.port})" if server.port is not None else "")
    advise_huge_pages()  # the weights into huge pages now that READY=1 is out (models load without)
    while not core.supervisor.wait(0.5):
        pass
    notifier.stopping("stopping")
    server.stop()
    if not core.stop(STOP_TIMEOUT_S - 2.0):  # the server had its 2 s
        leave_now(core.supervisor.exit_code)
    return core.supervisor.exit_code


def add_doctor_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``voiced doctor`` and ``python -m voiced.doctor`` (here: importing the doctor
    costs numpy, and every command builds this parser)."""
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="TOML configuration to check (default /etc/voiced/voiced.toml)")
    parser.add_argument("--profile", default=None,
                        help="hardware profile name or .toml path (default: the config's [hardware] profile, else detect)")
    parser.add_argument("--no-load", action="store_true", help="do not open models in ONNX Runtime")


def cmd_doctor(args: argparse.Namespace) -> int:
    from voiced.doctor import run

    return run(args)


def cmd_transcribe(args: argparse.Namespace) -> int:
    from voiced.audio.source import WavSource
    from voiced.listener import Listener

    recognizer = _recognizer(args)

    def transcribe(path: Path) -> None:
        listener = Listener(recognizer, _endpointer(args), args.window_frames)
        with WavSource(path) as source:
            for ev in listener.events(source.chunks()):
                _print_event(ev, args.json, file=str(path))

    return _each_file(args.files, transcribe)


def _each_file(paths: Sequence[Path], work: Callable[[Path], None]) -> int:
    """``work`` on each file; a file that fails is named on stderr and the others still done."""
    failed = 0
    for path in paths:
        try:
            work(path)
        except VoicedError as exc:
            print(f"voiced: {exc}", file=sys.stderr)
            failed += 1
    return EXIT_ERROR if failed else EXIT_OK


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGINT and SIGTERM end a live command cleanly: its source stops, then it returns."""
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())


def cmd_understand(args: argparse.Namespace) -> int:
    from voiced.config import Config
    from voiced.understand import Understanding, live_source

    config = Config.from_file(args.config)
    stop = threading.Event()
    source = None if args.files else live_source(config, stop)  # a missing source is said before loading
    understanding = Understanding(config, args.asr_model)

    def show(utterances) -> None:
        for utterance in utterances:
            print(json.dumps(utterance.to_dict(), ensure_ascii=False) if args.json else utterance, flush=True)

    try:
        if source is not None:
            _stop_on_signals(stop)
            print(f"listening on {config.audio.source}; speak, Ctrl-C to end", file=sys.stderr, flush=True)
            show(understanding.utterances(source, source.describe()))
        return _each_file(args.files, lambda path: show(understanding.recording(path)))
    finally:
        understanding.close()


def cmd_listen(args: argparse.Namespace) -> int:
    from voiced.audio.alsa import AlsaCaptureConfig, AlsaSource
    from voiced.listener import Listener

    recognizer = _recognizer(args) if args.asr_model else None
    stop = threading.Event()
    _stop_on_signals(stop)
    listener = Listener(recognizer, _endpointer(args), args.window_frames)
    channels = args.channels or (args.channel + 1 if args.channel is not None and args.channel >= 0 else 1)
    try:
        capture = AlsaCaptureConfig(device=args.device, channels=channels, channel=args.channel)
    except ConfigError as exc:
        raise exc.as_option() from None  # named as typed: --channel, not channel
    source = AlsaSource(capture, stop=stop)
    with source:
        if not source.capturing:  # at a terminal a wrong name is an error; the daemon waits for its device
            raise AudioError(f"--device {args.device}: cannot open it ({source.stats.last_error}); "
                             "`arecord -L` lists the capture devices")
        log.info("listening on %s", args.device)
        for ev in listener.events(source.chunks()):
            if args.json:
                _print_event(ev, True, device=args.device)
            else:  # live, every event is news
                print(f"{ev.type.value:12s} {ev.start:8.2f} {ev.end:8.2f} {ev.text}", flush=True)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except VoicedError as exc:
        print(f"voiced: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
