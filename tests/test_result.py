"""ResultBuilder: the incremental result equals a rebuild from the whole hypothesis, whatever the path does."""

from __future__ import annotations

import math
import random

from voiced.asr.result import ResultBuilder
from voiced.asr.tokens import SymbolTable

SYMBOLS = {0: "<blk>", 1: "<unk>", 2: "\u2581the", 3: "\u2581light", 4: "s", 5: ",", 6: "\u2581on", 7: ".",
           8: "\u2581", 9: "'", 10: "\u2581kitchen", 11: "?"}


def rebuilt(table: SymbolTable, tokens, frames, log_probs):
    """What the recognizer built before: everything from scratch."""
    return (table.text(tokens), tuple(table.symbols(tokens)), tuple(round(f * 0.04, 3) for f in frames),
            math.exp(sum(log_probs) / len(log_probs)) if log_probs else 1.0)


def test_growing_and_switching_hypotheses_give_the_full_rebuild() -> None:
    table = SymbolTable(SYMBOLS)
    builder = ResultBuilder(table, 0.04)
    rng = random.Random(7)
    tokens: list[int] = []
    frames: list[int] = []
    probs: list[float] = []
    for step in range(400):
        if tokens and rng.random() < 0.1:  # beam search switches to a path that shares a shorter prefix
            cut = rng.randrange(len(tokens))
            del tokens[cut:], frames[cut:], probs[cut:]
        for _ in range(rng.choice([0, 0, 1, 2])):
            tokens.append(rng.randrange(1, len(SYMBOLS)))
            frames.append((frames[-1] if frames else 0) + rng.randrange(1, 4))
            probs.append(-rng.random())
        t, f, p = tuple(tokens), tuple(frames), tuple(probs)
        got = builder.build(t, f, p)
        text, symbols, times, conf = rebuilt(table, t, f, p)
        assert (got.text, got.tokens, got.timestamps, got.token_ids) == (text, symbols, times, t), step
        assert math.isclose(got.confidence, conf, rel_tol=1e-12)


def test_an_unchanged_hypothesis_returns_the_same_result_object() -> None:
    builder = ResultBuilder(SymbolTable(SYMBOLS), 0.04)
    first = builder.build((2, 3), (1, 5), (-0.1, -0.2))
    assert builder.build((2, 3), (1, 5), (-0.1, -0.2)) is first  # equal content: nothing rebuilt
    assert first.text == "the light"
    assert builder.build((2, 3, 5, 6), (1, 5, 6, 9), (-0.1, -0.2, -0.3, -0.1)).text == "the light, on"
