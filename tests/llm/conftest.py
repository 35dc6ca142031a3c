"""The tiny genai model (built once per session) and the intents the LLM answers with."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_intents import LIGHTS, LISTS
from voiced.intents import IntentRecognizer
from voiced.llm.catalog import IntentCatalog
from voiced.llm.config import Provider
from voiced.llm.runtime import LoadedModel, open_model

BUILD_DEPS = ("onnxruntime_genai", "transformers", "torch", "tokenizers", "onnx_ir")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Llama folder made by onnxruntime-genai's builder (about 10 s, once per run)."""
    for module in BUILD_DEPS:
        pytest.importorskip(module, reason=f"{module} is needed to build the test LLM (pip install -e '.[test]')")
    from tests.llm.tinymodel import build_tiny_model
    from tests.worker_share import built_once

    return built_once(tmp_path_factory, "tiny-llm", build_tiny_model)


@pytest.fixture(scope="session")
def loaded(tiny_model: Path) -> LoadedModel:
    """The tiny model opened in this process, on the CPU with one thread."""
    return open_model(tiny_model, Provider.CPU, threads=1)


@pytest.fixture(scope="session")
def recognizer(tmp_path_factory: pytest.TempPathFactory) -> IntentRecognizer:
    folder = tmp_path_factory.mktemp("templates")
    (folder / "lights.yaml").write_text(LIGHTS)
    (folder / "lists.yaml").write_text(LISTS)
    return IntentRecognizer.load([folder / "*.yaml"])


@pytest.fixture(scope="session")
def catalog(recognizer: IntentRecognizer) -> IntentCatalog:
    return IntentCatalog.from_recognizer(recognizer)
