"""A tiny onnxruntime-genai model folder with random weights, built offline.

A byte-level BPE tokenizer (``tokenizers``) is trained on a few strings, a 2-layer Llama
with that vocabulary is made with random weights (``transformers``, ``torch``), and
onnxruntime-genai's own model builder turns it into a genai folder: ``genai_config.json``,
``model.onnx`` (+ ``.data``), ``tokenizer.json``, ``tokenizer_config.json`` and a chat
template. Nothing is downloaded (``HF_HUB_OFFLINE=1``).

    python -m tests.llm.tinymodel OUT_DIR [--hidden 64] [--layers 2] [--no-chat-template]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "build_tiny_model"]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML, as Qwen uses."""

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

_CORPUS = (
    '{"intent": "HassTurnOn", "slots": {"name": "kitchen light"}}',
    '{"intent": "HassLightSet", "slots": {"area": "living_room", "brightness": 40}}',
    '{"intent": null, "slots": {}}',
    "turn on the light in the living room, switch off the bedroom lamp, set the kitchen to 40 percent",
    "You turn a spoken smart-home command into JSON. Answer with one JSON object using only the intents below.",
)


def build_tiny_model(out: Path, *, hidden: int = 64, layers: int = 2, vocab_size: int = 400,
                     chat_template: bool = True, seed: int = 0) -> Path:
    """Build the folder at ``out`` (replaced if it exists) and return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="tinyllm-") as work:
        src = Path(work) / "hf"
        tok = Tokenizer(models.BPE())
        # Byte-level: every string has tokens, as guidance needs for any JSON it allows.
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL), show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(_CORPUS * 4, trainer)
        hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIAL[0], eos_token=SPECIAL[2],
                                         pad_token=SPECIAL[0])
        if chat_template:
            hf_tok.chat_template = CHAT_TEMPLATE
        hf_tok.save_pretrained(src)
        torch.manual_seed(seed)
        config = LlamaConfig(
            vocab_size=tok.get_vocab_size(), hidden_size=hidden, intermediate_size=2 * hidden,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
            bos_token_id=hf_tok.bos_token_id, eos_token_id=hf_tok.eos_token_id, pad_token_id=hf_tok.pad_token_id,
            tie_word_embeddings=False,
        )
        LlamaForCausalLM(config).save_pretrained(src)
        if out.exists():
            shutil.rmtree(out)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(Path(work) / "hf-home")}
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(src), "-o", str(out),
               "-p", "fp32", "-e", "cpu", "-c", str(Path(work) / "cache")]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"onnxruntime-genai model builder failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--no-chat-template", action="store_true")
    args = parser.parse_args(argv)
    print(build_tiny_model(args.out, hidden=args.hidden, layers=args.layers, chat_template=not args.no_chat_template))
    return 0


if __name__ == "__main__":
    sys.exit(main())
