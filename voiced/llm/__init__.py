"""Local LLM intent fallback (onnxruntime-genai) for utterances no template matches.

    llm = LlmFallback.from_recognizer(config.llm, recognizer)   # cheap: nothing loaded
    llm.preload()                # only with [llm] preload = true, before READY
    intent = llm.recognize(text) # Intent(source=IntentSource.LLM) or None, within the budget

Modules: ``config`` ([llm] section), ``catalog`` (templates → intents, slots, values),
``prompt``, ``schema`` (answer schema and its check), ``runtime`` (onnxruntime-genai:
providers, guided generation; worker process only), ``prefix`` (the processed prompt kept
between requests), ``worker`` (the process and the budget), ``fallback`` (all of it behind
``recognize``).
"""

from voiced.llm.catalog import IntentCatalog
from voiced.llm.config import LlmConfig, Provider
from voiced.llm.fallback import LlmAnswer, LlmFallback, LlmOutcome
from voiced.llm.schema import LLM_CONFIDENCE

__all__ = ["LLM_CONFIDENCE", "IntentCatalog", "LlmAnswer", "LlmConfig", "LlmFallback", "LlmOutcome", "Provider"]
