"""Reading a CTranslate2 ``model.bin``: named arrays, scalars and aliases.

The layout is the one ``ctranslate2.specs.model_spec.ModelSpec._serialize`` writes
(binary version 6, little endian)::

    u32 binary_version, str spec_name, u32 spec_revision, u32 n_variables,
    n_variables x (str name, u8 rank, rank x u32 dim, u8 dtype_id, u32 n_bytes, bytes),
    u32 n_aliases, n_aliases x (str alias, str target)

where ``str`` is a u16 length (counting a trailing NUL) followed by the UTF-8 bytes and the
NUL. Dtype ids follow CTranslate2's DataType enum. Only numpy is needed: the importer must
not require the ctranslate2 runtime itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voiced.errors import ModelError

__all__ = ["BINARY_VERSIONS", "Ct2Model", "read_ct2_model"]

BINARY_VERSIONS = frozenset({5, 6})  # 6 is what ctranslate2 4.x writes; 5 differs only in what follows

# CTranslate2's DataType order: float32, int8, int16, int32, float16, bfloat16.
_DTYPES: tuple[str, ...] = ("<f4", "i1", "<i2", "<i4", "<f2", "bfloat16")


@dataclass(frozen=True)
class Ct2Model:
    """The contents of one ``model.bin``."""

    path: Path
    """The file read."""
    spec: str
    """Spec name, e.g. ``WhisperSpec``."""
    revision: int
    """Spec revision (the weights layout version; WhisperSpec is at 3)."""
    variables: dict[str, np.ndarray]
    """Every stored variable by name, in the file's dtype (scalars are 0-d arrays)."""
    aliases: dict[str, str]
    """Alias name → the variable it shares (e.g. the output projection → the embeddings)."""

    def resolve(self, name: str) -> np.ndarray:
        """A variable by name or alias; ModelError naming the file when absent."""
        target = self.aliases.get(name, name)
        try:
            return self.variables[target]
        except KeyError:
            raise ModelError(f"{self.path}: no variable {name!r} in this {self.spec} model") from None


class _Cursor:
    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.path, self.pos = data, path, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ModelError(f"{self.path}: truncated at byte {self.pos} (wanted {n} more of {len(self.data)})")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> int:
        return int(struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0])

    def string(self) -> str:
        n = self.unpack("H")
        raw = self.take(n)
        if n == 0 or raw[-1] != 0:
            raise ModelError(f"{self.path}: malformed string at byte {self.pos - n}")
        return raw[:-1].decode("utf-8")


def _array(raw: bytes, dtype_id: int, shape: tuple[int, ...], name: str, path: Path) -> np.ndarray:
    if dtype_id >= len(_DTYPES):
        raise ModelError(f"{path}: variable {name!r} has unknown dtype id {dtype_id}")
    dtype = _DTYPES[dtype_id]
    if dtype == "bfloat16":
        # bfloat16 is the upper half of a float32: widen by shifting the bits.
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        values = bits.view(np.float32)
    else:
        values = np.frombuffer(raw, dtype=dtype)
    if values.size != int(np.prod(shape, dtype=np.int64)):
        raise ModelError(f"{path}: variable {name!r} holds {values.size} values for shape {list(shape)}")
    return values.reshape(shape)


def read_ct2_model(path: str | Path) -> Ct2Model:
    """Read every variable of a CTranslate2 ``model.bin`` (or the ``model.bin`` inside a directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.bin"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    cur = _Cursor(data, path)
    version = cur.unpack("I")
    if version not in BINARY_VERSIONS:
        raise ModelError(f"{path}: CTranslate2 binary version {version} is not supported (known: {sorted(BINARY_VERSIONS)})")
    spec = cur.string()
    revision = cur.unpack("I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(cur.unpack("I")):
        name = cur.string()
        shape = tuple(cur.unpack("I") for _ in range(cur.unpack("B")))
        dtype_id = cur.unpack("B")
        raw = cur.take(cur.unpack("I"))
        variables[name] = _array(raw, dtype_id, shape, name, path)
    aliases: dict[str, str] = {}
    for _ in range(cur.unpack("I")):
        alias = cur.string()
        aliases[alias] = cur.string()
    if cur.pos != len(data):
        raise ModelError(f"{path}: {len(data) - cur.pos} unread bytes after the aliases")
    return Ct2Model(path=path, spec=spec, revision=revision, variables=variables, aliases=aliases)
