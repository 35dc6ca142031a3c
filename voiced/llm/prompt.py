"""The prompt: what the intents are, what their slots may hold, and the utterance.

The prompt only guides; the schema (``voiced.llm.schema``) is what holds the model to the
known set. Lists longer than :data:`MAX_LISTED_VALUES` are shown in part, to keep the
prompt (and so the time to the first token) short on a small CPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from voiced.intents import SlotKind
from voiced.llm.catalog import IntentCatalog, IntentSpec, SlotDomain

__all__ = ["MAX_LISTED_VALUES", "Prompt", "build_prompt"]

MAX_LISTED_VALUES = 40
"""Values of one list shown in the prompt; the schema still allows all of them."""

_INSTRUCTIONS = """\
You turn a spoken smart-home command into JSON. Spoken text may be misheard: choose the closest intent.
Answer with one JSON object: {{"intent": INTENT, "slots": {{SLOT: VALUE}}}}, using only the intents, \
slots and values below. Leave out slots the command does not mention.
If no intent fits, answer {{"intent": null, "slots": {{}}}}.

Intents:
{intents}"""


@dataclass(frozen=True)
class Prompt:
    """One request to the model, as chat messages."""

    system: str
    user: str

    def messages(self) -> list[dict[str, str]]:
        """Chat messages for the model's chat template."""
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]

    def plain(self) -> str:
        """The same as one text, for a model without a chat template."""
        return f"{self.system}\n\nCommand: {self.user}\nJSON: "


def build_prompt(catalog: IntentCatalog, text: str) -> Prompt:
    """The prompt for ``text`` with the intents of ``catalog``."""
    lines = "\n".join(_describe(spec) for spec in catalog.intents)
    return Prompt(_INSTRUCTIONS.format(intents=lines), text.strip())


def _describe(spec: IntentSpec) -> str:
    line = f"- {spec.name}"
    if spec.examples:
        line += " (e.g. " + "; ".join(f'"{e}"' for e in spec.examples) + ")"
    if not spec.slots:
        return line + ": no slots"
    parts = [f"{slot.name} = " + " or ".join(_values(d) for d in slot.domains) for slot in spec.slots]
    return line + ": " + "; ".join(parts)


def _values(domain: SlotDomain) -> str:
    if domain.kind is SlotKind.WILDCARD:
        return "words of the command"
    if domain.kind is SlotKind.NUMBER and domain.numbers is not None:
        r = domain.numbers
        step = f" in steps of {r.step}" if r.step > 1 else ""
        return f"a number from {r.start} to {r.stop}{step}"
    shown = []
    for v in domain.values[:MAX_LISTED_VALUES]:
        said = [p for p in v.phrases if p != str(v.value).lower()]
        shown.append(json.dumps(v.value) + (f" ({', '.join(said)})" if said else ""))
    more = len(domain.values) - MAX_LISTED_VALUES
    return "one of " + ", ".join(shown) + (f" and {more} more" if more > 0 else "")
