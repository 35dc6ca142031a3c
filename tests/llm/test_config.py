"""The [llm] section."""

from __future__ import annotations

from pathlib import Path

import pytest

from voiced.configfile import section_from_dict
from voiced.errors import ConfigError
from voiced.llm.config import LlmConfig, Provider


def test_defaults_are_off_greedy_and_lazy() -> None:
    config = LlmConfig()
    assert not config.enabled
    assert (config.temperature, config.preload, config.provider, config.prefix_cache) == (0.0, False, Provider.AUTO, True)
    assert config.resolved_threads() >= 1


def test_a_toml_table_converts_with_its_enum_and_path() -> None:
    config = section_from_dict(LlmConfig, {"model": "models/qwen", "provider": "cpu", "threads": 2,
                                           "time_budget_s": 2, "max_new_tokens": 48, "prefix_cache": False},
                                "llm", "voiced.toml")
    assert config.provider is Provider.CPU and config.time_budget_s == 2.0 and config.resolved_threads() == 2
    assert not config.prefix_cache
    assert config.relative_to(Path("/etc/voiced")).model == Path("/etc/voiced/models/qwen")
    assert config.relative_to(Path("/etc/voiced")).relative_to(Path("/elsewhere")).model == Path("/etc/voiced/models/qwen")


@pytest.mark.parametrize(("table", "key"), [
    ({"time_budget_s": 0}, "llm.time_budget_s"),
    ({"time_budget_s": 30}, "llm.time_budget_s"),
    ({"max_new_tokens": 0}, "llm.max_new_tokens"),
    ({"temperature": -0.1}, "llm.temperature"),
    ({"threads": 0}, "llm.threads"),
    ({"provider": "tpu"}, "llm.provider"),
    ({"preload": True}, "llm.preload"),
    ({"prefix_cache": "yes"}, "llm.prefix_cache"),
    ({"modle": "x"}, "llm.modle"),
])
def test_bad_values_name_their_key_and_file(table: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        section_from_dict(LlmConfig, table, "llm", "voiced.toml")
    assert err.value.key == key and err.value.source == "voiced.toml"
