"""voiced: an offline-first voice daemon for low-power CPUs.

Nothing heavy is imported here: models load in ``load()`` classmethods.
"""

import os

# numpy's OpenBLAS starts a thread per further core when numpy is imported, and it spins waiting
# for work that never comes (a short `voiced transcribe`: 0.43 -> 0.33 s CPU on 2 cores): voiced
# runs its models in ONNX Runtime on threads it pins itself, and its few matrix products are tiny.
# Set before anything imports numpy; a value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from voiced.errors import AudioError, ConfigError, ModelError, VoicedError  # noqa: E402

__all__ = ["AudioError", "ConfigError", "ModelError", "VoicedError", "__version__"]
__version__ = "0.1.0"
