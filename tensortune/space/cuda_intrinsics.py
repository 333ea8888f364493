"""CUDA tensor intrinsics the GPU templates tensorize with (registered with TVM once)."""
from __future__ import annotations

import functools

CP_ASYNC = {lanes: f"tensortune_cp_async_f32x{lanes}" for lanes in (4, 2, 1)}

# TVMScript of the cp.async tensor intrinsic, parsed from text (a decorated function would be
# parsed from this file's source, which an edit while workers run would make stale)
_CP_ASYNC_DESC = """
@T.prim_func(s_tir=True)
def desc(src_h: T.handle, dst_h: T.handle):
    src = T.match_buffer(src_h, ({lanes},), "float32", offset_factor=1, scope="global")
    dst = T.match_buffer(dst_h, ({lanes},), "float32", offset_factor=1, scope="shared")
    with T.sblock("root"):
        T.reads(src[0:{lanes}])
        T.writes(dst[0:{lanes}])
        for i in T.serial({lanes}):
            with T.sblock("copy"):
{binding}
                dst[{index}] = src[{index}]
"""
_CP_ASYNC_IMPL = """
@T.prim_func(s_tir=True)
def impl(src_h: T.handle, dst_h: T.handle):
    src = T.match_buffer(src_h, ({lanes},), "float32", offset_factor=1, scope="global")
    dst = T.match_buffer(dst_h, ({lanes},), "float32", offset_factor=1, scope="shared")
    with T.sblock("root"):
        T.reads(src[0:{lanes}])
        T.writes(dst[0:{lanes}])
        T.evaluate(T.s_tir.cp_async_raw("float32", dst.access_ptr("w"), 0, src.access_ptr("r"),
                                        0, {nbytes}))
"""


@functools.cache
def cp_async_intrin(lanes: int) -> str:
    """Register (once) a tensor intrinsic copying ``lanes`` floats from global to shared
    memory with one ``cp.async`` of ``4 * lanes`` bytes; its name. The implementation passes
    access pointers, not data and offset: the software pipeline rewrites those per buffer
    version."""
    import tvm
    from tvm.s_tir import TensorIntrin

    if lanes > 1:
        binding, index = "                vi = T.axis.remap(\"S\", [i])", "vi"
    else:  # a unit loop's block binds no iterator: the pattern of a split by 1
        binding, index = "                T.reads(src[0:1])\n                T.writes(dst[0:1])", "0"
    desc = tvm.script.from_source(_CP_ASYNC_DESC.format(lanes=lanes, binding=binding,
                                                        index=index))
    impl = tvm.script.from_source(_CP_ASYNC_IMPL.format(lanes=lanes, nbytes=4 * lanes))
    name = CP_ASYNC[lanes]
    if TensorIntrin.get(name, allow_missing=True) is None:
        TensorIntrin.register(name, desc, impl)
    return name
