"""Element types, and the tensor type that pairs one with a static shape."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import ml_dtypes
import numpy as np

__all__ = ["DType", "TensorType"]


class DType(Enum):
    """An element type. The value is the name the text format prints."""

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    I32 = "i32"
    BOOL = "bool"

    @property
    def numpy(self) -> np.dtype[np.generic]:
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        # keyed by the member's value: a str's hash is cached, an Enum's is a Python call
        # (planning asks this a few times per equation)
        return _ITEMSIZE[self._value_]

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.F16, DType.BF16)

    @property
    def is_numeric(self) -> bool:
        """Types arithmetic is defined on (every type but BOOL)."""
        return self is not DType.BOOL

    @property
    def bits_dtype(self) -> np.dtype[np.generic]:
        """The unsigned integer type of the same width, for exact bit patterns."""
        return _BITS[self.itemsize]

    @classmethod
    def from_numpy(cls, dtype: np.dtype[np.generic] | type) -> DType | None:
        """The DType of a numpy dtype, or None when poot has no such type."""
        want = np.dtype(dtype)
        for d, nd in _NUMPY.items():
            if nd == want:
                return d
        return None


_NUMPY: dict[DType, np.dtype[np.generic]] = {
    DType.F32: np.dtype(np.float32),
    DType.F16: np.dtype(np.float16),
    DType.BF16: np.dtype(ml_dtypes.bfloat16),
    DType.I32: np.dtype(np.int32),
    DType.BOOL: np.dtype(np.bool_),
}
_ITEMSIZE: dict[str, int] = {d._value_: int(nd.itemsize) for d, nd in _NUMPY.items()}
_BITS: dict[int, np.dtype[np.generic]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
}


@dataclass(frozen=True, slots=True)
class TensorType:
    """A static shape and an element type. A shape of ``()`` is a scalar."""

    shape: tuple[int, ...]
    dtype: DType

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(str(d) for d in self.shape)}]"
