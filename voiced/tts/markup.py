"""Text as a listener should hear it: Markdown marks and pictographs dropped before phonemes.

Replies written by a language model (Home Assistant's LLM agents over Wyoming, an automation
publishing to ``hermes/tts/say``) come with Markdown and emoji, and espeak-ng reads what it
finds: ``**Kitchen**`` as "asterisk asterisk kitchen asterisk asterisk", ``# Weather`` as
"hash weather", a link's address letter by letter, 🙂 as "slightly smiling face", ★ and ✓ as
"symbol two six zero five" and "symbol two seven one three". Here the marks go and what they
mark stays: emphasis, inline code and strikethrough keep their words, a link its label, an
image its description; heading, quote, bullet and fence marks go, and a heading or list item
without closing punctuation is ended with a full stop, so each is spoken as a sentence of its
own instead of running into the next line. Numbered list items keep their numbers. Text
without Markdown is left alone: a lone ``_`` or ``*`` between words, ``C#``, ``5 * 3`` and
symbols espeak-ng names well (°, €, ±, ©, ™) are kept.

Streamed text (``synthesize-chunk``) arrives sentence by sentence, so a mark may come without
its partner; a leftover ``**``, ``__``, ``~~`` or backtick is dropped on its own.

Tags go too: SSML, which Rhasspy's ``hermes/tts/say`` clients may send (``<speak>``, ``<break/>``,
``<say-as>``; espeak-ng read "speak hello break time equals one s slash"), and the HTML an LLM
puts in a table (``<br>``). A break or line break becomes a comma, the end of a paragraph or
sentence element a full stop; entities (``&amp;``) are the characters they stand for.
"""

from __future__ import annotations

import html
import re

__all__ = ["speakable"]

_FENCE = re.compile(r"^[ \t]*(?:`{3,}|~{3,})[^\n`]*$", re.MULTILINE)
_RULE = re.compile(r"^[ \t]*(?:[-*_][ \t]*){3,}$", re.MULTILINE)
_TABLE_RULE = re.compile(r"^[ \t]*(?:\|[ \t]*)?:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$", re.MULTILINE)
# Spans are bounded (500 characters of marked text, 2,000 of address), and a run of blanks is
# tried from its start only, so that text full of unpaired marks or blanks costs linear time.
_IMAGE = re.compile(r"!\[([^\]\n]{0,500})\]\([^)\n]{0,2000}\)")
_LINK = re.compile(r"\[([^\]\n]{0,500})\]\([^)\n]{0,2000}\)")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_BLOCK_MARK = re.compile(r"^[ \t]*(?:>[ \t]*)*(?:#{1,6}[ \t]+|[-*+•◦‣▪][ \t]+)(?=\S)", re.MULTILINE)
_QUOTE_MARK = re.compile(r"^[ \t]*(?:>[ \t]?)+", re.MULTILINE)
_NUMBERED = re.compile(r"^[ \t]*\d{1,3}[.)][ \t]+(?=\S)")
_CLOSING_HASHES = re.compile(r"(?<![ \t])[ \t]+#+[ \t]*$")
_STRONG = re.compile(r"(\*\*|__)(?=\S)([^\n]{1,500}?)(?<=\S)\1")
_STAR_EMPHASIS = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]{0,500}?[^\s*])\*(?![\w*])")
_UNDERSCORE_EMPHASIS = re.compile(r"(?<![\w_])_(?=[^\s_])([^_\n]{0,500}?[^\s_])_(?![\w_])")
_STRIKE = re.compile(r"~~(?=\S)([^\n]{1,500}?)(?<=\S)~~")
_LEFTOVER = re.compile(r"\*\*+|__+|~~+|`+|(?<=\w)\*(?!\w)|(?<!\w)\*(?=\w)")
_SPACES = re.compile(r"[ \t]{2,}")
# Attributes are name=value pairs, as SSML's and an LLM's HTML have them: "if a<b and c>d" is no tag.
_TAG = re.compile(r"(?<![ \t])([ \t]*)</?([A-Za-z][\w:.-]{0,30})"
                  r"""(?:\s+[\w:.-]{1,40}\s*=\s*(?:"[^"\n]{0,500}"|'[^'\n]{0,500}'|[^\s<>"'=]{1,200})){0,20}\s*/?>""")
