"""Generators of test models in the exact layouts of real public model families.

The weights are random (seeded) but shaped so that the models behave like trained
ones where a test can tell the difference: outputs depend on every input, recurrent
states carry information across calls, and decoders emit realistic token streams.
"""

from __future__ import annotations

from typing import Any

__all__ = ["make_transducer"]


def __getattr__(name: str) -> Any:
    # Lazy, so `python -m tests.modelgen.transducer` does not import the module twice.
    if name == "make_transducer":
        from tests.modelgen.transducer import make_transducer

        return make_transducer
    raise AttributeError(name)
