"""Every config key, found by walking the Config dataclasses, with every edge value of its type
(wrong types, 0, -1, ±2**63, 1e308, inf, nan, NUL, 20,000 characters, unknown keys beside it):
each case loads with sane values or fails with a ConfigError naming the key or the file."""

from __future__ import annotations

import math

import pytest

from voiced.bench.fuzz_cases import config_sweep
from voiced.bench.fuzz_config import KEYS, render
from voiced.bench.fuzz_files import Outcome
from voiced.config import Config
from voiced.errors import ConfigError


def test_every_key_with_every_edge_value_loads_sanely_or_names_the_key(tmp_path) -> None:
    tally = config_sweep(tmp_path)
    assert tally.failures == [], tally.failures[:3]
    assert tally.counts[Outcome.CLEAR_ERROR.value] > 1000 and tally.counts[Outcome.LOADED.value] > 100


def test_the_schema_walk_finds_nested_keys_and_new_sections() -> None:
    assert ("vad", "endpoint", "onset_threshold") in KEYS and ("mqtt", "backoff", "factor") in KEYS
    assert len(KEYS) > 120


# -- what the sweep found (each fixed) ----------------------------------------------------------


def _load(tmp_path, path: tuple[str, ...], value: object) -> Config:
    file = tmp_path / "voiced.toml"
    file.write_bytes(render((path, value)))
    return Config.from_file(file)


@pytest.mark.parametrize("key", [("asr", "hotword_boost"), ("daemon", "stats_interval_s"), ("wake", "timeout_s"),
                                 ("mqtt", "backoff", "factor"), ("wyoming", "max_audio_s")])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_for_every_number(tmp_path, key, value) -> None:
    # nan passed every range check (nan < 0 and nan > 1 are both false), inf overflowed waits
    with pytest.raises(ConfigError, match=f"{key[-1]} in .*voiced.toml: must be a finite number"):
        _load(tmp_path, key, value)


@pytest.mark.parametrize("key", [("mqtt", "host"), ("playback", "device"), ("tts", "voice"), ("audio", "source")])
def test_a_nul_in_a_name_or_path_is_refused(tmp_path, key) -> None:
    with pytest.raises(ConfigError, match=f"{key[-1]} in .*voiced.toml: must not contain a NUL"):
        _load(tmp_path, key, "a\0b")


def test_a_file_name_too_long_for_the_file_system_is_a_config_error(tmp_path) -> None:
    # OSError (ENAMETOOLONG) from [mqtt]'s check that ca_file exists escaped as a traceback
    with pytest.raises(ConfigError, match="mqtt in .*voiced.toml: cannot check .*File name too long"):
        _load(tmp_path, ("mqtt", "ca_file"), "x" * 20_000)


@pytest.mark.parametrize(("key", "value"), [
    (("audio", "channels"), 0), (("audio", "channels"), -1), (("audio", "channel"), -1),
    (("audio", "capture_rate"), 0), (("audio", "fallback_rate"), 2**63 - 1), (("audio", "queue_windows"), 10**30),
    (("asr", "max_active_paths"), 0), (("asr", "tail_padding_ms"), -1), (("asr", "threads"), 0),
    (("asr", "hotword_boost"), -1), (("wake", "patience"), 2**63 - 1), (("wake", "timeout_s"), 1e308),
    (("wake", "refractory_s"), 1e308), (("daemon", "stats_interval_s"), 1e308),
])
def test_out_of_range_values_are_refused_naming_the_key(tmp_path, key, value) -> None:
    # each loaded before; 1e308 s overflows threading.Event.wait, 0 channels divides by zero
    with pytest.raises(ConfigError, match=f"{key[-1]} in .*voiced.toml: must be"):
        _load(tmp_path, key, value)
