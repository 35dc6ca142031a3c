"""What to quantize and how: the enums and the frozen options shared by every step."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from voiced.errors import ConfigError

__all__ = ["CalibrateMethod", "Kind", "Method", "PerChannel", "QuantizeOptions", "WeightFormat"]


class Method(StrEnum):
    """How weights and activations become INT8."""

    DYNAMIC = "dynamic"
    """Weights INT8 ahead of time, activations quantized per call: MatMul, LSTM, transformer graphs."""
    STATIC = "static"
    """QDQ with activation ranges calibrated on real inputs: convolutional graphs."""
    AUTO = "auto"
    """Pick by the graph's operator mix (and say why)."""


class Kind(StrEnum):
    """Which front end turns real audio (or a file of tensors) into model inputs."""

    SILERO = "silero"
    """Silero VAD v5: 64 + 512-sample windows, state carried from call to call."""
    OWW_EMBEDDING = "oww-embedding"
    """openWakeWord embedding model: melspectrogram.onnx windows [N, 76, 32, 1]."""
    SPELLING_CNN = "spelling-cnn"
    """Moonshine spelling CNN: per-clip normalised log-mel [1, 1, 64, 128]."""
    TRANSDUCER = "transducer"
    """sherpa-onnx streaming transducer directory (``voiced-quantize asr DIR``)."""
    NPZ = "npz"
    """Any model: an .npz with one array of samples per model input."""
    NONE = "none"
    """No calibration data (dynamic only); validation on random inputs is not attempted."""


class PerChannel(StrEnum):
    """Per-channel (per output channel) weight scales."""

    AUTO = "auto"
    """On for static (per-tensor collapses the spelling CNN to 0/220 top-1) and for MatMul-heavy
    dynamic graphs (a transducer's joiner error halves); off for dynamic Conv/LSTM graphs, where it
    changed nothing measurable on Silero but made the file larger."""
    ON = "on"
    OFF = "off"


class CalibrateMethod(StrEnum):
    """How activation ranges are read from the calibration outputs (static only)."""

    MINMAX = "minmax"
    PERCENTILE = "percentile"
    ENTROPY = "entropy"


class WeightFormat(StrEnum):
    """How weights are stored, which picks ONNX Runtime's integer kernel (activations are always uint8)."""

    AUTO = "auto"
    """What does not saturate on the CPU the tool runs on: s8 where products accumulate in 32 bits
    (ARM, x86 with VNNI), the safe format on x86 with AVX2/AVX512 but no VNNI (or unknown features)."""
    S8 = "s8"
    """Signed 8-bit weights (u8×s8 kernels): the fast path, exact on ARM and VNNI CPUs."""
    S8_REDUCED = "s8-reduced"
    """Signed 7-bit weights (onnxruntime's reduce_range): u8×s8 kernels that cannot saturate, one bit coarser."""
    U8 = "u8"
    """Unsigned 8-bit weights (u8×u8 kernels): never saturate, full 8 bits."""


@dataclass(frozen=True)
class QuantizeOptions:
    """How one model (or one transducer part) is quantized and judged."""

    method: Method = Method.AUTO
    """dynamic, static or auto (by operator mix)."""
    per_channel: PerChannel = PerChannel.AUTO
    """Per-channel weight scales: auto, on or off."""
    calibrate: CalibrateMethod = CalibrateMethod.PERCENTILE
    """Range estimation for static quantization. Percentile (99.999) ignores rare outliers: on the
    spelling CNN it kept 200-201/220 top-1 across four calibration sets where min/max gave 173-198."""
    exclude_nodes: tuple[str, ...] = ()
    """Node names kept in FP32."""
    exclude_op_types: tuple[str, ...] = ()
    """Operator types kept in FP32 (e.g. ``Gather`` to keep an embedding table exact)."""
    op_types: tuple[str, ...] = ()
    """Operator types to quantize; empty: every type the method supports."""
    weight_format: WeightFormat = WeightFormat.AUTO
    """s8, s8-reduced, u8, or auto: by the CPU the tool runs on (recorded in the manifest)."""
    overwrite: bool = False
    """Replace an existing output file that voiced-quantize did not write (no manifest beside it),
    e.g. a publisher's ``encoder-epoch-99-avg-1.int8.onnx``."""
    preprocess: bool = True
    """Run onnxruntime's quant_pre_process (shape inference, constant folding) first."""
    holdout: float = 0.2
    """Fraction of the calibration inputs held back for validation (whole files, never windows)."""
    max_calibration: int = 400
    """Calibration samples used at most (static calibration keeps every activation in RAM)."""
    min_agreement: float = 0.95
    """Task agreement below this fails the run (exit status 1)."""
    max_accuracy_drop: float = 1.0
    """With labelled validation clips: top-1 may drop at most this many percentage points."""
    speed_runs: int = 200
    """Model calls timed for the speed ratio (1 thread, FP32 and INT8 interleaved)."""
    seed: int = 0
    """Seed of the calibration/validation split."""

    def __post_init__(self) -> None:
        for name, enum in (("method", Method), ("per_channel", PerChannel), ("calibrate", CalibrateMethod),
                           ("weight_format", WeightFormat)):
            if not isinstance(getattr(self, name), enum):
                raise ConfigError(name, f"must be one of {[e.value for e in enum]}, got {getattr(self, name)!r}")
        if not 0.0 <= self.holdout < 1.0:
            raise ConfigError("holdout", f"must be within [0, 1), got {self.holdout}")
        if self.max_calibration < 1:
            raise ConfigError("max_calibration", f"must be at least 1, got {self.max_calibration}")
        if not 0.0 <= self.min_agreement <= 1.0:
            raise ConfigError("min_agreement", f"must be within [0, 1], got {self.min_agreement}")
        if self.max_accuracy_drop < 0:
            raise ConfigError("max_accuracy_drop", f"must be >= 0, got {self.max_accuracy_drop}")
        if self.speed_runs < 0:
            raise ConfigError("speed_runs", f"must be >= 0, got {self.speed_runs}")

    def use_per_channel(self, method: Method, matmul_share: float) -> bool:
        """Resolve ``per_channel`` for ``method`` on a graph whose weights are ``matmul_share`` MatMul/Gemm/Gather."""
        if self.per_channel is PerChannel.AUTO:
            return method is Method.STATIC or matmul_share > 0.5
        return self.per_channel is PerChannel.ON
