"""YAML read as a config file should be: a key written twice in one mapping is an error.

PyYAML keeps the last of two equal keys without a word, so a second ``lists:`` section in a
template file silently dropped the first one's lists (and the sentences needing them).
"""

from __future__ import annotations

from typing import IO, Any

import yaml
from yaml.nodes import MappingNode

__all__ = ["DuplicateKey", "load_yaml"]

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKey(yaml.YAMLError):
    """A key given twice in one mapping; the message names both lines."""


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            first: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:  # "<<: *anchor" entries may be overridden: YAML says so
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: the base constructor names it
                    continue
                if seen is not key_node.start_mark:
                    raise DuplicateKey(f"line {key_node.start_mark.line + 1}: {key!r} a second time "
                                       f"(first on line {seen.line + 1})")
        return super().construct_mapping(node, deep=deep)


def load_yaml(stream: IO[str]) -> Any:
    """``yaml.safe_load`` that raises :class:`DuplicateKey` (a ``yaml.YAMLError``) on a duplicated key."""
    return yaml.load(stream, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
