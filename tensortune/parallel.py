"""Parallel loops whose chunks each thread takes as it goes, not a fixed half.

TVM's CPU code generator splits a parallel loop of ``N`` iterations statically: thread ``i``
of ``T`` runs iterations ``[i * ceil(N / T), (i + 1) * ceil(N / T))`` and the kernel ends when
the slowest thread does. On a shared host one vCPU is often slower than the other (this
project's Xeon host: a 2-thread FMA peak of 175-347 GFLOP/s within one minute, the 1-thread
peak steady), so every kernel runs at twice the slower core's speed; with another process busy
on one core, DeiT-S ran 10x slower, where ONNX Runtime and OpenVINO, which balance their work,
ran 1.4-2.4x slower.

``dynamic_chunks`` rewrites each outermost parallel loop after TVM's lowering into

    counter = 0
    for task in parallel(TASKS):          # TVM's static split: each thread a few of these
        chunk = next_chunk(&counter)      # an atomic fetch-and-add
        while chunk < N:
            body(chunk)
            chunk = next_chunk(&counter)

so a fast thread takes more chunks and a stalled one fewer. TVM 0.27 lowers no atomic on CPUs
(``tirx.atomic_add``: "CPU backend does not support atomic add yet"), so ``next_chunk`` is a
three-line LLVM function imported into the module (``pragma_import_llvm``): the library needs
nothing at run time that TVM's runtime does not provide.

The rewrite runs in the ``tensortune`` TIR pipeline (TVM's ``s_tir`` pipeline, then this pass),
which the candidate builder and the model build both name, so a candidate is timed as the
model runs it.
"""
from __future__ import annotations

import os

PIPELINE = "tensortune"
# iterations of the outer static loop: at least the threads of any machine this runs on; each
# thread's first task takes chunks until none is left, its others find the counter drained
TASKS = 256
NEXT_CHUNK = "tensortune_next_chunk"
_NEXT_CHUNK_IR = f"""
define linkonce_odr i32 @{NEXT_CHUNK}(ptr %counter) {{
  %old = atomicrmw add ptr %counter, i32 1 seq_cst
  ret i32 %old
}}
"""
STATIC = "TENSORTUNE_STATIC_PARALLEL"  # set to 1: TVM's static split (for comparisons)


def tir_pipeline() -> str:
    """The TIR pipeline name to compile with (``tvm.compile(..., tir_pipeline=...)``)."""
    if os.environ.get(STATIC, "") not in ("", "0"):
        return "default"
    register()
    return PIPELINE


def register() -> None:
    """Register the ``tensortune`` TIR pipeline with TVM (once per process)."""
    from tvm.tirx import compilation_pipeline as cp

    if PIPELINE in cp.PIPELINE_MAP:
        return

    def factory():
        base, finalize_host, finalize_device = cp.get_tir_pipeline("default")

        def pipeline(mod):
            return _dynamic_chunks()(base(mod))

        return pipeline, finalize_host, finalize_device

    cp.register_tir_pipeline(PIPELINE, factory)


def _dynamic_chunks():
    import tvm

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name="tensortune.DynamicChunks")
    def transform(func, _mod, _ctx):
        target = func.attrs.get("target") if func.attrs is not None else None
        if target is not None and target.kind.name != "llvm":
            return func
        body, changed = _rewrite(func.body)
        if not changed:
            return func
        return func.with_body(tvm.tirx.AttrStmt(0, "pragma_import_llvm", _NEXT_CHUNK_IR, body))

    return transform


def _rewrite(stmt):
    """``(stmt with its outermost parallel loops rewritten, whether any was)``: statements
    that hold others are descended into; any other kind is left as it is (its loops static)."""
    from tvm import tirx

    if isinstance(stmt, tirx.For):
        if stmt.kind == tirx.ForKind.PARALLEL:
            return _chunked(stmt), True
        body, changed = _rewrite(stmt.body)
        if not changed:
            return stmt, False
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                        stmt.thread_binding, stmt.annotations), True
    if isinstance(stmt, tirx.SeqStmt):
        parts = [_rewrite(s) for s in stmt.seq]
        if not any(c for _, c in parts):
            return stmt, False
        return tirx.SeqStmt([s for s, _ in parts]), True
    if isinstance(stmt, tirx.AttrStmt):
        body, changed = _rewrite(stmt.body)
        return (tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, body), True) if changed \
            else (stmt, False)
    if isinstance(stmt, tirx.IfThenElse):
        then, a = _rewrite(stmt.then_case)
        other, b = _rewrite(stmt.else_case) if stmt.else_case is not None else (None, False)
        return (tirx.IfThenElse(stmt.condition, then, other), True) if a or b else (stmt, False)
    if isinstance(stmt, tirx.While):
        body, changed = _rewrite(stmt.body)
        return (tirx.While(stmt.condition, body), True) if changed else (stmt, False)
    return stmt, False


def _chunked(loop):
    """``loop`` (parallel, from 0) as threads that take its iterations from a shared counter."""
    from tvm import tirx

    i32 = "int32"
    counter = tirx.decl_buffer((1,), i32, "tt_counter", scope="local")
    chunk = tirx.decl_buffer((1,), i32, "tt_chunk", scope="local")
    take = tirx.call_extern(i32, NEXT_CHUNK, tirx.address_of(tirx.BufferLoad(counter, [0])))
    current = tirx.BufferLoad(chunk, [0])
    extent = loop.extent.astype(i32)
    var = loop.loop_var
    # the body in a loop of one: TVM frees the buffers a body allocates at the end of the
    # loop that holds it, which must be inside the ``while``
    body = tirx.For(tirx.Var("tt_once", i32), tirx.const(0, i32), tirx.const(1, i32),
                    tirx.ForKind.SERIAL, loop.body)
    step = tirx.SeqStmt([tirx.Bind(var, current.astype(str(var.ty))), body,
                         tirx.BufferStore(chunk, take, [0])])
    # a task that finds the counter drained (a plain read: it only grows, so a stale value
    # can only send it to the atomic, which then says so) ends without an atomic
    worker = tirx.SeqStmt([tirx.AllocBuffer(chunk), tirx.IfThenElse(
        tirx.BufferLoad(counter, [0]) < extent,
        tirx.SeqStmt([tirx.BufferStore(chunk, take, [0]), tirx.While(current < extent, step)]),
        None)])
    tasks = tirx.For(tirx.Var("tt_task", i32), tirx.const(0, i32), tirx.const(TASKS, i32),
                     tirx.ForKind.PARALLEL, worker)
    return tirx.SeqStmt([tirx.AllocBuffer(counter),
                         tirx.BufferStore(counter, tirx.const(0, i32), [0]), tasks])
