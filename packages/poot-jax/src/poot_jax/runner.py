"""Run a JAX function on a poot device: ``Runner`` (and ``jit``, which makes one).

The first call with a shape/dtype signature (the argument pytree's structure and each leaf's
shape and dtype) traces and imports ``fn`` (``import_function``), plans the program for the
device's target (``poot_planner.plan``), uploads its weights and adds an engine entry: the
ordinary one when the plan is admitted, else (``partition=True``, the default) the partitioned
one, whose refused spans run on the compiled host device where host-cpu admits them, else
(or with ``host="oracle"``) on the host oracle (``Engine.add_partitioned``). The first step
records; later calls with the same signature replay it. The engine's checks apply to every
call (inputs against the signature, range and domain; results against the range; ``verify=``
against the oracle), as do its deadline (``deadline_s=``) and its blob cache (``cache_dir=``).

This is the one module of ``poot_jax`` that imports the planner, the engine and the devices:
``import poot_jax`` (the importer) stays jax plus ``poot_ir``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from poot_engine import Device, Engine, HostSpans
from poot_engine.engine import DEFAULT_DEADLINE_S, Entry
from poot_engine.verify import VerifyMode
from poot_npu.registry import host_device, make_device
from poot_planner import Plan, plan

from poot_jax import ImportedFunction, import_function

__all__ = ["Compiled", "Runner", "jit"]

#: A call's signature: the argument pytree's structure, then each leaf's shape and dtype.
Signature = tuple[Any, tuple[tuple[tuple[int, ...], str], ...]]


@dataclass(frozen=True, slots=True)
class Compiled:
    """What one signature traced to: the import, its plan, and the engine entry that replays it
    (``partitioned``: the plan refused a part, whose spans run on the host: the compiled host
    device or the oracle)."""

    imported: ImportedFunction
    plan: Plan
    entry: Entry
    partitioned: bool


class Runner:
    """``fn`` on ``device`` (a name from ``poot devices`` or an open ``Device``); call it like
    ``fn``. ``params`` (a pytree of arrays, e.g. Flax ``variables``) is passed as ``fn``'s
    first argument and bound as weights; it is fixed for the runner's life. Results are numpy
    arrays in ``fn``'s output pytree, or JAX arrays with ``as_jax=True``.

    Raises what the import raises (``UnsupportedJax``: nothing is planned or run), ``PlanRefused``
    when the plan refuses a part and ``partition=False``, and the engine's typed errors on a
    call (``StepInputError``, ``NarrowingRangeInput``, ``ContractViolation`` under ``verify``,
    ``DeadlineExceeded``, ...). ``close()`` (or ``with``) releases the device.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        params: Any = None,
        device: str | Device = "cpu",
        verify: VerifyMode = "off",
        partition: bool = True,
        deadline_s: float = DEFAULT_DEADLINE_S,
        cache_dir: Path | str | None = None,
        as_jax: bool = False,
        host: HostSpans = "compiled",
    ) -> None:
        self.fn = fn
        self.params = params
        self.partition = partition
        self.as_jax = as_jax
        self.device = make_device(device) if isinstance(device, str) else device
        try:
            spans = host_device(self.device.target, host) if partition else None
        except BaseException:
            self.device.close()
            raise
        self.engine = Engine(self.device, cache_dir, deadline_s, verify, host=spans)
        self._compiled: dict[Signature, Compiled] = {}

    @property
    def target(self) -> str:
        return self.device.target

    def __call__(self, *args: Any) -> Any:
        leaves, tree = jax.tree_util.tree_flatten(args)
        arrays = [np.asarray(jax.numpy.asarray(x)) for x in leaves]  # as JAX takes them
        c = self.compiled(*jax.tree_util.tree_unflatten(tree, arrays))
        feeds = {}
        traced = (self.params, *args) if self.params is not None else args
        paths = jax.tree_util.tree_flatten_with_path(traced)[0]
        offset = len(paths) - len(arrays)  # the params' leaves come first
        for (path, _), value in zip(paths[offset:], arrays, strict=True):
            feeds[c.imported.inputs[jax.tree_util.keystr(path)]] = value
        got = self.engine.step(c.entry, feeds)
        outs: list[Any] = [got[name] for name in c.imported.outputs]
        if self.as_jax:
            outs = [jax.numpy.asarray(o) for o in outs]
        return jax.tree_util.tree_unflatten(c.imported.out_tree, outs)

    def compiled(self, *args: Any) -> Compiled:
        """The entry for ``args``'s signature: traced, planned and added on its first use."""
        sig = signature(args)
        found = self._compiled.get(sig)
        if found is not None:
            return found
        imported = import_function(self.fn, *args, params=self.params)
        planned = plan(imported.program, self.target)
        weights = self.engine.load_weights(imported.weights)
        add = self.engine.add_partitioned if self.partition else self.engine.add_entry
        entry = add(planned, weights)  # add_entry raises PlanRefused naming every refusal
        made = Compiled(imported, planned, entry, not planned.admitted)
        self._compiled[sig] = made
        return made

    @property
    def signatures(self) -> int:
        """How many signatures have been traced (each traced once)."""
        return len(self._compiled)

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def jit(fn: Callable[..., Any], **options: Any) -> Runner:
    """``Runner(fn, **options)``: ``poot_jax.jit(f, device="xdna-host", verify="always")``."""
    return Runner(fn, **options)


def signature(args: Any) -> Signature:
    leaves, tree = jax.tree_util.tree_flatten(args)
    return tree, tuple((tuple(np.shape(x)), str(np.asarray(x).dtype)) for x in leaves)
