"""Transcripts → intents with hassil templates (Home Assistant's sentence format).

Template files are YAML as in Home Assistant's ``intents`` repository::

    language: en
    intents:
      HassTurnOn:
        data:
          - sentences: ["turn on [the] {name}"]
    lists:
      area:
        values: [{in: "living room", out: living_room}, kitchen]
    expansion_rules:
      the: "[the]"

A list a template file references but nothing defines becomes a wildcard, so
``turn on [the] {name}`` works without a list of every device name (lists only the
built-in set uses stay empty instead). Matching ignores
case and punctuation, since ASR output is often upper-case without punctuation.

Where sentences come from (template files, Home Assistant's built-in set, the config's
lists) and how they merge is ``voiced.sentences``; this module matches text against them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voiced.errors import ConfigError
from voiced.intentconfig import BuiltinSet, IntentsSection
from voiced.sentences import DEFAULT_LANGUAGE, USER_SENTENCE, assemble, compile_sentences
from voiced.sentences import walk as _walk

if TYPE_CHECKING:  # hassil is imported where it is used: nothing heavy at import time
    from hassil import Intents, RecognizeResult
    from hassil.expression import Expression
    from voiced.sentencespace import SentenceSpace

__all__ = ["MAX_HOTWORDS", "Intent", "IntentRecognizer", "IntentSource", "Slot", "SlotKind"]

log = logging.getLogger(__name__)

RECENT_TEXTS = 256
"""Texts whose match ``recognize`` keeps: the decoders' sentence checks and the intent stage ask
about the same transcripts, so the stage's parse of a sentence a decoder confirmed is a lookup."""
RECENT_TEXT_CHARS = 400
"""Longer texts (no command; an MQTT query may be any size) are parsed and not kept."""
MAX_HOTWORDS = 300
"""Default bound of ``IntentRecognizer.hotwords`` (``[asr] max_hotwords``)."""

# Hotword tiers, most telling first.
_LISTS, _USER, _BUILTIN = 0, 1, 2


class IntentSource(Enum):
    """Which recognizer produced an intent."""

    TEMPLATE = "template"
    """A hassil sentence template matched."""
    LLM = "llm"
    """The local language model chose the intent."""
    CLOUD = "cloud"
    """The cloud fallback chose the intent."""


class SlotKind(Enum):
    """Where a slot value came from."""

    LIST = "list"
    """A value of a ``values`` list (``value`` is the list's ``out``)."""
    NUMBER = "number"
    """A number of a ``range`` list (``value`` is an int or float)."""
    WILDCARD = "wildcard"
    """Free text matched by a wildcard list (``value`` is the text without punctuation)."""
    FIXED = "fixed"
    """A value the template's ``slots:`` sets; it is not in the input text."""


@dataclass(frozen=True)
class Slot:
    """One named value of an intent."""

    name: str
    """Slot name (``{area:room}`` → ``room``)."""
    entity: str
    """Name of the list the value came from (``{area:room}`` → ``area``)."""
    raw_value: str
    """The words of the input text that matched, as they were written."""
    value: Any
    """The normalized value: a list's ``out``, a number, or the cleaned wildcard text."""
    kind: SlotKind
    """Where the value came from."""
    start: int | None
    """Index of the first character of ``raw_value`` in the input text (None for FIXED)."""
    end: int | None
    """Index just after the last character of ``raw_value`` (None for FIXED)."""


@dataclass(frozen=True)
class Intent:
    """What an utterance asks for."""

    name: str
    """Intent name, e.g. ``HassTurnOn``."""
    text: str
    """The input text, unchanged; slot ranges index into it."""
    slots: tuple[Slot, ...]
    """Slots in order of appearance; FIXED slots last."""
    confidence: float
    """How sure the recognizer is, in [0, 1]; a template match is 1.0."""
    source: IntentSource = IntentSource.TEMPLATE
    """Which recognizer produced it."""

    def slot(self, name: str) -> Slot | None:
        """The first slot called ``name``, or None."""
        return next((s for s in self.slots if s.name == name), None)

    @property
    def slot_values(self) -> dict[str, Any]:
        """Slot name → normalized value (the first one when a name repeats)."""
        values: dict[str, Any] = {}
        for s in self.slots:
            values.setdefault(s.name, s.value)
        return values


