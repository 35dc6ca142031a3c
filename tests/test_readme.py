"""The README stays true: its configuration example is one voiced accepts, its commands exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests.support import make_certificates
from voiced.cli import build_parser
from voiced.config import Config
from voiced.errors import ConfigError

README = Path(__file__).resolve().parents[1] / "README.md"
GROUPS = ("bench", "models")
"""Subcommands whose own subcommand is part of the command (``voiced bench asr``)."""


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_the_configuration_example_is_a_config_voiced_accepts(tmp_path: Path) -> None:
    """Every key known, every value of its type and range; only the files it names (which voiced
    checks at load) are stood in for by files that exist."""
    (example,) = _blocks("toml")
    data = tomllib.loads(example)
    make_certificates(tmp_path)  # the TLS files are read when the config is: real ones stand in
    stood_in: list[str] = []
    for _ in range(10):
        try:
            config = Config.from_dict(data, tmp_path / "voiced.toml")
            break
        except ConfigError as err:
            if "does not exist" not in err.problem or err.key in stood_in:
                raise
            *sections, leaf = err.key.split(".")
            node = data
            for name in sections:
                node = node[name]
            node[leaf] = str(tmp_path / Path(node[leaf]).name)
            if not Path(node[leaf]).exists():
                Path(node[leaf]).write_text("stand-in\n", encoding="utf-8")
            stood_in.append(err.key)
    else:
        pytest.fail(f"still refused after standing in for {stood_in}")
    assert config.site.id == data["site"]["id"] and config.asr.method.value == data["asr"]["method"]
    # the sections the example shows are all there is to configure
    import dataclasses

    assert set(data) == {f.name for f in dataclasses.fields(Config)} - {"path"} and len(data) >= 15


def _keys(cls: type, prefix: str = "") -> list[str]:
    """The dotted config keys of a config dataclass, nested tables followed into."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        tables = [t for t in (hints[f.name], *typing.get_args(hints[f.name])) if dataclasses.is_dataclass(t)]
        keys += _keys(tables[0], f"{prefix}{f.name}.") if tables else [prefix + f.name]
    return keys


def test_the_configuration_example_shows_every_key() -> None:
    """Every key voiced reads is in the README's example, so every key is documented beside it."""
    (example,) = _blocks("toml")
    data = tomllib.loads(example)

    def shown(key: str) -> bool:
        node = data
        for name in key.split("."):
            if not isinstance(node, dict) or name not in node:
                return False
            node = node[name]
        return True

    # path: where the config was read from, not a key; intents.lists: list names of the user's choosing
    keys = [k for k in _keys(Config) if k not in ("path", "intents.lists.lists")]
    assert len(keys) > 100
    assert [k for k in keys if not shown(k)] == []


def _commands() -> set[tuple[str, ...]]:
    """``voiced SUB [GROUP-SUB]`` of the command lines in sh blocks and of `inline code`."""
    text = README.read_text(encoding="utf-8")
    lines = [line for block in _blocks("sh") for line in block.splitlines()]
    lines += re.findall(r"`([^`\n]+)`", text)
    found = set()
    for line in lines:
        words = line.split("#")[0].split()
        if len(words) < 2 or words[0] != "voiced" or not re.fullmatch(r"[a-z][a-z-]*", words[1]):
            continue
        sub = words[1] in GROUPS and len(words) > 2 and re.fullmatch(r"[a-z][a-z-]*", words[2])
        found.add(tuple(words[:3] if sub else words[:2]))
    return found


def test_every_command_the_readme_shows_exists(capsys: pytest.CaptureFixture[str]) -> None:
    commands = _commands()
    assert ("voiced", "understand") in commands and ("voiced", "bench", "recordings") in commands
    for command in sorted(commands):
        with pytest.raises(SystemExit) as done:
            build_parser().parse_args([*command[1:], "--help"])
        assert done.value.code == 0, f"{' '.join(command)}: {capsys.readouterr().err}"
