"""onnxruntime-genai itself, in this process: providers, guided generation, cancelling.

The model has random weights, so whatever it says is noise: guidance is what makes each
answer one of the allowed ones, and these tests check exactly that.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from voiced.errors import ModelError
from voiced.llm.catalog import IntentCatalog
from voiced.llm.config import Provider
from voiced.llm.prefix import PrefixCache
from voiced.llm.prompt import build_prompt
from voiced.llm.runtime import Finish, Job, LoadedModel, open_model, run_generation
from voiced.llm.schema import AnswerKind, answer_schema, parse_answer

UTTERANCES = (
    "set the bedroom lights to 40 percent",
    "please make the kitchen a bit brighter",
    "turn the big lamp in the living room off",
    "what is the weather tomorrow",
)


def _job(catalog: IntentCatalog, text: str, *, guided: bool = True, temperature: float = 0.0,
         max_new_tokens: int = 200) -> Job:
    schema = json.dumps(answer_schema(catalog, text)) if guided else None
    return Job(1, build_prompt(catalog, text), schema, max_new_tokens, temperature)


def test_auto_falls_back_to_the_cpu_when_no_gpu_package_is_installed(tiny_model: Path) -> None:
    import onnxruntime_genai as og

    if og.is_cuda_available() or og.is_dml_available():
        pytest.skip("a GPU build of onnxruntime-genai is installed")
    loaded = open_model(tiny_model, Provider.AUTO)
    choice = loaded.choice
    assert choice.provider is Provider.CPU and str(loaded.model.device_type) == "CPU"
    assert [p for p, _ in choice.skipped] == [Provider.CUDA, Provider.DML]
    assert "onnxruntime-genai-cuda" in choice.describe() and choice.describe().startswith("cpu (asked: auto")
    assert loaded.guidance and loaded.chat_template and loaded.context_length == 4096


def test_a_gpu_that_fails_to_load_falls_back_to_the_cpu(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime_genai as og

    if og.is_cuda_available():
        pytest.skip("onnxruntime-genai-cuda is installed")
    # The probe says yes, so the real CUDA load is attempted and fails: its library is absent.
    monkeypatch.setattr(og, "is_cuda_available", lambda: True)
    choice = open_model(tiny_model, Provider.CUDA).choice
    assert choice.provider is Provider.CPU and choice.requested is Provider.CUDA
    ((provider, reason),) = choice.skipped
    assert provider is Provider.CUDA and reason.startswith("failed: ") and "cuda" in reason.lower()


def test_a_folder_without_genai_config_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="genai_config.json"):
        open_model(tmp_path)
    (tmp_path / "genai_config.json").write_text('{"model": {"decoder": {"filename": "model.onnx"}}}')
    with pytest.raises(ModelError, match="model.onnx"):
        open_model(tmp_path)


@pytest.mark.parametrize("cached", [False, True], ids=["fresh", "prefix-cache"])
def test_guided_answers_always_validate_even_from_random_weights(loaded: LoadedModel, catalog: IntentCatalog,
                                                                 cached: bool) -> None:
    cache = PrefixCache(loaded) if cached else None
    kinds = []
    streamed: list[int] = []
    for text, temperature in itertools.product(UTTERANCES, (0.0, 1.0, 2.0, 2.0, 2.0)):
        streamed.clear()
        end = run_generation(loaded, _job(catalog, text, temperature=temperature), lambda: False, streamed.append, cache)
        assert end.finish is Finish.EOS, end
        parsed = parse_answer(end.text, catalog, text)
        assert parsed.kind is not AnswerKind.INVALID, (end.text, parsed.problem)
        assert end.tokens == len(streamed) > 0 and end.prompt_tokens > 100
        kinds.append(parsed.kind)
    assert AnswerKind.INTENT in kinds  # sampling at temperature 2 reaches past "none"


def test_unguided_random_weights_give_noise_that_the_check_refuses(loaded: LoadedModel, catalog: IntentCatalog) -> None:
    text = UTTERANCES[0]
    end = run_generation(loaded, _job(catalog, text, guided=False, max_new_tokens=24), lambda: False)
    assert parse_answer(end.text, catalog, text).kind is AnswerKind.INVALID


def test_an_answer_cut_short_at_max_new_tokens_says_so(loaded: LoadedModel, catalog: IntentCatalog) -> None:
    end = run_generation(loaded, _job(catalog, UTTERANCES[0], max_new_tokens=3), lambda: False)
    assert end.finish is Finish.MAX_TOKENS and end.tokens == 3
    assert parse_answer(end.text, catalog, UTTERANCES[0]).kind is AnswerKind.INVALID


def test_cancelling_stops_between_steps(loaded: LoadedModel, catalog: IntentCatalog) -> None:
    asked = itertools.count()
    # prompt chunks are checked first, then every token: cancel after the third token
    chunks = -(-int(run_generation(loaded, _job(catalog, UTTERANCES[0]), lambda: False).prompt_tokens) // 64)
    end = run_generation(loaded, _job(catalog, UTTERANCES[0]), lambda: next(asked) >= chunks + 3)
    assert end.finish is Finish.CANCELLED and end.tokens == 3
    before_prompt = run_generation(loaded, _job(catalog, UTTERANCES[0]), lambda: True)
    assert before_prompt.finish is Finish.CANCELLED and before_prompt.tokens == 0


def test_a_model_without_chat_template_gets_a_plain_prompt(tiny_model: Path, tmp_path: Path, catalog: IntentCatalog) -> None:
    folder = tmp_path / "plain"
    shutil.copytree(tiny_model, folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    loaded = open_model(folder, Provider.CPU)
    assert not loaded.chat_template
    end = run_generation(loaded, _job(catalog, UTTERANCES[1]), lambda: False)
    assert end.finish is Finish.EOS and parse_answer(end.text, catalog, UTTERANCES[1]).kind is not AnswerKind.INVALID


def test_a_prompt_longer_than_the_context_is_an_error_not_a_crash(tiny_model: Path, tmp_path: Path,
                                                                   catalog: IntentCatalog) -> None:
    folder = tmp_path / "short"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["context_length"] = 64
    (folder / "genai_config.json").write_text(json.dumps(config))
    end = run_generation(open_model(folder, Provider.CPU), _job(catalog, UTTERANCES[0]), lambda: False)
    assert end.finish is Finish.ERROR and "context of 64" in (end.error or "")