class IntentRecognizer:
    """Loaded sentences; ``recognize`` is thread-safe (nothing changes after load).

    An empty recognizer (``IntentRecognizer.empty()``, or a config with no templates and no
    built-in set) recognizes nothing: every text is "not recognized", and it has no hotwords.
    """

    def __init__(self, intents: Intents, patterns: tuple[str, ...], files: tuple[Path, ...], *,
                 data: Mapping[str, Any] | None = None, section: IntentsSection | None = None,
                 source: str | None = None, literal_lists: frozenset[str] = frozenset(),
                 user_lists: frozenset[str] = frozenset()) -> None:
        self._intents = intents
        self._literal_lists = literal_lists
        self._user_lists = user_lists
        self._data = data
        self._section = section or IntentsSection(templates=patterns)
        self._source = source
        site_area = self._section.site_area
        # Home Assistant fills a sentence's missing area from the satellite's area the same way.
        self._context = {"area": {"value": site_area, "text": site_area}} if site_area else None
        self.patterns = patterns
        """The paths or glob patterns this recognizer was loaded from."""
        self.files = files
        """The template files, in load order."""
        # the match of a text never changes (the templates are fixed after load; a reload is a new
        # recognizer), and lru_cache stays consistent across threads
        self._recognize = functools.lru_cache(maxsize=RECENT_TEXTS)(self._match)

    @classmethod
    def load(cls, paths: Sequence[str | Path]) -> IntentRecognizer:
        """Load template files, directories (their ``*.yaml``) or glob patterns.

        Later files extend earlier ones (intents, lists and rules merge by name).
        Raises ConfigError naming the file for a missing file, bad YAML, a wrong
        structure, a template that does not parse or an undefined expansion rule.
        """
        if not paths:
            raise ConfigError("intents", "no template files given")
        return cls.from_section(IntentsSection(templates=tuple(str(p) for p in paths)))

    @classmethod
    def from_section(cls, section: IntentsSection, source: str | None = None) -> IntentRecognizer:
        """The recognizer ``[intents]`` describes: built-in set, template files and lists merged
        (see ``voiced.sentences``); empty when it names no templates and no built-in set.

        ``source`` is the config file, for messages. Raises ConfigError naming key and file.
        """
        if not section.enabled:
            if section.lists or section.list_files:
                log.warning("[intents] gives lists but no templates and no builtin set: intents are off")
            log.info("intents are off: transcripts only, every query is answered intentNotRecognized")
            return cls.empty(section.language or DEFAULT_LANGUAGE)
        sentences = assemble(section, source)
        intents, data = compile_sentences(sentences)
        log.info("loaded %d intents from %d template files%s", len(intents.intents), len(sentences.files),
                 f" and the {section.builtin.value} sentences ({sentences.language})"
                 if section.builtin is not BuiltinSet.NONE else "")
        recognizer = cls(intents, section.templates, sentences.files, data=data, section=section, source=source,
                         literal_lists=sentences.literal_lists, user_lists=sentences.user_lists)
        recognizer._warm_up()
        return recognizer

    def _warm_up(self) -> None:
        """hassil prepares each sentence's prefilter, its number words and each list's index of
        first words on first use: here, not on the first utterances (~20 ms with the built-in
        set, up to ~80 ms more with 500 names, whose per-domain lists each get an index)."""
        from hassil import TextSlotList

        self.recognize("set it to fifty percent")
        lists = [*self._intents.slot_lists.values()]
        lists += [sl for intent in self._intents.intents.values() for data in intent.data
                  for sl in data.slot_lists.values()]
        for slot_list in {id(sl): sl for sl in lists if isinstance(sl, TextSlotList)}.values():
            slot_list.get_candidates("a")

    @classmethod
    def empty(cls, language: str = DEFAULT_LANGUAGE) -> IntentRecognizer:
        """A recognizer with no intents: recognizes nothing, boosts nothing."""
        from hassil import Intents

        data = {"language": language, "intents": {}}
        return cls(Intents.from_dict(data), (), (), data=data, section=IntentsSection(language=language))

    def reload(self) -> IntentRecognizer:
        """Load the same section again (a new recognizer; this one is unchanged)."""
        return IntentRecognizer.from_section(self._section, self._source)

    @property
    def enabled(self) -> bool:
        """False for an empty recognizer (intents are off)."""
        return bool(self._intents.intents)

    @property
    def builtin(self) -> BuiltinSet:
        """The built-in sentence set merged under the template files."""
        return self._section.builtin

    @property
    def language(self) -> str:
        """The templates' language code."""
        return str(self._intents.language)

    @property
    def templates(self) -> Intents:
        """The parsed hassil templates (intents, lists, rules), e.g. for the LLM's schema."""
        return self._intents

    @property
    def data(self) -> Mapping[str, Any]:
        """The merged hassil document (built-in set, files and lists), e.g. for the cloud's catalog."""
        return self._data if self._data is not None else {"language": self.language, "intents": {}}

    @property
    def intent_names(self) -> tuple[str, ...]:
        """Every intent the templates can produce, sorted."""
        return tuple(sorted(self._intents.intents))

    def recognize(self, text: str, only: Iterable[str] | None = None) -> Intent | None:
        """The best matching intent for ``text``, or None when no template matches (the last
        ``RECENT_TEXTS`` texts' matches are kept). ``only``: the intents that may match (Hermes'
        intentFilter), chosen among before the best is taken, as Rhasspy filters: the best of
        all templates may be another intent while an allowed one matches too."""
        if only is not None:
            return self._match(text, frozenset(only))
        return self._recognize(text) if len(text) <= RECENT_TEXT_CHARS else self._match(text)

    def _match(self, text: str, only: frozenset[str] | None = None) -> Intent | None:
        from hassil import recognize_best

        templates = self._intents
        if only is not None:
            templates = replace(templates, intents={k: v for k, v in templates.intents.items() if k in only})
        if not text.strip() or not templates.intents:
            return None
        # As Home Assistant's agent: the user's own sentences first, then results with a name.
        result = recognize_best(text, templates, intent_context=self._context,
                                best_metadata_key=USER_SENTENCE, best_slot_name="name")
        if result is None:
            return None
        return Intent(
            name=result.intent.name,
            text=text,
            slots=tuple(self._slots(result)),
            confidence=1.0,
            source=IntentSource.TEMPLATE,
        )

    def sentence_space(self) -> SentenceSpace:
        """Every sentence the templates can produce, as a word automaton (for intent-aware
        endpointing); FINAL only for texts this recognizer matches too."""
        from voiced.sentencespace import SentenceSpace

        # stripped as transcripts are: the intent stage then finds the match the decoder made
        return SentenceSpace.from_intents(self._intents).with_verifier(
            lambda text: self.recognize(text.strip()) is not None)

    def list_phrases(self) -> list[str]:
        """The phrases of the config's lists (``[intents.lists]`` and list files: names, areas…),
        each once: the words only this home uses, e.g. for Whisper's prompt."""
        from hassil import TextSlotList
        from hassil.expression import TextChunk

        phrases = (" ".join(value.text_in.text.split()) for name, slot_list in self._intents.slot_lists.items()
                   if name in self._literal_lists and isinstance(slot_list, TextSlotList)
                   for value in slot_list.values if isinstance(value.text_in, TextChunk))
        return list(dict.fromkeys(p for p in phrases if p))

    def vocabulary(self) -> list[str]:
        """Words of the templates and phrases of the list values, lower-case, each once."""
        return [phrase for phrase, _ in self._ranked_phrases()]

    def hotwords(self, limit: int = MAX_HOTWORDS) -> list[str]:
        """At most ``limit`` phrases for the recognizer to boost, the most telling first.

        First the values of the config's lists (names, areas: words only this home uses),
        then the words and list phrases of the user's templates, then those of the built-in
        set, the words most of its sentences use first. Boosting every word of hundreds of
        built-in sentences would favour common words everywhere, hence the bound (the beam
        search's speed does not depend on it: see ``voiced bench intents``).
        """
        ranked = self._ranked_phrases()
        ranked.sort(key=lambda item: item[1])  # stable: ties keep first-seen order
        return [phrase for phrase, _ in ranked[:max(0, limit)]]

    def _ranked_phrases(self) -> list[tuple[str, tuple[int, int]]]:
        """Every phrase once, first-seen order, with its rank key (tier, -uses)."""
        from hassil import TextSlotList
        from hassil.expression import TextChunk

        builtin = self.builtin is not BuiltinSet.NONE
        uses: dict[str, int] = {}
        tier: dict[str, int] = {}

        def add(phrase: str, level: int) -> None:
            uses[phrase] = uses.get(phrase, 0) + 1
            tier[phrase] = min(tier.get(phrase, level), level)

        rules = self._intents.expansion_rules
        for intent in self._intents.intents.values():
            for data in intent.data:
                level = _BUILTIN if builtin and not (data.metadata or {}).get(USER_SENTENCE) else _USER
                local = {**rules, **data.expansion_rules}
                for sentence in data.sentences:
                    for word in dict.fromkeys(w for chunk in _text_chunks(sentence.expression, local, set())
                                              for w in chunk.split()):
                        add(word, level)
        for name, slot_list in self._intents.slot_lists.items():
            if not isinstance(slot_list, TextSlotList):
                continue
            level = (_LISTS if name in self._literal_lists
                     else _BUILTIN if builtin and name not in self._user_lists else _USER)
            for value in slot_list.values:
                chunks = list(_text_chunks(value.text_in, rules, set()))
                if isinstance(value.text_in, TextChunk):
                    chunks = [" ".join(chunks)]  # a plain value is one phrase: "living room"
                else:
                    chunks = [w for c in chunks for w in c.split()]  # a template's words, not a fake phrase
                for phrase in chunks:
                    if phrase:
                        add(phrase, level)
        # "s" of "light[s]", "-" of "( |-)": pieces of words, not words worth a boost
        return [(p, (tier[p], -uses[p] if tier[p] == _BUILTIN else 0)) for p in uses
                if len(p) > 1 and any(c.isalpha() for c in p)]

    def _slots(self, result: RecognizeResult) -> Iterator[Slot]:
        from hassil import RangeSlotList, WildcardSlotList

        lists = dict(self._intents.slot_lists)
        lists.update(result.intent_data.slot_lists)
        entity_of = _list_names_by_slot(result, self._intents.expansion_rules)
        fixed: list[Slot] = []
        for e in result.entities_list:
            if e.text_span is None:
                # Set by the template's ``slots:``, not matched in the text.
                fixed.append(Slot(e.name, e.name, str(e.value), e.value, SlotKind.FIXED, None, None))
                continue
            start, end = e.text_span
            entity = entity_of.get(e.name, e.name)
            slot_list = lists.get(entity)
            value: Any = e.value
            if e.is_wildcard or isinstance(slot_list, WildcardSlotList):
                kind, value = SlotKind.WILDCARD, e.text_clean
            elif isinstance(slot_list, RangeSlotList) or isinstance(value, (int, float)):
                kind = SlotKind.NUMBER
                if isinstance(value, float) and value.is_integer():
                    value = int(value)  # "21" comes back as 21.0, "twenty one" as 21
            else:
                kind = SlotKind.LIST
            yield Slot(e.name, entity, result.original_text[start:end], value, kind, start, end)
        yield from fixed


def _text_chunks(expr: Expression, rules: Mapping[str, Any], active: set[str]) -> Iterator[str]:
    from hassil.expression import TextChunk
    from hassil.util import remove_punctuation

    for e in _walk(expr, rules, active):
        if isinstance(e, TextChunk):
            text = remove_punctuation(e.text).strip().lower()
            if text:
                yield text


def _list_names_by_slot(result: RecognizeResult, rules: Mapping[str, Any]) -> dict[str, str]:
    """Slot name → list name in the matched template (``{area:room}`` → room: area)."""
    from hassil.expression import ListReference

    sentence = result.intent_sentence
    if sentence is None:
        return {}
    merged = {**rules, **result.intent_data.expansion_rules}
    return {
        ref.slot_name: ref.list_name for ref in _walk(sentence.expression, merged, set()) if isinstance(ref, ListReference)
    }
