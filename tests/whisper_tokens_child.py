"""Child process: voiced's Whisper tokens for some WAV files, under whatever onnxruntime PYTHONPATH finds first.

    python -m tests.whisper_tokens_child MODEL_DIR FILE.wav ...

prints one JSON object: the onnxruntime and kaldi-native-fbank versions and files actually imported,
and ``tokens`` {file name: [token, ...]}. tests/test_whisper.py runs it on sherpa-onnx's onnxruntime.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import kaldi_native_fbank
import onnxruntime

from voiced.asr.whisper import WhisperRecognizer
from voiced.audio.wav import read_wav


def main(argv: list[str]) -> None:
    recognizer = WhisperRecognizer.load(argv[0])  # one thread, as the parent's sherpa-onnx
    tokens = {}
    for name in argv[1:]:
        audio, _ = read_wav(Path(name))
        tokens[Path(name).name] = list(recognizer.recognize(audio[:, 0]).tokens)
    print(json.dumps({"onnxruntime": onnxruntime.__version__, "onnxruntime_file": onnxruntime.__file__,
                      "kaldi_native_fbank": kaldi_native_fbank.__version__, "tokens": tokens}))


if __name__ == "__main__":
    main(sys.argv[1:])
