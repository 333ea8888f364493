"""Templates that produce broken candidates, for testing that measurement survives them.

Use as ``Task(Matmul(...), target, template="tests.faulty_templates:crash")``. Each defines a
``variant`` knob (so the space is not empty) and, when applied, returns a hand-written TIR
function with the matmul's signature instead of scheduling the given one: ``crash`` segfaults,
``hang`` loops for ~2^62 iterations, ``wrong`` drops the last reduction step. ``slow_build`` and
``crash_build`` misbehave inside the builder instead; ``broken`` is a template with a bug of its
own (a Python error with a three-line message, raised two calls deep).
"""
from __future__ import annotations

import os
import signal
import time

from tensortune.space import InvalidConfigError
from tensortune.space.template import ConfigSource


def _matmul_shape(sch) -> tuple[int, int, int]:
    func = sch.mod["main"]
    shapes = [tuple(int(d) for d in p.ty.shape) for p in func.params]
    if len(shapes) != 3 or any(len(s) != 2 for s in shapes):
        raise InvalidConfigError(f"faulty templates need a matmul, got buffer shapes {shapes}")
    (m, k), (_, n), _ = shapes
    return m, n, k


def _replace(cfg, sch, make):
    """The knob, then (when applying a config) a schedule of ``make(m, n, k)``."""
    from tvm.s_tir import Schedule

    cfg.choice("variant", (0, 1, 2))
    if not isinstance(cfg, ConfigSource):
        return sch
    return Schedule(make(*_matmul_shape(sch)))


def _crash_func(M, N, K):
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"),
             C: T.Buffer((M, N), "float32")):
        T.func_attr({"tirx.noalias": True})
        # C's storage seen as a 2^40-element buffer; the stores land ~1 TiB past the allocation
        far = T.decl_buffer((T.int64(1) << T.int64(40),), "float32", data=C.data)
        for i in range(M):
            with T.sblock("C"):
                vi = T.axis.spatial(M, i)
                T.reads()
                T.writes(C[vi, 0])
                far[(T.int64(1) << T.int64(38)) + T.int64(vi) * T.int64(1 << 30)] = T.float32(1)

    return main


def _hang_func(M, N, K):
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"),
             C: T.Buffer((M, N), "float32")):
        T.func_attr({"tirx.noalias": True})
        # float accumulation is not reassociated, so LLVM must really run every iteration
        for i in range(T.int64(1) << T.int64(62)):
            with T.sblock("C"):
                vi = T.axis.spatial(T.int64(1) << T.int64(62), i)
                T.reads(C[0, 0], A[0, 0])
                T.writes(C[0, 0])
                C[0, 0] = C[0, 0] + A[0, 0]

    return main


def _wrong_func(M, N, K):
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"),
             C: T.Buffer((M, N), "float32")):
        T.func_attr({"tirx.noalias": True})
        for i, j, k in T.grid(M, N, K - 1):  # an off-by-one reduction bound
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    return main


def crash(cfg, sch):
    return _replace(cfg, sch, _crash_func)


def hang(cfg, sch):
    return _replace(cfg, sch, _hang_func)


def wrong(cfg, sch):
    return _replace(cfg, sch, _wrong_func)


def slow_build(cfg, sch):
    """Sleeps for a minute while a config is applied (a stand-in for a pathological compile)."""
    cfg.choice("variant", (0, 1, 2))
    if isinstance(cfg, ConfigSource):
        time.sleep(60)
    return sch


def crash_build(cfg, sch):
    """Kills its own process with SIGSEGV while a config is applied (a crashing compiler)."""
    cfg.choice("variant", (0, 1, 2))
    if isinstance(cfg, ConfigSource):
        os.kill(os.getpid(), signal.SIGSEGV)
    return sch


def _broken_helper(sch):
    raise RuntimeError("the template's own bug\nsecond line of the message\nthird line")


def broken(cfg, sch):
    """Raises an error of its own (not a schedule step TVM refused) while a config is applied."""
    cfg.choice("variant", (0, 1, 2))
    if isinstance(cfg, ConfigSource):
        _broken_helper(sch)
    return sch


def mixed(cfg, sch):
    """One good candidate (the unscheduled matmul) among a crashing, a hanging and a wrong one."""
    from tvm.s_tir import Schedule

    variant = cfg.choice("variant", ("good", "crash", "hang", "wrong"))
    if not isinstance(cfg, ConfigSource) or variant == "good":
        return sch
    make = {"crash": _crash_func, "hang": _hang_func, "wrong": _wrong_func}[variant]
    return Schedule(make(*_matmul_shape(sch)))
