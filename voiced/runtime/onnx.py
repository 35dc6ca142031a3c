"""The one factory for ONNX Runtime sessions: threads, optimization, spinning off."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from voiced.errors import ConfigError, ModelError

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["SessionOptions", "create_session"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionOptions:
    """How ONNX Runtime runs one model."""

    threads: int = 1
    """Intra-op threads; 1 keeps a Pi's other cores free for the other stages."""
    optimize: bool = True
    """Enable all graph optimizations (constant folding, fusions)."""
    thread_affinities: str | None = None
    """ONNX Runtime ``session.intra_op_thread_affinities`` (e.g. "2;3"), from the hardware profile."""
    memory_pattern: bool = True
    """ONNX Runtime's memory pattern: an allocation plan kept per input shape. Off for models fed a
    new length each call (a Piper voice, one per sentence), where the plans pile up (80 MB RSS)."""

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ConfigError("threads", f"must be at least 1, got {self.threads}")


def create_session(path: str | Path, options: SessionOptions | None = None) -> ort.InferenceSession:
    """Open ``path`` as a CPU inference session after checking it against its manifest.

    A missing, tampered or broken file raises ModelError naming it.
    """
    import onnxruntime as ort

    from voiced.models.manifest import verify_model_file

    options = options or SessionOptions()
    path = Path(path)
    # Every model passes here, so none is loaded unchecked: a checksum mismatch against its
    # manifest or install record raises ModelError naming the file; FP32 files are warned about.
    verify_model_file(path)
    so = ort.SessionOptions()
    so.intra_op_num_threads = options.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_mem_pattern = options.memory_pattern
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if options.optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    # Spinning keeps idle worker threads busy-waiting; on a Pi that is wasted power and heat.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if options.thread_affinities and options.threads > 1:
        so.add_session_config_entry("session.intra_op_thread_affinities", options.thread_affinities)
    so.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several unrelated types for bad files
        raise ModelError(f"cannot load ONNX model {path}: {exc}") from exc
