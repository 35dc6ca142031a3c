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


def search_log_prob(tokens: list[int], frames: list[int]) -> float:
    """The last token's log-probability as a search gives it: a function of its frame and context."""
    return -0.01 - math.sin(tokens[-1] * 7 + frames[-1] * 3 + len(tokens)) ** 2


def test_paths_that_go_back_anywhere_give_the_full_rebuild_exactly() -> None:
    # Beam search's best path may drop any number of tokens, keep the tokens but move their frames,
    # or shrink; <unk>s and punctuation meet at the cut (a dropped space must come back).
    table = SymbolTable(SYMBOLS)
    for seed in range(6):
        builder = ResultBuilder(table, 0.04)
        rng = random.Random(seed)
        tokens: list[int] = []
        frames: list[int] = []
        probs: list[float] = []
        for step in range(600):
            roll = rng.random()
            if tokens and roll < 0.25:
                cut = rng.randrange(len(tokens) + 1)
                del tokens[cut:], frames[cut:], probs[cut:]
            elif tokens and roll < 0.3:
                frames[-1] += 1
                probs[-1] = search_log_prob(tokens, frames)
            for _ in range(rng.choice([0, 1, 2, 3])):
                tokens.append(rng.choice([1, 1, 5, 7, 8, 8, 9, 11, *range(2, len(SYMBOLS))]))
                frames.append((frames[-1] if frames else 0) + rng.randrange(1, 4))
                probs.append(search_log_prob(tokens, frames))
            t, f, p = tuple(tokens), tuple(frames), tuple(probs)
            got = builder.build(t, f, p)
            text, symbols, times, conf = rebuilt(table, t, f, p)
            assert (got.text, got.tokens, got.timestamps, got.token_ids, got.confidence) == (
                text, symbols, times, t, conf), (seed, step)
