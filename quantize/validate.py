"""FP32 vs INT8 on held-back data: output errors, task agreement, sizes, speed; the report.

The report is JSON (written beside the output and into the manifest) plus a readable
summary. A run fails (exit status 1) when task agreement is below ``min_agreement``, or
when labelled clips show top-1 accuracy dropping by more than ``max_accuracy_drop`` points.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from quantize.calibration import Feeds
from quantize.progress import Progress
from quantize.tasks import TaskResult, cosine

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["NumericResult", "Report", "SpeedResult", "compare_outputs", "judge", "measure_speed"]


@dataclass(frozen=True)
class NumericResult:
    """Per output: max and mean absolute error and cosine similarity over every held-back sample."""

    samples: int
    outputs: dict[str, dict[str, float]]

    @property
    def first(self) -> dict[str, float]:
        return next(iter(self.outputs.values()), {})


@dataclass(frozen=True)
class SpeedResult:
    """Mean time per call with 1 intra-op thread, FP32 and INT8 calls interleaved on the same inputs."""

    calls: int
    fp32_ms: float
    int8_ms: float

    @property
    def ratio(self) -> float:
        """FP32 time / INT8 time: above 1 means INT8 is faster."""
        return self.fp32_ms / self.int8_ms if self.int8_ms > 0 else float("nan")


def compare_outputs(fp32: ort.InferenceSession, int8: ort.InferenceSession, feeds: Sequence[Feeds],
                    label: str = "compare outputs") -> NumericResult:
    """Run both models on identical inputs and compare every output."""
    names = [o.name for o in fp32.get_outputs()]
    got_a: dict[str, list[np.ndarray]] = {n: [] for n in names}
    got_b: dict[str, list[np.ndarray]] = {n: [] for n in names}
    with Progress(label, len(feeds), "inputs") as progress:
        for feed in feeds:
            for store, session in ((got_a, fp32), (got_b, int8)):
                for name, value in zip(names, session.run(None, dict(feed))):
                    store[name].append(np.asarray(value, np.float64).ravel())
            progress.step()
    outputs = {}
    for name in names:
        if not got_a[name]:
            continue
        a, b = np.concatenate(got_a[name]), np.concatenate(got_b[name])
        err = np.abs(a - b)
        outputs[name] = {
            "max_abs_error": float(err.max()) if err.size else 0.0,
            "mean_abs_error": float(err.mean()) if err.size else 0.0,
            "cosine": cosine(a, b),
        }
    return NumericResult(samples=len(feeds), outputs=outputs)


def measure_speed(fp32: ort.InferenceSession, int8: ort.InferenceSession, feeds: Sequence[Feeds], calls: int) -> SpeedResult | None:
    """Time ``calls`` calls of each model (1 thread), alternating so load from other processes hits both alike."""
    if not feeds or calls <= 0:
        return None
    for session in (fp32, int8):  # warm-up: first calls allocate
        session.run(None, dict(feeds[0]))
    total = [0.0, 0.0]
    with Progress("speed (1 thread)", calls, "calls") as progress:
        for i in range(calls):
            feed = dict(feeds[i % len(feeds)])
            for k, session in enumerate((fp32, int8)):
                start = time.perf_counter()
                session.run(None, feed)
                total[k] += time.perf_counter() - start
            progress.step()
    return SpeedResult(calls, 1000 * total[0] / calls, 1000 * total[1] / calls)


@dataclass
class Report:
    """Everything measured about one quantized file."""

    source: Path
    output: Path
    kind: str
    method: str
    reason: str
    parameters: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    numeric: NumericResult | None = None
    task: TaskResult | None = None
    speed: SpeedResult | None = None
    min_agreement: float = 0.95
    max_accuracy_drop: float = 1.0
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def validated(self) -> bool:
        """Whether INT8 was compared with FP32 at all (outputs or task)."""
        return self.task is not None or self.numeric is not None

    @property
    def sizes(self) -> dict[str, Any]:
        a = self.source.stat().st_size if self.source.is_file() else 0
        b = self.output.stat().st_size if self.output.is_file() else 0
        return {"fp32_bytes": a, "int8_bytes": b, "ratio": round(b / a, 4) if a else None}

    def to_dict(self) -> dict[str, Any]:
        speed = None
        if self.speed:
            speed = {**asdict(self.speed), "ratio": round(self.speed.ratio, 3), "threads": 1}
        return {
            "source": str(self.source),
            "output": str(self.output),
            "kind": self.kind,
            "method": self.method,
            "reason": self.reason,
            "parameters": self.parameters,
            "calibration": self.calibration,
            "sizes": self.sizes,
            "outputs": asdict(self.numeric) if self.numeric else None,
            "task": asdict(self.task) if self.task else None,
            "speed": speed,
            "thresholds": {"min_agreement": self.min_agreement, "max_accuracy_drop_points": self.max_accuracy_drop},
            "validated": self.validated,
            "passed": self.passed,
            "failures": self.failures,
        }

    def summary(self) -> str:
        s = self.sizes
        lines = [
            f"{self.output.name}: {self.method} ({self.reason})",
            f"  size      {s['fp32_bytes']:,} -> {s['int8_bytes']:,} bytes ({100 * (s['ratio'] or 0):.1f}% of FP32)",
        ]
        if "weight_format" in self.parameters:
            lines.append(f"  weights   {self.parameters['weight_format']} ({self.parameters.get('weight_format_reason', '')})")
        if self.numeric:
            items = list(self.numeric.outputs.items())
            shown = items if len(items) <= 3 else items[:1]
            for name, o in shown:
                lines.append(f"  output    {name}: max abs error {o['max_abs_error']:.4g}, mean {o['mean_abs_error']:.3g},"
                             f" cosine {o['cosine']:.5f} ({self.numeric.samples} validation inputs)")
            rest = items[len(shown):]
            if rest:  # e.g. a zipformer's 20-odd state outputs: the worst of them
                worst = max(o["max_abs_error"] for _, o in rest)
                lowest = min(o["cosine"] for _, o in rest)
                lines.append(f"  output    {len(rest)} more (states): max abs error <= {worst:.4g}, cosine >= {lowest:.5f}")
        if self.task:
            lines.append(f"  task      {100 * self.task.agreement:.2f}% {self.task.metric} ({self.task.count})")
            if self.task.accuracy_fp32 is not None and self.task.accuracy_int8 is not None:
                lines.append(f"  accuracy  top-1 FP32 {100 * self.task.accuracy_fp32:.2f}%, INT8 {100 * self.task.accuracy_int8:.2f}%")
        if self.speed:
            lines.append(f"  speed     {self.speed.fp32_ms:.3f} ms -> {self.speed.int8_ms:.3f} ms per call, 1 thread"
                         f" (x{self.speed.ratio:.2f})")
        if not self.validated:
            lines.append("  NOT VALIDATED: no calibration/validation data (give --kind with --audio, or --npz)")
        lines.append("  PASSED" if self.passed else "  FAILED: " + "; ".join(self.failures))
        return "\n".join(lines)


def judge(task: TaskResult | None, min_agreement: float, max_accuracy_drop: float) -> list[str]:
    """Why a run fails (empty: it passes)."""
    failures = []
    if task is None:
        return failures
    if task.agreement < min_agreement:
        failures.append(f"task agreement {100 * task.agreement:.2f}% is below {100 * min_agreement:.2f}% ({task.metric})")
    if task.accuracy_fp32 is not None and task.accuracy_int8 is not None:
        drop = 100 * (task.accuracy_fp32 - task.accuracy_int8)
        if drop > max_accuracy_drop:
            failures.append(f"top-1 accuracy dropped {drop:.2f} points (limit {max_accuracy_drop})")
    return failures
