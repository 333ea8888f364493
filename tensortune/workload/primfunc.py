"""``PrimFuncWorkload``: an arbitrary TIR function (e.g. a fused operator of a model) as a workload.

The function travels as TVMScript text, so it serializes into records like any other workload
and ``workload_from_dict`` parses it back. Its key is the structural hash of the parsed function
(parameter and buffer names do not matter), so the same fused convolution found in two models,
or twice in one, is one task and shares its records.
"""
from __future__ import annotations

import collections
import dataclasses
import functools

import numpy as np

from .base import Workload, WorkloadError

REFERENCE_TARGET = {"kind": "llvm"}  # correctness only: no CPU-specific flags needed
# a function's scale for each input's random values: a recurrent layer is chaotic under
# uniform weights (rounding differences grow step by step), contractive under small ones
INPUT_SCALE = "tensortune.input_scale"


# functions whose script is known without parsing it (70 ms for a fused convolution, 2 s of a
# model's extraction, and again in every worker): the function the script was printed from, or
# one a worker loaded from TVM's JSON (``adopt_job``). Their structural hash is the parsed one's
# (printing and parsing round-trip: ``test_tasks`` checks it on a model's functions, and it held
# for all of ResNet-18's, MobileNet V2's and ShuffleNet V2's).
_KNOWN: collections.OrderedDict = collections.OrderedDict()
KNOWN_KEPT = 256


def _remember(script: str, func) -> None:
    _KNOWN[script] = func
    while len(_KNOWN) > KNOWN_KEPT:
        _KNOWN.popitem(last=False)


@functools.lru_cache(maxsize=256)
def _parse(script: str):
    """The PrimFunc of ``script`` (pure: same text, same function)."""
    import tvm
    from tvm.tirx import PrimFunc

    known = _KNOWN.get(script)
    if known is not None:
        return known
    try:
        func = tvm.script.from_source(script)
    except Exception as err:  # the TVMScript parser raises DiagnosticError and friends
        last = str(err).strip().splitlines()[-1][:300] if str(err).strip() else type(err).__name__
        raise WorkloadError(f"primfunc script does not parse: {last}") from err
    if not isinstance(func, PrimFunc):
        raise WorkloadError(f"primfunc script must define a T.prim_func, got {type(func).__name__}")
    return func


@functools.lru_cache(maxsize=256)
def _structural_key(script: str) -> str:
    import tvm_ffi

    # map_free_vars: the hash ignores names, so re-imported copies of a function agree
    h = tvm_ffi.structural_hash(_parse(script), map_free_vars=True)
    return f"{h & (2**64 - 1):016x}"


@functools.lru_cache(maxsize=KNOWN_KEPT)  # as many as are remembered: a big model's tasks all fit
def _tir_json(script: str) -> str:
    import tvm

    return tvm.ir.save_json(_parse(script))


@functools.lru_cache(maxsize=256)
def _param_names(script: str) -> tuple[str, ...]:
    return tuple(str(p.name) for p in _parse(script).params)


@functools.lru_cache(maxsize=256)
def _layout_free(script: str) -> tuple[int, ...]:
    attrs = _parse(script).attrs
    if attrs is None or "layout_free_buffers" not in attrs:
        return ()
    return tuple(sorted(int(i) for i in attrs["layout_free_buffers"]))


def canonical(func):
    """``func`` without a global symbol: what a workload stores and what its key hashes."""
    if func.attrs is not None and "global_symbol" in func.attrs:
        func = func.without_attr("global_symbol")
    return func