_ENTITY = re.compile(r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z]{2,8});")
_PAUSE_TAGS = frozenset({"break", "br"})
_END_TAGS = frozenset({"p", "s", "li", "div", "paragraph", "sentence", "tr", "h1", "h2", "h3", "h4", "h5", "h6"})
"""Closing one ends a sentence (as its own element does in SSML and HTML)."""
_ENDS_SENTENCE = frozenset(".!?;:,…。！？")

# Pictographs (emoji and the symbols they grew from) and the marks that shape them: espeak-ng
# reads their Unicode names, or "symbol" and the code point. Kept: letterlike and technical
# symbols it names well (°, ©, ™, €, ±, ∞).
_PICTOGRAPHS = re.compile(
    "["
    "\u2190-\u21ff"  # arrows
    "\u231a\u231b\u2328\u23cf\u23e9-\u23f3\u23f8-\u23fa"  # the emoji among the technical symbols
    "\u25a0-\u25ff"  # geometric shapes (■ ▪ ▶ ●, often bullets)
    "\u2600-\u27bf"  # miscellaneous symbols and dingbats (☀ ★ ♥ ✓ ✅ ❤)
    "\u27f0-\u27ff\u2900-\u297f"  # supplemental arrows
    "\u2b00-\u2bff"  # symbols and arrows (⬅ ⭐ ⭕)
    "\u3030\u303d\u3297\u3299"
    "\ufe0e\ufe0f\u200d\u20e3"  # text/emoji presentation, zero-width joiner, keycap
    "\U0001f000-\U0001faff"  # emoji blocks, skin tones and flags' regional indicators
    "\U000e0020-\U000e007f"  # tags of subdivision flags
    "]+"
)


def _end_line(line: str) -> str:
    line = _PICTOGRAPHS.sub(" ", line).rstrip()  # "- Hall 💡" ends after "Hall"
    return line if not line or line[-1] in _ENDS_SENTENCE else line + "."


def _blocks(text: str) -> str:
    """Heading, quote and bullet marks dropped; the lines they began, and numbered items, ended as sentences."""
    lines = []
    for line in text.split("\n"):
        marked = _BLOCK_MARK.match(line)
        if marked:
            line = _CLOSING_HASHES.sub("", line[marked.end():])
            line = _end_line(line)
        else:
            line = _QUOTE_MARK.sub("", line)
            if _NUMBERED.match(line):
                line = _end_line(line)
        lines.append(line)
    return "\n".join(lines)


def _tag(match: re.Match[str]) -> str:
    """A pause or a sentence end where the tag meant one, else nothing (``a<b>c</b>`` is one word)."""
    lead, name = match.group(1), match.group(2).lower()
    before = match.string[:match.start()].rstrip()
    ended = not before or before[-1] in _ENDS_SENTENCE
    if name in _PAUSE_TAGS:
        return lead or " " if ended else ", "
    if name in _END_TAGS and match.group(0).lstrip().startswith("</"):
        return lead or " " if ended else ". "
    return lead


def speakable(text: str) -> str:
    """``text`` without Markdown marks, tags and pictographs, as it should be read aloud (see the module)."""
    text = _AUTOLINK.sub(r"\1", text)
    text = _TAG.sub(_tag, text)
    text = _ENTITY.sub(lambda m: html.unescape(m.group(0)), text)
    text = _FENCE.sub("", text)
    text = _RULE.sub("", text)
    text = _TABLE_RULE.sub("", text)
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _blocks(text)
    text = _PICTOGRAPHS.sub(" ", text)
    for _ in range(2):  # **bold *italic* inside**
        text = _STRONG.sub(r"\2", text)
        text = _STAR_EMPHASIS.sub(r"\1", text)
        text = _UNDERSCORE_EMPHASIS.sub(r"\1", text)
        text = _STRIKE.sub(r"\1", text)
    text = _LEFTOVER.sub("", text)
    return _SPACES.sub(" ", text)
