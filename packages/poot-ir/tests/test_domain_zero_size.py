"""A domain's mask for a reduction's result over a zero-size operand (the ONNX case
``reduce_sum_empty_set_non_reduced_axis_zero`` on xdna-host raised a bare ValueError here)."""

from __future__ import annotations

import numpy as np
import pytest
from poot_ir.numerics import FiniteInputs, FiniteNormalResult


@pytest.mark.parametrize("shape", [(2, 0, 4), (0, 3), (2, 0, 0), (0,)])
def test_a_row_mask_of_a_zero_size_operand_has_the_result_shape(shape: tuple[int, ...]) -> None:
    x = np.zeros(shape, np.float32)
    result = x.sum(axis=-1)
    for domain in (FiniteInputs(), FiniteNormalResult()):
        mask = domain.inside([x], result)
        assert mask.shape == result.shape and mask.dtype == np.bool_


def test_a_row_mask_still_names_the_row_holding_an_infinity() -> None:
    x = np.array([[[1.0, np.inf], [2.0, 3.0]]], np.float32)
    mask = FiniteInputs().inside([x], x.sum(axis=-1))
    assert mask.tolist() == [[False, True]]
