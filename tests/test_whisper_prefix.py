"""Decoder caches rebuilt from each hypothesis's own positions give the decoder the same input.

A fake decoder that keeps token ids where the real one keeps K checks the rebuilt cache position by
position while a search-like order jumps deep, shallow and across branches; the real Whisper
tiny.en then gives bit-equal logits through the rebuilt caches and through caches grown call by call.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voiced.asr.whisper_prefix import PrefixCaches


class _Positions:
    """A decoder whose K cache holds token id + 1 at each position (1 layer, state 1)."""

    n_text_ctx = 16
    n_text_layer = n_text_state = 1

    def __init__(self) -> None:
        self.histories: list[list[int]] = []

    def decode_step(self, tokens: np.ndarray, k, v, cross_k, cross_v, offset: int):
        import onnxruntime as ort

        cache = k.numpy().copy()
        assert np.array_equal(cache, v.numpy())
        assert not cache[0, 0, offset:].any(), f"positions past {offset} are not zeros: {cache[0, 0, :, 0]}"
        self.histories.append([int(t) - 1 for t in cache[0, 0, :offset, 0]] + tokens[0].tolist())
        cache[0, 0, offset:offset + tokens.shape[1], 0] = tokens[0] + 1
        out = ort.OrtValue.ortvalue_from_numpy(cache)
        return np.zeros((1, tokens.shape[1], 4), np.float32), out, out


def test_every_call_sees_exactly_its_own_sequence() -> None:
    model = _Positions()
    caches = PrefixCaches(model)  # type: ignore[arg-type]

    def step(tokens: list[int], before):
        return caches.step(tokens, before, None, None)[1]  # type: ignore[arg-type]

    root = step([7, 8], None)
    a = step([1], root)
    b = step([2], a)
    c = step([3], b)
    d = step([4], root)  # shallower: what c left past position 2 must be gone
    e = step([5], b)  # back on a branch whose position 2 d wrote over
    step([6], c)
    step([9], d)
    step([0], e)
    assert model.histories == [[7, 8], [7, 8, 1], [7, 8, 1, 2], [7, 8, 1, 2, 3], [7, 8, 4], [7, 8, 1, 2, 5],
                               [7, 8, 1, 2, 3, 6], [7, 8, 4, 9], [7, 8, 1, 2, 5, 0]]
    assert (c.start, c.end, a.before is root, root.end) == (4, 5, True, 2)


@pytest.mark.shared
def test_real_whisper_gives_the_same_logits_through_rebuilt_caches(whisper_int8_dir: Path, speech: Path) -> None:
    from voiced.asr.whisper import WhisperRecognizer
    from voiced.asr.whisper_features import log_mel
    from voiced.audio.wav import read_wav

    whisper = WhisperRecognizer.load(whisper_int8_dir)
    model = whisper.model
    mel = log_mel(read_wav(speech / "jfk" / "jfk.wav")[0][:, 0], model.n_mels)
    (tokens, _), (cross_k, cross_v, _, initial) = whisper._free(mel)
    assert len(tokens) > 10
    # grown call by call, as greedy decoding does
    logits, k, v = model.decode_step(np.array([initial], np.int64), None, None, cross_k, cross_v, 0)
    grown = [logits]
    for i, token in enumerate(tokens):
        logits, k, v = model.decode_step(np.array([[token]], np.int64), k, v, cross_k, cross_v, len(initial) + i)
        grown.append(logits)
    # rebuilt, with a detour down another branch between every two tokens
    caches = PrefixCaches(model)
    logits, link = caches.step(initial, None, cross_k, cross_v)
    rebuilt = [logits]
    for token in tokens:
        detour = caches.step([model.eot - 1], link, cross_k, cross_v)[1]
        caches.step([token], detour, cross_k, cross_v)
        logits, link = caches.step([token], link, cross_k, cross_v)
        rebuilt.append(logits)
    assert all(np.array_equal(a, b) for a, b in zip(grown, rebuilt, strict=True))
