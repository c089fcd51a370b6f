"""``poot_ir.lazy``: the one lazy-export helper poot_npu and poot_codegen share."""

from __future__ import annotations

import json

import poot_codegen
import poot_npu
import pytest
from poot_ir.lazy import lazy_exports


def test_a_lazy_name_is_the_attribute_of_its_module_and_others_are_attribute_errors() -> None:
    get = lazy_exports("pkg", {"dump_json": ("json", "dumps")})
    assert get("dump_json") is json.dumps
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'dumps'"):
        get("dumps")


def test_both_packages_export_through_it() -> None:
    from poot_codegen.intel.graph import lower
    from poot_npu.xdna_host import RunStats

    assert poot_codegen.lower_openvino is lower
    assert poot_npu.RunStats is RunStats
    with pytest.raises(AttributeError):
        poot_npu.NoSuchDevice  # noqa: B018
