"""``voiced bench recordings``: the user's own recordings of commands, decoded as the daemon does.

Real Whisper tiny.en (INT8 by voiced-quantize) and faster-whisper on real human speech: the one
real spoken command ../shared holds (cut from openWakeWord's office-lights clip) and hifitts read
speech, with the sentences of a voiced config file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_whisper_templates import OFFICE_CLIP
from voiced.asr.wer import wer
from voiced.audio.wav import read_wav, write_wav
from voiced.bench.recordings import read_recordings
from voiced.cli import main as voiced_main
from voiced.errors import ConfigError
from voiced.sentencespace import words_of

OFFICE_COMMAND_S = (30.8, 33.0)
"""Where "turn on the office lights" is in the clip (Silero's cut: 31.04-32.54 s)."""
READ = {"roots_19_morris_0269.wav": "they were men having no country to go back to",
        "presentpictureofnsw_02_mann_0532.wav": "not to stop more than ten minutes by the way"}


@pytest.mark.shared
def test_recordings_are_decoded_free_and_template_aware_with_the_config_s_intents(
        tmp_path: Path, whisper_int8_dir: Path, speech: Path, capsys) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    samples, rate = read_wav(speech.joinpath(*OFFICE_CLIP))
    start, end = (int(s * rate) for s in OFFICE_COMMAND_S)
    write_wav(folder / "office.wav", samples[start:end], rate)
    lines = ["file\ttext", "office.wav\tturn on the office lights"]
    for name, text in READ.items():
        (folder / name).write_bytes((speech / "hifitts_6097_5min" / "audio" / name).read_bytes())
        lines.append(f"{name}\t{text}")
    (folder / "transcripts.tsv").write_text("\n".join(lines) + "\n")
    # the home's own sentences (not voiced bench commands' Home Assistant set, whose intent would be HassTurnOn)
    (tmp_path / "home.yaml").write_text(
        'language: en\nintents:\n  LightsOn:\n    data:\n      - sentences: ["turn on [the] {area} lights"]\n')
    config = tmp_path / "voiced.toml"
    config.write_text('[intents]\ntemplates = ["home.yaml"]\n[intents.lists]\narea = ["office", "hall"]\n')

    capsys.readouterr()
    assert voiced_main(["bench", "recordings", "--asr-model", str(whisper_int8_dir), "--recordings", str(folder),
                        "--config", str(config)]) == 0
    report = json.loads(capsys.readouterr().out)

    assert (report["recordings"], report["in_domain"]) == (3, 1)
    office, *read = report["files"]
    assert office["wanted"] == ["LightsOn", {"area": "office"}]
    for side in ("free", "template_aware", "faster_whisper_int8"):
        assert report[side]["false_intents"] == 0  # read speech is given no intent
        assert words_of(office[side]["text"]) == ["turn", "on", "the", "office", "lights"], side
        assert report[side]["right_intents"] == 1 and office[side]["right"]
    assert [r["wanted"] for r in read] == [None, None]
    assert report["cpu_ms_per_recording"]["template_aware_p50"] > 0
    for side in ("free", "template_aware", "faster_whisper_int8"):
        pairs = [(f["reference"], f[side]["text"]) for f in report["files"]]
        assert report[side]["wer_numbers_as_words_percent"] == wer(pairs, spoken_numbers=True), side
        # the references write "ten" where Whisper may write "10": read out, that is no error
        assert report[side]["wer_numbers_as_words_percent"] <= report[side]["wer_percent"], side
    spoken = report["template_wer_over_faster_whisper_numbers_as_words"]
    fw = report["faster_whisper_int8"]["wer_numbers_as_words_percent"]
    assert spoken == (round(report["template_aware"]["wer_numbers_as_words_percent"] / fw, 3) if fw else None)


def _listing(folder: Path, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "transcripts.tsv").write_text(text)
    return folder


def test_a_folder_without_a_listing_says_what_the_listing_is(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"recordings in .*: no transcripts.tsv \(a header naming the columns file"
                       r".* or manifest.json \(a JSON object a line with audio_filepath and text\)"):
        read_recordings(tmp_path)


@pytest.mark.parametrize(("listing", "problem"), [
    ("office.wav\tturn on the office lights\n", "the first line must name the columns file and text"),
    ("file\tduration_s\ttext\nmissing.wav\t1.0\tturn on the office lights\n", "line 2: .*missing.wav does not exist"),
    ("file\tduration_s\ttext\nsilence.wav\t1.0\n", "line 2: 2 columns, the header names 3"),
    ("file\ttext\n\n", "lists no recording"),
])
def test_a_malformed_listing_names_itself_and_the_line(tmp_path: Path, listing: str, problem: str) -> None:
    folder = _listing(tmp_path / "mine", listing)
    write_wav(folder / "silence.wav", np.zeros(16000, np.int16), 16000)
    with pytest.raises(ConfigError, match=f"recordings in .*transcripts.tsv: {problem}"):
        read_recordings(folder)


def test_a_recording_longer_than_whisper_hears_is_refused_by_name(tmp_path: Path) -> None:
    from voiced.bench.recordings import _load

    folder = _listing(tmp_path / "mine", "file\ttext\nlong.wav\tturn on the office lights\n")
    write_wav(folder / "long.wav", np.zeros(31 * 8000, np.int16), 8000)  # any rate: 31 s once at 16 kHz
    [recording] = read_recordings(folder)
    with pytest.raises(ConfigError, match=r"long.wav: 31.0 s; a recording is one utterance of at most 30 s"):
        _load(recording.path)


def test_a_nemo_manifest_lists_recordings_too(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    (folder / "audio").mkdir(parents=True)
    write_wav(folder / "audio" / "a.wav", np.zeros(16000, np.int16), 16000)
    lines = ['{"audio_filepath": "audio/a.wav", "text": "turn on the office lights", "duration": 1.0}', "",
             '{"audio_filepath": "audio/a.wav", "text": "no mistake can well be made"}']
    (folder / "manifest.json").write_text("\n".join(lines) + "\n")
    assert [(r.name, r.path, r.text) for r in read_recordings(folder)] == [
        ("audio/a.wav", folder / "audio" / "a.wav", "turn on the office lights"),
        ("audio/a.wav", folder / "audio" / "a.wav", "no mistake can well be made")]
    _listing(folder, "file\ttext\naudio/a.wav\tpause\n")  # both: transcripts.tsv is the listing
    assert [r.text for r in read_recordings(folder)] == ["pause"]


def test_listings_saved_by_a_spreadsheet_are_read(tmp_path: Path) -> None:
    """A byte-order mark and CRLF line ends, as spreadsheets save UTF-8 text, in either listing."""
    folder = tmp_path / "mine"
    folder.mkdir()
    write_wav(folder / "a.wav", np.zeros(16000, np.int16), 16000)
    (folder / "transcripts.tsv").write_bytes(b"\xef\xbb\xbffile\ttext\r\na.wav\tturn on the office lights\r\n")
    assert [(r.name, r.text) for r in read_recordings(folder)] == [("a.wav", "turn on the office lights")]
    (folder / "transcripts.tsv").unlink()
    (folder / "manifest.json").write_bytes(b'\xef\xbb\xbf{"audio_filepath": "a.wav", "text": "pause"}\r\n')
    assert [(r.name, r.text) for r in read_recordings(folder)] == [("a.wav", "pause")]


@pytest.mark.parametrize(("line", "problem"), [
    ('{"audio_filepath": "a.wav", "text": "pause"', "line 1: not JSON"),
    ('{"audio_filepath": "a.wav"}', "line 1: needs the strings audio_filepath and text"),
    ('["a.wav", "pause"]', "line 1: needs the strings audio_filepath and text"),
    ('{"audio_filepath": "b.wav", "text": "pause"}', "line 1: .*b.wav does not exist"),
])
def test_a_malformed_manifest_names_itself_and_the_line(tmp_path: Path, line: str, problem: str) -> None:
    write_wav(tmp_path / "a.wav", np.zeros(16000, np.int16), 16000)
    (tmp_path / "manifest.json").write_text(line + "\n")
    with pytest.raises(ConfigError, match=f"recordings in .*manifest.json: {problem}"):
        read_recordings(tmp_path)


@pytest.mark.shared
def test_hifitts_lists_the_same_recordings_either_way(speech: Path, tmp_path: Path) -> None:
    """The real data set ships both listings: its manifest, read alone, gives what its TSV gives."""
    hifitts = speech / "hifitts_6097_5min"
    folder = tmp_path / "hifitts"
    folder.mkdir()
    (folder / "manifest.json").write_text((hifitts / "manifest.json").read_text())
    (folder / "audio").symlink_to(hifitts / "audio")
    from_manifest = [(r.name, r.text) for r in read_recordings(folder)]
    assert len(from_manifest) == 116 and from_manifest == [(r.name, r.text) for r in read_recordings(hifitts)]