def _param_signature(param) -> tuple[tuple, str]:
    """``(shape, dtype)`` of a buffer parameter; ``WorkloadError`` for scalars and symbolic
    shapes."""
    try:
        shape, dtype = param.shape, param.dtype  # only buffer parameters have them
    except AttributeError:
        raise WorkloadError(f"parameter {param.name} is a scalar, not a buffer") from None
    dims = []
    for d in shape:
        if not hasattr(d, "value"):
            raise WorkloadError(f"parameter {param.name} has a symbolic shape {list(shape)}")
        dims.append(int(d.value))
    return tuple(dims), str(dtype)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class PrimFuncWorkload(Workload):
    """A TIR PrimFunc in destination-passing style: inputs first, then ``num_outputs`` outputs.

    ``dtype`` is the (first) output's dtype. ``reference`` runs the *unscheduled* function
    compiled by TVM's default path: there is no numpy definition of an arbitrary fused function,
    so a tuned schedule is checked against TVM's own straightforward lowering of the same TIR.
    """

    op = "primfunc"
    script: str = ""
    name: str = "primfunc"  # readable label (e.g. "fused_conv2d_add_relu"); not part of the key
    num_outputs: int = 1

    def __post_init__(self):
        if not isinstance(self.script, str) or not self.script.strip():
            raise WorkloadError("primfunc workload needs a non-empty TVMScript 'script'")
        if not isinstance(self.num_outputs, int) or self.num_outputs < 1:
            raise WorkloadError(f"num_outputs must be a positive integer, got {self.num_outputs!r}")
        n_params = len(_parse(self.script).params)
        if self.num_outputs > n_params:
            raise WorkloadError(f"{self.name}: {self.num_outputs} output(s) but only "
                                f"{n_params} parameter(s)")

    @staticmethod
    def from_prim_func(func, name: str = "primfunc", num_outputs: int = 1) -> "PrimFuncWorkload":
        """Wrap a PrimFunc (its global symbol, if any, is dropped)."""
        func = canonical(func)
        out = func.params[len(func.params) - num_outputs]
        script = func.script()
        _remember(script, func)
        return PrimFuncWorkload(script=script, name=name, num_outputs=num_outputs,
                                dtype=str(getattr(out, "dtype", "float32")))

    def to_job(self) -> dict:
        """``to_dict()`` plus the function in TVM's JSON, which a worker process loads 10x
        faster than it parses the script (``adopt_job``); for jobs, never for records."""
        return {**self.to_dict(), "tir": _tir_json(self.script)}

    @staticmethod
    def adopt_job(doc: dict) -> dict:
        """The ``to_dict()`` of a ``to_job`` dict, its function remembered for its script."""
        import tvm
        from tvm.tirx import PrimFunc

        doc = dict(doc)
        tir = doc.pop("tir", None)
        if tir is not None and doc.get("script") not in _KNOWN:
            func = tvm.ir.load_json(tir)
            if not isinstance(func, PrimFunc):
                raise WorkloadError(f"a job's tir is a {type(func).__name__}, not a PrimFunc")
            _remember(doc["script"], func)
        return doc

    # -- identity -----------------------------------------------------------------------------
    @property
    def key(self) -> str:
        """``primfunc-<structural hash>`` (plus ``-o<n>`` for a function with n > 1 outputs)."""
        suffix = f"-o{self.num_outputs}" if self.num_outputs != 1 else ""
        return f"primfunc-{_structural_key(self.script)}{suffix}"

    def __eq__(self, other):
        return isinstance(other, PrimFuncWorkload) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def describe(self) -> str:
        def shape(s):
            return "x".join(map(str, s)) or "()"

        try:
            ins = ", ".join(shape(s) for s in self.input_shapes)
            outs = ", ".join(shape(s) for s, _ in self._signature()[-self.num_outputs:])
        except WorkloadError as err:
            return f"{self.name}({err})"
        return f"{self.name}({ins} -> {outs})"

    # -- definition ---------------------------------------------------------------------------
    def prim_func(self):
        """The parsed function, with global symbol ``main`` (what builders and runners call)."""
        return _parse(self.script).with_attr("global_symbol", "main")

    @property
    def outputs(self) -> int:
        return self.num_outputs

    @property
    def constant_inputs(self) -> tuple[int, ...]:
        """The parameters Relax marked ``layout_free_buffers``: those bound to the model's
        constants."""
        return _layout_free(self.script)

    def build_te(self):
        raise WorkloadError("a primfunc workload has no TE definition; use prim_func()")

    @property
    def param_names(self) -> tuple[str, ...]:
        """The parameters' (buffers') names, in order. Not part of the key: the same function
        found in two models may name its inputs differently (``lv15`` here, ``lv19`` there)."""
        return _param_names(self.script)

    def _signature(self) -> list[tuple[tuple, str]]:
        return [_param_signature(p) for p in _parse(self.script).params]

    @property
    def flops(self) -> int:
        import tvm
        from tvm.s_tir.analysis import estimate_tir_flops

        return int(estimate_tir_flops(tvm.IRModule({"main": self.prim_func()})))

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        return [s for s, _ in self._signature()[: -self.num_outputs]]

    @property
    def input_dtypes(self) -> list[str]:
        return [d for _, d in self._signature()[: -self.num_outputs]]

    @property
    def output_shape(self) -> tuple[int, ...]:
        if self.num_outputs != 1:
            raise WorkloadError(f"{self.name} has {self.num_outputs} outputs; output_shape "
                                f"needs exactly one")
        return self._signature()[-1][0]

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Uniform [-1, 1) floats, times the function's ``INPUT_SCALE`` attribute where it has
        one; integer inputs are zeros (they are usually indices, and zero is in bounds for
        every gather) and booleans random."""
        rng = np.random.default_rng(seed)
        attrs = _parse(self.script).attrs
        scales = [float(x) for x in attrs[INPUT_SCALE]] if attrs is not None and \
            INPUT_SCALE in attrs else []
        out = []
        for k, (shape, dtype) in enumerate(self._signature()[: -self.num_outputs]):
            if dtype.startswith(("float", "bfloat")):
                scale = scales[k] if k < len(scales) else 1.0
                out.append((rng.uniform(-1, 1, shape) * scale).astype(dtype))
            elif dtype == "bool":
                out.append(rng.integers(0, 2, shape).astype(bool))
            else:
                out.append(np.zeros(shape, dtype))
        return out

    def reference(self, *inputs: np.ndarray):
        """The output(s) of the unscheduled function built by ``tvm.compile`` (one array, or a
        tuple when the function has several outputs)."""
        import tvm

        sig = self._signature()
        n_in = len(sig) - self.num_outputs
        if len(inputs) != n_in:
            raise WorkloadError(f"{self.name} takes {n_in} inputs, got {len(inputs)}")
        mod = tvm.IRModule({"main": self.prim_func()})
        lib = tvm.compile(mod, target=tvm.target.Target(REFERENCE_TARGET))
        dev = tvm.cpu()
        outs = [tvm.runtime.tensor(np.zeros(s, d), dev) for s, d in sig[-self.num_outputs:]]
        # np.require, not ascontiguousarray: that makes a 0-d input (an index) 1-d
        args = [tvm.runtime.tensor(np.require(x, requirements="C"), dev) for x in inputs]
        lib["main"](*args, *outs)
        arrays = tuple(o.numpy() for o in outs)
        return arrays[0] if self.num_outputs == 1 else arrays
