"""The ONNX node test cases as poot imports them: shared by the frontend's tests (``test_onnx.py``)
and the conformance suite (``tests/conformance/test_onnx_cases.py``), which imports this module by
the same name, so one process collects the cases once.

The cases feed shapes, axes and indices as graph inputs; a model poot imports has them as
constants, so ``constants`` binds every graph input of type int64 and every input that feeds a
position in ``STATIC_INPUTS``. Everything else stays a runtime slot (``slots``).
"""

from __future__ import annotations

import collections
import functools
import re
import warnings
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper
from poot_onnx import STATIC_INPUTS, SUPPORTED_OPS, Imported

__all__ = ["ORACLE_KNOWN", "array", "constants", "group", "is_float", "node_cases", "rtol", "slots"]


@functools.cache
def node_cases() -> tuple[Any, ...]:
    """Every case onnx generates (in memory, 5 to 10 s), once per process."""
    with warnings.catch_warnings():
        # The generators compute their expected outputs in numpy and overflow on purpose;
        # onnx may also deprecate its own helpers. Only onnx's modules are silenced.
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"onnx(\.|$)")
        with np.errstate(all="ignore"):
            import onnx.backend.test.case.node as node_cases

            return tuple(node_cases.collect_testcases())


def array(x: Any) -> np.ndarray | None:
    """A tensor as an array; None for a sequence, an optional or a map."""
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    return np.asarray(x) if isinstance(x, np.ndarray | np.generic) else None


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == np.dtype(ml_dtypes.bfloat16)


#: Cases the oracle misses, with the reason; each must still miss (the frontend's tests and
#: the conformance suite both hold them to it).
ORACLE_KNOWN = {
    name: (
        "the expanded function body computes every step in bfloat16 (softmax over a causal "
        "mask included), while the expected output was computed in float32 and rounded once: "
        "1.1% apart, beyond two bfloat16 steps"
    )
    for name in (
        "test_attention_4d_causal_bf16_expanded",
        "test_attention_3d_causal_bf16_expanded",
        "test_attention_4d_padded_kv_bf16_expanded",
        "test_attention_4d_causal_padded_kv_bf16_expanded",
        # the same bodies, inlined from Attention's function (poot_onnx.functions)
        "test_attention_4d_causal_bf16",
        "test_attention_3d_causal_bf16",
        "test_attention_4d_padded_kv_bf16",
        "test_attention_4d_causal_padded_kv_bf16",
    )
}


def rtol(case: Any, dtype: np.dtype) -> float:
    """The relative tolerance for a float output: the case's own, except for bfloat16, whose
    8-bit significand cannot meet the cases' 1e-3: the expected output is itself rounded to
    bfloat16 (up to 2^-9 relative) and poot's result is too, after computing in bfloat16, so
    two bfloat16 steps, 2^-7, there."""
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return max(float(case.rtol), 2.0**-7)
    return float(case.rtol)


def group(case: Any) -> str:
    """The op type of a one-node case of a supported op, "graph" for a graph of supported ops
    (the expanded function bodies), "other" otherwise (a node with no rule of its own still
    imports when it is folded at import or ONNX defines its op as a function)."""
    nodes = case.model.graph.node
    if not {n.op_type for n in nodes} <= set(SUPPORTED_OPS):
        return "other"
    return nodes[0].op_type if len(nodes) == 1 else "graph"


def constants(case: Any, inputs: list[np.ndarray | None]) -> dict[str, np.ndarray]:
    """The graph inputs of one data set to bind at import (``import_model(constants=...)``)."""
    graph = case.model.graph
    static = {
        n.input[i]
        for n in graph.node
        for i in STATIC_INPUTS.get(n.op_type, ())
        if i < len(n.input) and n.input[i]
    }
    return {
        vi.name: value
        for vi, value in zip(graph.input, inputs, strict=False)
        if value is not None and (vi.name in static or value.dtype == np.int64)
    }


def slots(case: Any, imported: Imported, inputs: list[np.ndarray | None]) -> dict[str, Any]:
    """The values of the imported program's slots, by program name, for one data set."""
    return {
        imported.inputs[vi.name]: value
        for vi, value in zip(case.model.graph.input, inputs, strict=False)
        if vi.name in imported.inputs
    }


_QUOTED = re.compile(r"'[^']*'")
_MORE = re.compile(r" \(and \d+ more blocker\(s\).*\)$")


def reason(err: Any) -> str:
    """A refusal's reason without the names of one model's values, so cases group by it."""
    detail = _MORE.sub("", err.detail)
    if err.kind == "op":
        return f"op: no lowering for {err.op_type}" if "no lowering" in detail else f"op: {detail}"
    detail = _QUOTED.sub("'…'", detail)
    return f"{err.kind}: {err.op_type}: {detail}"


def conformance_markdown(outcomes: list[tuple[str, str, str]]) -> str:
    """docs/conformance.md from ``(case, result, reason)`` of every ONNX node case."""
    total = len(outcomes)
    results = collections.Counter(r.split(":")[0] for _, r, _ in outcomes)
    reasons = collections.Counter(why for _, r, why in outcomes if r.startswith("refused"))
    examples: dict[str, str] = {}
    for case, r, why in outcomes:
        if r.startswith("refused"):
            examples.setdefault(why, case)
    lines = [
        "# ONNX conformance",
        "",
        "Generated by `uv run python tools/gen_conformance.py` from the ONNX node test cases of",
        "the installed onnx (`onnx.backend.test.case.node`), each imported by `poot_onnx` and",
        "run on the oracle against the case's own expected outputs; do not edit by hand (a test",
        "fails when this file is stale).",
        "",
        "| result | cases |",
        "| --- | ---: |",
        f"| imported and matched on the oracle | {results['passed']} |",
        f"| known to miss (see `ORACLE_KNOWN`) | {results['known']} |",
        f"| refused, with a typed reason | {results['refused']} |",
        f"| failed | {results['FAILED']} |",
        f"| **all** | **{total}** |",
        "",
        "## Refusals by reason",
        "",
        "| cases | reason | for example |",
        "| ---: | --- | --- |",
    ]
    for why, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        text = why.replace("|", "\\|")
        lines.append(f"| {count} | {text} | `{examples[why]}` |")
    return "\n".join(lines) + "\n"
