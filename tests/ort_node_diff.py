"""Which node's output first differs between two onnxruntime versions, on the same input: a diagnostic.

    python -m tests.ort_node_diff MODEL.onnx FILE.wav --side DIR   # DIR: an onnxruntime installed with --target

MODEL is a Whisper encoder (fed what voiced feeds it for FILE). Each onnxruntime runs in a child process
with graph optimizations off (every node runs as written, no fused kernels) and one thread, and
reports a digest of every node's output; the first node whose inputs are identical in both but whose
output differs is the kernel that changed. Its output is then compared value by value. Prints JSON.

Found with it (tiny.en INT8 encoder, onnxruntime 1.28.0 vs 1.32.0, glitteringplain_07_morris_0054): 271 of
388 node outputs differ, and LayerNormalization is the only kernel whose output differs on identical
inputs (193158/222336 values of the first one, max 6.7e-6); every DynamicQuantizeLinear after it then
quantizes different floats. With LayerNormalization written out (quantize/layernorm.py): none of 469 differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _session(model_path: str, keep: list[str] | None):
    """A session whose outputs are every node output with a known type (or just ``keep``)."""
    import onnx
    import onnxruntime as ort

    model = onnx.shape_inference.infer_shapes(onnx.load(model_path))
    typed = {v.name: v for v in [*model.graph.value_info, *model.graph.output]}
    names = [o for node in model.graph.node for o in node.output if o in typed and (keep is None or o in keep)]
    del model.graph.output[:]
    model.graph.output.extend(typed[n] for n in names)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return model, names, session


def child(model_path: str, feeds_path: str, keep: str | None, save: str | None) -> None:
    import onnxruntime as ort

    model, names, session = _session(model_path, [keep] if keep else None)
    values = session.run(names, dict(np.load(feeds_path)))
    if save:
        np.save(save, values[0])
    producers = {o: (node.op_type, node.name, list(node.input)) for node in model.graph.node for o in node.output}
    rows = [{"output": n, "op": producers[n][0], "node": producers[n][1], "inputs": producers[n][2],
             "digest": hashlib.sha1(np.ascontiguousarray(v).tobytes()).hexdigest()} for n, v in zip(names, values)]
    print(json.dumps({"onnxruntime": ort.__version__, "rows": rows}))


def _run(side: Path | None, *args: str) -> dict:
    path = [str(side)] if side else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-m", "tests.ort_node_diff", "--child", *args], capture_output=True,
                         text=True, check=True, cwd=REPO, env=env)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("wav", nargs="?")
    parser.add_argument("--side", type=Path, help="directory of the other onnxruntime (pip install --target)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--feeds", help=argparse.SUPPRESS)
    parser.add_argument("--keep", help=argparse.SUPPRESS)
    parser.add_argument("--save", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.feeds, args.keep, args.save)
        return
    from voiced.asr.whisper import encoder_input, log_mel
    from voiced.audio.wav import read_wav

    audio, _ = read_wav(Path(args.wav))
    mel, _ = encoder_input(log_mel(audio[:, 0], 80), 1000)
    with tempfile.TemporaryDirectory() as tmp:
        feeds = str(Path(tmp) / "feeds.npz")
        np.savez(feeds, mel=np.ascontiguousarray(mel.T[np.newaxis]))
        ours, theirs = _run(None, args.model, "--feeds", feeds), _run(args.side, args.model, "--feeds", feeds)
        same = {a["output"] for a, b in zip(ours["rows"], theirs["rows"]) if a["digest"] == b["digest"]}
        graph_inputs = {"mel"}
        differ = [a for a in ours["rows"] if a["output"] not in same]
        # the kernels that changed: differing output although every computed input is identical
        origins = [a for a in differ if all(i in same or i in graph_inputs or i not in {r["output"] for r in ours["rows"]}
                                            for i in a["inputs"])]
        report: dict = {"onnxruntime": [ours["onnxruntime"], theirs["onnxruntime"]], "nodes": len(ours["rows"]),
                        "differing_outputs": len(differ), "first_differing": [(a["op"], a["node"]) for a in differ[:3]],
                        "changed_kernels": sorted({a["op"] for a in origins})}
        if origins:
            first = origins[0]["output"]
            a_path, b_path = str(Path(tmp) / "a.npy"), str(Path(tmp) / "b.npy")
            _run(None, args.model, "--feeds", feeds, "--keep", first, "--save", a_path)
            _run(args.side, args.model, "--feeds", feeds, "--keep", first, "--save", b_path)
            a, b = np.load(a_path), np.load(b_path)
            report["first_changed"] = {"node": origins[0]["node"], "op": origins[0]["op"], "shape": list(a.shape),
                                       "differing_values": f"{int((a != b).sum())}/{a.size}",
                                       "max_abs_difference": float(np.abs(a - b).max())}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
