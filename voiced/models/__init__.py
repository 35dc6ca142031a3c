"""Models on disk: verification at load, the store, the catalog and downloads.

    from voiced.models.manifest import verify_model_file
    verify_model_file(path)        # ModelError on a checksum mismatch; warning if nothing vouches for it

Modules: ``manifest`` (checksums of quantized files and install records; what the daemon
calls at load), ``store`` (install/list/verify/remove), ``catalog`` (known public models),
``download`` (resumable, checksummed HTTP), ``cli`` (``voiced models …``). Importing the
package loads nothing heavy.
"""

from voiced.models.manifest import (
    ManifestStatus,
    Trust,
    verify_model_file,
    verify_model_files,
)

__all__ = ["ManifestStatus", "Trust", "verify_model_file", "verify_model_files"]
