"""Template-aware Whisper decoding: a command the templates allow, when the audio supports it.

Free greedy decoding is bad at short commands: a device name comes out as a similar-sounding
word, two-word commands as unrelated phrases. Here a second, constrained search keeps only
tokens that continue a template sentence (checked on the text with the sentence space, so any
tokenization of a sentence is allowed, and its end only where hassil matches the whole text).
It is best-first: the hypothesis with the best log-probability plus a reward per token (an
estimate of what the rest of the sentence costs) is extended next, within a budget of decoder
calls, then depth first if no sentence was finished by then. When the first sentence finished
already wins the choice, a few more calls look for a more probable one per token
(``search_on_winning``: best-first order finishes "cancel all of my timers" before "... in our
bathroom"); the free transcript is kept or not as before. If none is finished, or only an
improbable one (``align_below``), the template sentences a few word edits from the free
transcript or from the search's deepest beginnings are scored too (``template_align``: the first
word lost or misheard, words too many at the end, a last word Whisper would only write another
way). Template sentences are ranked against each other per token, less a penalty for leaving
part of what the free transcript heard unsaid (``short_penalty``). Wildcard sentences are not
followed (a wildcard would let any text through): their utterances keep the free transcript,
unless a template sentence without one is at least as probable (``wildcard_margin``).
Both texts are scored by the same model on the same audio (log-probability per token, end of
text included), and the constrained one wins unless the free one is more probable by more than ``margin`` nats per token. Read
speech that is no command finds no constrained sentence, or only an improbable one; the free
transcript is scored first, so beginnings far below what could win are dropped (``hopeless``)
and the search on read speech mostly ends after a few calls instead of its whole budget.
The search itself is in ``voiced.asr.whisper_template_search``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from voiced.asr.logprob import log_softmax
from voiced.asr.spoken_length import syllables, without_repeats
from voiced.asr.template_align import AlignSettings, sentences_near
from voiced.asr.whisper_template_search import _SENTENCE_END, _constrained, _per_token_score
from voiced.errors import ConfigError
from voiced.sentencespace import SentenceSpace

if TYPE_CHECKING:
    import onnxruntime as ort

    from voiced.asr.whisper_model import WhisperModel

__all__ = ["Choice", "TemplateDecoding", "decode_with_templates"]


@dataclass(frozen=True)
class TemplateDecoding:
    """How template-aware decoding chooses between the free and the constrained transcript."""

    margin: float = 3.0
    """The free transcript wins only when its log-probability per token exceeds the constrained
    one's by more than this many nats: the smallest margin with the fewest word errors on the
    development half of ``voiced bench commands`` (3.0 with the search of 2026-11-25; hifitts
    read speech: 1 of 116 transcripts changed, WER 9.73 -> 9.62 %)."""
    top_k: int = 300
    """Tokens considered at each constrained step, most probable first."""
    beam: int = 16
    """Next tokens considered per hypothesis (the first word: 4 times as many)."""
    max_steps: int = 240
    """Decoder calls the constrained search may spend on one utterance (each ~10-20 ms here) before
    it goes on depth first (``complete``); most commands finish a sentence long before. With 120
    calls and a beam of 8 the search ran out on commands whose first word the audio disfavours
    ("Pause timer in our garage." heard "Toss time for our brush to", "Remove three hour from the
    garage timer." heard "From his three hour from the brush timer.") and found a sentence the free
    transcript beat. 683 development commands (the bench's seed 1 development half and seeds 7 and
    11, none of the test split's sentences; INT8 u8 tiny.en, 2026-11-28): 120/8 619 right intents,
    120/16 619, 240/8 2 more of the 64 misses, 240/16 623 (5 gained, 1 lost: "close up the awnings
    across garage" now "... the door on the garage", which Whisper scores higher), 480/16 624 (2
    lost) with one command at 16 s of CPU; 240/16 took at most 8.4 s (6.2 s before), CPU per
    command about the same at the median and the 90th percentile (0.58 / 1.85 s beside another
    run). hifitts read speech: none of 116 changed (WER 9.08 %)."""
    token_reward: float | None = 2.0
    """Search order: log-probability plus this many nats per token, an estimate of what the rest
    of the sentence will cost (A*-like); None ranks by log-probability per token instead, which
    spends the budget on short, cheap beginnings while a sentence whose first word the audio
    disfavours ("Pause" heard as "Lost") waits. The more it is, the deeper the search goes before
    it turns back to a cheaper beginning. First chosen on the development half of ``voiced bench
    commands`` (right intents, all with the mark rules and ``complete``: 0.75 52/60, 1.0 53/60,
    1.5 49/60; 1.0 without ``complete`` 51/60; per token, before the mark rules, 46/60). Chosen
    again with the alignment and ``short_penalty`` (657 development commands, see ``align_below``;
    INT8 tiny.en, 2026-11-28): 1.0 580, 2.0 592, 2.5 588, 3.0 578 right intents, CPU per command
    p50 about the same (361-375 ms); with the beam at 16 as well 592; 593 with 2.0 once a range
    took only numbers hassil reads (16 gained, 3 lost against 1.0 before; p50 347 ms), 594 with a
    decimal point after a digit (p50 343 ms). The places, "un" and timers the audio goes on to say
    are reached where 1.0 ran out of calls on the short sentence's neighbours ("cancel all timers"
    -> "... in our bedroom", "Close up the tv." -> "... the awning around office"). hifitts read
    speech: the same 1 of 116 changed, WER 9.08 %."""
    complete: bool = True
    """When ``max_steps`` runs out with no sentence finished, go on depth first (backtracking at
    dead ends) for at most the utterance's token limit more calls instead of giving up."""
    align: AlignSettings | None = AlignSettings()
    """When the search finds no sentence, score the template sentences a few word edits from the
    free transcript (one decoder call each, see ``template_align``) and take the best; None: the
    search alone."""
    hopeless: float | None = 1.0
    """A beginning whose log-probability per token so far is more than this many nats below what
    the constrained sentence needs to win (the free transcript's per token minus ``margin``) is
    not followed; None: all are. Read speech is no command: the free transcript is probable, the
    template beginnings are not (87 % of the hypotheses the search expanded on 116 hifitts files
    were below that bar, 11 of 1,834 on 60 development commands, and none 1.5 nats below), so the
    search runs out of hypotheses instead of spending ``max_steps`` and the depth-first rest."""

    search_on: int = 0
    """Decoder calls the search may spend after its first finished sentence whether or not it wins
    the choice (``search_on_winning``: only when it does), on beginnings at least
    as probable per token as that sentence, for a more probable one (per token); 0: the first one
    found is taken. Best-first order reaches a short sentence first ("cancel all of my timers")
    when the audio goes on ("... in our bathroom"). Off: at 30, development commands (the bench's
    60 and 100 more spoken with seed 2, none of the test split's sentences) got 143 instead of 138
    of 160 right intents, but the held-aside split none more (52 of 60 either way), and short read
    utterances found more probable sentences too: hifitts 3 transcripts forced into commands instead
    of 1, WER 9.95 % vs 9.08 % free (the limit is 0.5 points); CPU +7 %."""
    search_on_winning: int = 30
    """Decoder calls the search may spend after its first finished sentence when that sentence
    already wins the choice (``Choice.from_templates``: within ``margin`` of the free transcript per
    token), looking for a more probable one per token as ``search_on`` does; the free transcript is
    kept exactly when it was kept without them. Best-first order finishes a short sentence first
    ("cancel all of my timers", "pause living room") while the audio goes on ("... in our
    bathroom", "... timer"). Development commands (the bench's 60 and 100 more spoken with seed 2,
    none of the test split's sentences; INT8 s8 tiny.en, 2026-11-26): 142 -> 145 of 160 right
    intents (decode CPU p50 481 -> 501 ms), about what ungated ``search_on`` gains, while hifitts
    read speech keeps every free transcript it kept without it (ungated: 2 changed, WER 8.76 ->
    9.08 %). 0: the first sentence found is taken."""
    pause_margin: float = 1.5
    """At a pause in speech (``WhisperRecognizer.decode_at_pause``), when the free transcript so
    far is neither a command nor the beginning of one (wildcards not counted), the template
    sentence is taken only if the free one beats it by at most this many nats per token
    (``margin`` still judges the final result). A whole command then ends after the short matched
    silence although Whisper misspelled it ("desk clamp", "Calix lamp"), while a hesitation is not
    completed into some command as the speaker may go on ("Turn on the, um": 3.9). Measured
    (2026-11-26, INT8 tiny.en, whole utterances): of the 60 development commands of ``voiced bench
    commands`` (seed 1), 42 have a free transcript off the templates; their template sentence (the
    one the final decode takes) was within 1.0 for 37 (35 of them the right intent), 1.5 for 39
    (36), 2.0 for 41 (38); the 116 hifitts read utterances were all 2.77 or more away, and through
    the listener with Home Assistant's built-in templates none ended sooner at 250 ms of matched
    silence than at 700 (same texts, same ends). The cost is on speech that is no command: a search
    at each pause, without the word-edit alignment (``align``), which on the development commands
    found no sentence the search missed (52 whole at the pause, 50 right intents, either way) and on
    58 pieces of read speech was 12 s of the pause decodes' 29 s (free decodes: 9.9 s). The two
    listener passes (250 ms, which decodes at pauses, and 700 ms, which does not) took 316 s of CPU
    vs 305 s with free pause decodes (353 s with the alignment): ~11 s more on the ~150 s pass."""
    align_partials: int = 3
    """When the search finds no sentence, or only an improbable one (``align_below``): its deepest
    beginnings (this many, each the furthest one line of the search got) are aligned to template
    sentences as well as the free transcript ("Add 4 hours to my office time" -> "... timer",
    where Whisper's " time" + "r" never comes).
    Development commands (with ``search_on`` 30): 143 -> 145 of 160; only utterances without a
    sentence pay for it."""
    partials_align: AlignSettings = AlignSettings(max_edits=3, max_expansions=300, results=4)
    """The walk for the search's deepest beginnings (``align_partials``), narrower than ``align``'s
    for the free transcript: on read speech the search ends on template-like beginnings, on which
    the wide walk spends its whole 2,000 positions. With ``align``'s walk for them too, template-aware
    decoding of the 116 hifitts utterances took 2.1 times the CPU (108 -> 230 s, 2026-11-28, a
    loaded machine; 110 s with this one) for 2 more of 657 development commands."""
    align_below: float | None = -1.2
    """When the search's sentence scores below this many nats per token (end of text counted), the
    sentences a few word edits from the free transcript and the search's deepest beginnings are
    scored too, as when it finds none, and the better is taken (``short_penalty``); None: only when
    it finds none. Best-first order finishes short sentences first ("Hello.", "What's the time?",
    "Close up the tv.") while the spoken one began with a word the audio disfavours ("pause" lost,
    "add" heard as "Everyone now"), and the free transcript already holds most of its words.
    Development commands (the bench's seed 1 development half and seeds 7 and 11, 657 in all, none of
    the test split's sentences; INT8 tiny.en, 2026-11-28): right intents 561 -> 570 (with the wider
    ``AlignSettings`` for the free transcript; the search's sentences of right intents scored -0.78
    per token at the median, -1.63 at the tenth percentile; with the wide walk for all texts -1.5
    gained one fewer than -1.2), CPU per command p50 319 -> 325 ms, total 322 -> 390 s (each run
    beside another); aligning every utterance gained no more, at p50 836 ms. hifitts read speech: the same 1 of 116 changed, WER 9.08 %."""
    short_penalty: float = 2.0
    """Template sentences are ranked against each other by log-probability per token less this
    many nats per token times how much shorter than the free transcript they are: the natural log
    of (its syllables + 1) / (theirs + 1) where above 0 (``voiced.asr.spoken_length``). Whisper
    scores a sentence that leaves the end or the beginning of the audio unsaid nearly as well as
    the whole one ("cancel all timers" for "... in our bedroom", "pause" for "unpause"), while its
    free transcript, wrong words and all, covers the utterance ("cancel all timers and I'll be",
    "and pause the shows in bedroom"). Whether the free transcript or the template sentence wins
    (``margin``) is judged without it. 0: per token alone.
    Development commands (657, see ``align_below``; 2026-11-28): right intents 570 -> 580 (a place
    or "un" no longer dropped; lost: a place added that was not said, "Is there any of the blind
    shut in the kitchen?"). Counting longer sentences down too (the log ratio's absolute value) did
    worse, as Whisper's free transcript often runs on past the command. Aligning also when the
    search's sentence is shorter than the free transcript by more than 0.2 of that log ratio: 582
    of the 657 (3 gained, 1 lost; with it, 3.0 here gave 581), but on the first 269 seed 11
    commands with the tests' u8 weights 1 lost and none gained: not done. hifitts read speech: the
    same 1 of 116 changed, WER 9.08 %."""
    least_probable: float | None = -3.2
    """The template sentence wins only if its log-probability per token (end of text counted) is at
    least this, however improbable the free transcript is; None: ``margin`` alone judges. Read
    speech is no command: its free transcript is probable (-0.2 to -0.7 per token) and the best
    template sentence far below it; the margin alone let "What is the time?" stand for "or vice
    versa." at -3.22, 2.99 nats below, and its chance differs with the INT8 kernels (2026-11-28, a
    2-core AMD EPYC without VNNI: hifitts 3 of 116 transcripts changed with u8 weights, WER 9.08 ->
    9.95 %, 4 with s8, 9.84 -> 11.03 %; 1 on the VNNI machine before; with it 0 and 1, 9.84 ->
    10.27 %). The right sentences of the 683 development commands (see ``wildcard_margin``) scored
    -3.12 or more: right intents 619 with it and without (-3.0: 3 fewer; a margin of 2.0 instead:
    3 fewer, as it changes the search too), WER 10.07 -> 10.54 % (what it turns away were wrong
    intents nearer in words than the free transcript); close to the microphone nothing changed
    (671 of 683, WER 3.54 %). The search itself is not told (``search_on_winning`` goes on from an
    improbable first sentence, "Stop, desk lamp" -> "..., mower.")."""
    wildcard_margin: float | None = 0.0
    """A free transcript that is a command only through a wildcard ("Remove 3 hours off of the
    bedroom timer": "of the bedroom" as a timer's name) is searched too, and the template sentence
    taken only when it is at least as probable per token as the free one less this many nats
    (``margin`` for such transcripts); None: such a transcript is kept, as a command. Development
    commands (683, the bench's seed 1 development half and seeds 7 and 11, none of the test split's
    sentences; INT8 u8 tiny.en, 2026-11-28): 5 had such a free transcript, 2 of them right intents
    at 0.0 ("Resume the 28th hour's timer." -> "... 28 hours timer"), 5 at 1.0; 150 spoken
    wildcard commands (lists' items, media titles, delayed commands): none changed at 0.0, but at
    1.0 "Turn off the kitchen light in 18 hours." became "Turn off the kitchen lighting."."""
    cased_words: bool = True
    """A word is written as Whisper writes words: lower case, Capitalized, UPPER CASE (or UPPER
    with a plural s, "TVs"). The walk compares words case-blind, so without this the depth-first
    rest wandered into "OffIce, tImeRS" (same right intents on the development commands, saner texts)."""

    def __post_init__(self) -> None:
        if not 0 <= self.margin <= 1000:
            raise ConfigError("asr.template_margin", f"must be within 0..1000, got {self.margin}")
        if not 1 <= self.top_k <= 1000:
            raise ConfigError("top_k", f"must be within 1..1000, got {self.top_k}")
        if not 1 <= self.beam <= 32:
            raise ConfigError("beam", f"must be within 1..32, got {self.beam}")
        if not 1 <= self.max_steps <= 10_000:
            raise ConfigError("max_steps", f"must be within 1..10000, got {self.max_steps}")
        if not 0 <= self.search_on <= 10_000:
            raise ConfigError("search_on", f"must be within 0..10000, got {self.search_on}")
        if not 0 <= self.search_on_winning <= 10_000:
            raise ConfigError("search_on_winning", f"must be within 0..10000, got {self.search_on_winning}")
        if not 0 <= self.align_partials <= 100:
            raise ConfigError("align_partials", f"must be within 0..100, got {self.align_partials}")
        if not 0 <= self.pause_margin <= 1000:
            raise ConfigError("asr.template_pause_margin", f"must be within 0..1000, got {self.pause_margin}")
        if self.align_below is not None and not -1000 <= self.align_below <= 0:
            raise ConfigError("align_below", f"must be within -1000..0, got {self.align_below}")
        if not 0 <= self.short_penalty <= 1000:
            raise ConfigError("short_penalty", f"must be within 0..1000, got {self.short_penalty}")
        if self.least_probable is not None and not -1000 <= self.least_probable <= 0:
            raise ConfigError("least_probable", f"must be within -1000..0, got {self.least_probable}")
        if self.wildcard_margin is not None and not 0 <= self.wildcard_margin <= 1000:
            raise ConfigError("wildcard_margin", f"must be within 0..1000, got {self.wildcard_margin}")
        if self.hopeless is not None and not 0 <= self.hopeless <= 1000:
            raise ConfigError("hopeless", f"must be within 0..1000, got {self.hopeless}")


@dataclass(frozen=True)
class Choice:
    """Both transcripts of one utterance and which one counts."""

    free: tuple[list[int], list[float]]
    """Free greedy tokens and each one's probability."""
    constrained: tuple[list[int], list[float]] | None
    """The best template sentence's tokens, or None when none could be followed."""
    free_logprob: float
    constrained_logprob: float | None
    margin: float
    least: float | None = None
    """``TemplateDecoding.least_probable``: the constrained transcript's least log-probability per token to win."""

    @property
    def from_templates(self) -> bool:
        """The constrained transcript wins (or the free one already is a template sentence)."""
        if self.constrained is None or self.constrained_logprob is None:
            return False
        # per token (end of text counted), as the search ranks: totals would favour short texts
        con = _per_token_score(self.constrained_logprob, len(self.constrained[0]))
        return (con >= _per_token_score(self.free_logprob, len(self.free[0])) - self.margin
                and (self.least is None or con >= self.least))

    def with_margin(self, margin: float) -> Choice:
        """The same decoding judged with another margin (for choosing one on a development set)."""
        return replace(self, margin=margin)

    @property
    def tokens(self) -> list[int]:
        return (self.constrained if self.from_templates and self.constrained else self.free)[0]

    @property
    def probs(self) -> list[float]:
        return (self.constrained if self.from_templates and self.constrained else self.free)[1]


def _token_logprobs(model: WhisperModel, cross_k: ort.OrtValue, cross_v: ort.OrtValue, initial: list[int],
                    tokens: list[int]) -> list[float]:
    """Log-probability of each of ``tokens`` then of end of text, in one teacher-forced decoder call."""
    logits, _, _ = model.decode_step(np.array([initial + tokens], np.int64), None, None, cross_k, cross_v, 0)
    rows = logits[0, len(initial) - 1:]
    return [float(log_softmax(rows[i])[t]) for i, t in enumerate([*tokens, model.eot])]


def _score(model: WhisperModel, cross_k: ort.OrtValue, cross_v: ort.OrtValue, initial: list[int],
           tokens: list[int]) -> float:
    """Log-probability of ``tokens`` then end of text, in one teacher-forced decoder call."""
    return sum(_token_logprobs(model, cross_k, cross_v, initial, tokens))


def _styled(sentence: str, free: str) -> str:
    """A template sentence (lower-case words) written as the free transcript writes: its words'
    case where it has them ("TV"), a capital first letter and its closing mark if it has them."""
    cased = {w.strip(".,?!").lower(): w.strip(".,?!") for w in free.split()}
    words = [cased.get(w, w) for w in sentence.split()]
    stripped = free.strip()
    if stripped[:1].isupper() and words:
        words[0] = words[0][:1].upper() + words[0][1:]
    mark = stripped[-1:] if stripped[-1:] in _SENTENCE_END else ""
    return " " + " ".join(words) + mark


class _Judge:
    """Ranks template sentences against each other: log-probability per token (end of text
    counted) less ``TemplateDecoding.short_penalty`` for each unit of how much shorter than the
    free transcript a sentence is."""

    def __init__(self, model: WhisperModel, free_text: str, penalty: float) -> None:
        self._model = model
        self._free = syllables(without_repeats(free_text))
        self._penalty = penalty

    def shortness(self, tokens: list[int]) -> float:
        """How much shorter than the free transcript: log of (its syllables + 1) / (theirs + 1), at least 0."""
        return max(0.0, math.log((self._free + 1) / (syllables(self._model.text(tokens)) + 1)))

    def __call__(self, tokens: list[int], logprob: float) -> float:
        per_token = _per_token_score(logprob, len(tokens))
        return per_token - self._penalty * self.shortness(tokens) if self._penalty else per_token

    def found(self, found: tuple[list[int], list[float], float]) -> float:
        return self(found[0], found[2])


def _aligned(model: WhisperModel, space: SentenceSpace, settings: TemplateDecoding, cross_k: ort.OrtValue,
             cross_v: ort.OrtValue, initial: list[int], free_text: str, judge: _Judge,
             partials: Sequence[str] = ()) -> tuple[list[int], list[float], float] | None:
    """The best (``judge``) of the template sentences a few word edits from the free transcript or
    from one of the search's most promising unfinished ``partials``."""
    best: tuple[list[int], list[float], float] | None = None
    best_judged = -np.inf
    near = [sentences_near(space, free_text, settings.align),  # type: ignore[arg-type]
            *(sentences_near(space, text, settings.partials_align) for text in partials)]
    for sentence in dict.fromkeys(s for found in near for s in found):
        tokens = model.tokenize(_styled(sentence, free_text))
        if len(tokens) + len(initial) >= model.n_text_ctx // 2:
            continue
        logprobs = _token_logprobs(model, cross_k, cross_v, initial, tokens)
        score = judge(tokens, sum(logprobs))
        if best is None or score > best_judged:
            best, best_judged = (tokens, [float(np.exp(p)) for p in logprobs[:-1]], sum(logprobs)), score
    return best


def _per_token(found: tuple[list[int], list[float], float]) -> float:
    """A constrained sentence's log-probability per token, end of text counted (as the choice judges)."""
    return _per_token_score(found[2], len(found[0]))


def decode_with_templates(model: WhisperModel, space: SentenceSpace, settings: TemplateDecoding,
                          cross_k: ort.OrtValue, cross_v: ort.OrtValue, num_frames: int, initial: list[int],
                          free: tuple[list[int], list[float]]) -> Choice:
    """Decode constrained beside the free greedy transcript ``free`` and weigh the two."""
    free_tokens = free[0]
    free_text = model.text(free_tokens)
    kept = Choice(free, free, 0.0, 0.0, settings.margin)  # the free transcript, a command as it is
    through_wildcard = False
    if free_tokens and space.walker().is_whole(free_text):
        if settings.wildcard_margin is None or space.walker(wildcards=False).is_whole(free_text):
            return kept  # already a command: nothing to add
        through_wildcard = True  # a command, but any words fit a wildcard: a template sentence may fit better
        settings = replace(settings, margin=settings.wildcard_margin)
    free_logprob = _score(model, cross_k, cross_v, initial, free_tokens)
    # as ``Choice.from_templates`` judges but for ``least_probable``, which the sentence found by
    # searching on from an improbable first one may pass
    wins_at = _per_token_score(free_logprob, len(free_tokens)) - settings.margin
    floor = -np.inf
    if settings.hopeless is not None:  # below what could win ``Choice.from_templates``, and then some
        floor = wins_at - settings.hopeless
    unfinished: list[tuple[float, list[int]]] = []
    judge = _Judge(model, free_text, settings.short_penalty)
    constrained = _constrained(model, space, settings, cross_k, cross_v, num_frames, initial, floor, unfinished,
                               wins_at=wins_at, judge=judge)
    improbable = (constrained is not None and settings.align_below is not None
                  and _per_token(constrained) < settings.align_below)
    if settings.align is not None and (constrained is None or improbable):
        # no sentence within the budget, or only an improbable one: the ones a few word edits from
        # the free transcript or from the search's most promising beginnings (aligning always
        # gained nothing more on the development commands, for ~2.7 times the CPU)
        unfinished.sort(key=lambda u: (-len(u[1]), -u[0]))  # deepest, then most promising
        texts = list(dict.fromkeys(model.text(tokens) for _, tokens in unfinished if tokens))
        # the furthest each line of the search got: a beginning the search went on from is in its longer text
        partials = [t for t in texts if not any(o != t and o.startswith(t) for o in texts)]
        aligned = _aligned(model, space, settings, cross_k, cross_v, initial, free_text, judge,
                           partials[:settings.align_partials])
        if constrained is None or (aligned is not None and judge.found(aligned) > judge.found(constrained)):
            constrained = aligned
    if constrained is None:
        return kept if through_wildcard else Choice(free, None, free_logprob, None, settings.margin)
    tokens, probs, logprob = constrained
    choice = Choice(free, (tokens, probs), free_logprob, logprob, settings.margin, settings.least_probable)
    return kept if through_wildcard and not choice.from_templates else choice
