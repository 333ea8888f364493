"""``GraphOptions``: the whole-model rewrites chosen before a model is split into tasks.

Tasks, records and the saved module all depend on them, so a run stores them in its spec and
every step (extraction, build, the MetaSchedule database) takes the same value.
"""
from __future__ import annotations

import dataclasses
import warnings

from ..errors import strict
from .layout import DEFAULT_LAYOUT, REWRITE, GraphRewriteWarning, check_layout, convert_layout


@dataclasses.dataclass(frozen=True)
class GraphOptions:
    """``layout``: ``nhwc`` (channels last, ``tasks.layout``) or ``nchw`` (the model's own);
    ``winograd``: 3x3 stride-1 convolutions of at least ``winograd_channels`` channels as
    Winograd F(m, 3) (``tasks.winograd``; NHWC only); ``fast_math``: GELU, softmax, exp, erf
    and tanh as vectorizable polynomials (``tasks.fastmath``); ``expand_depthwise``: a 1x1
    convolution and the 3x3 depthwise convolution after it as one function where the expanded
    tensor is at least ``expand_depthwise_kib`` (``tasks.expand_depthwise``; NHWC only);
    ``grouped_conv``: grouped convolutions with few channels per group vectorized along the
    image row (``tasks.grouped``; NHWC only); ``slice_first``: constant slices taken before
    the permutation they follow (``tasks.slices``: attention's Q, K, V); ``attention``: ``softmax(Q Kᵀ)
    V`` as one function (``tasks.attention``); ``conv1d``: 1-D convolutions as one-row 2-D
    ones, the work between them kept one-row (``tasks.conv1d``; NHWC only); ``norms``: ONNX's
    decomposed group and instance norms as ``group_norm``, per-channel constants at full rank,
    so that the layout carries them (``tasks.norms``; NHWC only); ``fold_pads``: a zero pad
    of the image axes taken into the convolution that reads it, ONNX's pads as ``nn.pad``
    (``tasks.pads``)."""

    layout: str = DEFAULT_LAYOUT
    winograd: bool = True
    winograd_channels: int = 32
    fast_math: bool = True
    expand_depthwise: bool = True
    expand_depthwise_kib: int = 1024
    grouped_conv: bool = True
    slice_first: bool = True
    attention: bool = True
    conv1d: bool = True
    norms: bool = True
    fold_pads: bool = True

    def __post_init__(self):
        object.__setattr__(self, "layout", check_layout(self.layout))
        if self.winograd_channels < 1:
            raise ValueError(f"winograd_channels must be positive, got {self.winograd_channels}")
        if self.expand_depthwise_kib < 0:
            raise ValueError(f"expand_depthwise_kib must be >= 0, got {self.expand_depthwise_kib}")

    @staticmethod
    def of(value=None) -> "GraphOptions":
        """Options from a ``GraphOptions``, a layout name (Winograd where that layout allows
        it), a dict of ``to_json``, or None (the defaults)."""
        if value is None:
            return GraphOptions()
        if isinstance(value, GraphOptions):
            return value
        if isinstance(value, str):
            return GraphOptions(layout=value)
        if isinstance(value, dict):
            known = {f.name for f in dataclasses.fields(GraphOptions)}
            unknown = set(value) - known
            if unknown:
                raise ValueError(f"unknown graph option(s) {sorted(unknown)}; known: "
                                 f"{', '.join(sorted(known))}")
            # a run saved before a rewrite existed was tuned and built without it
            value = {"expand_depthwise": False, "grouped_conv": False, "slice_first": False,
                     "attention": False, "conv1d": False, "norms": False,
                     "fold_pads": False, **value}
            return GraphOptions(**value)
        raise TypeError(f"graph options must be GraphOptions, str or dict, not "
                        f"{type(value).__name__}")

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def before_folding(self, mod):
        """The rewrites that go before constant folding: slices first (folding and the layout
        conversion legalize each imported ``take`` of attention, and TVM warns for each one
        it legalizes in ``fast`` mode: 74 lines per DeiT-S build)."""
        if self.slice_first:
            from .slices import REWRITE as NAME, slice_first_pass

            mod = guarded(NAME, slice_first_pass(), mod)
        return mod

    def rewrite(self, mod, lanes: int | None = None):
        """``mod`` (inference-ready Relax, after ``before_folding`` and constant folding)
        converted to the layout, then the fusions, fast math and Winograd applied, for a CPU
        target of ``lanes``-wide float32 vectors (None: AVX-512's). A rewrite that raises is
        skipped (``guarded``): the model keeps NCHW, or runs without the fusion, and the rest
        still applies."""
        if self.fold_pads:  # before the 1-D convolutions: a causal pad is their padding
            from .pads import REWRITE as NAME, fold_pads_pass

            mod = guarded(NAME, fold_pads_pass(), mod)
        if self.conv1d and self.layout == "nhwc":  # before the layout conversion it feeds
            from .conv1d import REWRITE as NAME, conv1d_as_conv2d_pass

            mod = guarded(NAME, conv1d_as_conv2d_pass(), mod)
        if self.norms and self.layout == "nhwc":
            from .norms import REWRITE as NAME, norms_pass

            mod = guarded(NAME, norms_pass(), mod)
        if self.layout == "nhwc":
            mod = guarded(REWRITE, lambda m: convert_layout(m, self.layout), mod)
        if self.norms and self.layout == "nhwc":
            import tvm
            from tvm import relax

            from .norms import REWRITE as NAME, decompose_group_norms

            mod = guarded(NAME, tvm.transform.Sequential([
                decompose_group_norms(), relax.transform.FoldConstant()]), mod)
        if self.expand_depthwise and self.layout == "nhwc":
            from .expand_depthwise import REWRITE as NAME, expand_depthwise_pass

            mod = guarded(NAME, expand_depthwise_pass(self.expand_depthwise_kib * 1024), mod)
        if self.grouped_conv and self.layout == "nhwc":
            from .grouped import REWRITE as NAME, VECTOR, grouped_conv_pass

            mod = guarded(NAME, grouped_conv_pass(lanes or VECTOR), mod)
        if self.attention:  # before fast math, which turns softmax into a TIR call
            from .attention import REWRITE as NAME, attention_pass

            mod = guarded(NAME, attention_pass(self.fast_math), mod)
        if self.fast_math:
            from .fastmath import fast_math_pass

            mod = guarded("fast math", fast_math_pass(), mod)
        if self.winograd and self.layout == "nhwc":
            import tvm
            from tvm import relax

            from .winograd import REWRITE as NAME, winograd_pass

            mod = guarded(NAME, tvm.transform.Sequential([
                winograd_pass(min_channels=self.winograd_channels),
                relax.transform.CanonicalizeBindings(),
                relax.transform.FoldConstant(),
            ]), mod)
        return mod


def guarded(name: str, rewrite, mod):
    """``rewrite(mod)``; if it raises, ``mod`` unchanged and one ``GraphRewriteWarning``
    naming the rewrite and the error's first line, so that a model that imports never fails
    on a whole-model rewrite (TVM's own rules have gaps)."""
    try:
        return rewrite(mod)
    except Exception as err:  # a TVM InternalError, IndexError, ...: any of them
        if strict():  # TENSORTUNE_STRICT: raise what would be swallowed
            raise
        first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
        warnings.warn(f"{name} skipped, the model runs without it ({type(err).__name__}: "
                      f"{first[:200]})", GraphRewriteWarning, stacklevel=3)
        return mod
