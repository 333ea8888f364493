"""CUDA candidates built for a device runner that has no TVM: a cubin and its launch spec.

TVM compiles the schedule to CUDA C, nvcc turns it into a cubin for the target's ``arch``, and
the lowered kernels say what a launcher needs: each kernel's name, grid and block sizes, and
which of the function's buffers each kernel parameter is. The spec goes to ``<stem>.json``
beside ``<stem>.cubin``, with the candidate's ``hardware_cuda`` feature row, which the same nvcc
run yields at no extra cost. ``tensortune.device_runner`` launches exactly that on the GPU host.
"""
from __future__ import annotations

import json
import os
import uuid

from ..toolchain import NVCC

AXES = ("x", "y", "z")


class UnsupportedKernel(ValueError):
    """A kernel the device runner cannot launch as specified (scalar or unknown parameters,
    dynamic shared memory, extents that are not constants)."""


def build_cuda(task, sch, out_dir: str, nvcc: str = NVCC, timeout_s: float = 120.0) -> str:
    """Compile scheduled ``sch`` of CUDA ``task`` into ``out_dir``; the cubin's path.

    Raises ``toolchain.NvccError`` when nvcc fails and ``UnsupportedKernel`` for
    kernels the device runner cannot launch."""
    import tvm

    from ..analysis.cuda_row import cuda_row
    from ..analysis.loop_map import thread_extents
    from ..space.cuda_template import device_functions, lower_for_cuda
    from ..toolchain import compile_cuda

    target = task.tvm_target()
    lowered = lower_for_cuda(sch.mod, target)
    kernels = _in_call_order(lowered, device_functions(lowered))
    if not kernels:
        raise UnsupportedKernel("the schedule lowered to no CUDA kernel")
    params = [str(p.name) for p in sch.mod["main"].params]
    allocated = _host_buffers(lowered["main"].body)
    scratch: list[dict] = []  # global buffers the host allocates (a split-K's partial sums)
    specs = []
    for name, func in kernels:
        launch = [str(t) for t in func.attrs.get("tirx.kernel_launch_params", [])]
        if any("dyn_shared" in t for t in launch):
            raise UnsupportedKernel(f"kernel {name} uses dynamic shared memory")
        extents = thread_extents(func.body)
        unknown = [t for t in launch if t not in extents]
        if unknown:
            raise UnsupportedKernel(f"kernel {name}: launch extents {unknown} are not constants")
        specs.append({
            "name": name,
            "grid": [int(extents.get(f"blockIdx.{a}", 1)) for a in AXES],
            "block": [int(extents.get(f"threadIdx.{a}", 1)) for a in AXES],
            "shared_bytes": 0,
            "args": [_buffer_index(name, str(p.name), params, allocated, scratch)
                     for p in func.params],
        })
    executable = tvm.compile(sch.mod, target=target)
    source = executable.mod.imports[0].inspect_source("cuda")
    stem = os.path.join(out_dir, uuid.uuid4().hex)
    ptx_text, report = compile_cuda(source, str(task.target.get("arch", "sm_90")), nvcc,
                                    timeout_s, cubin_path=stem + ".cubin")
    row = cuda_row(kernels, ptx_text, report)
    with open(stem + ".json", "w") as f:
        json.dump({"kernels": specs, "scratch": scratch,
                   "hardware_cuda": [float(v) for v in row]}, f)
    return stem + ".cubin"


def launch_spec(cubin_path: str) -> dict:
    """The launch spec ``build_cuda`` wrote beside ``cubin_path``."""
    with open(os.path.splitext(cubin_path)[0] + ".json") as f:
        return json.load(f)


def _buffer_index(kernel: str, param: str, params: list[str], allocated: dict,
                  scratch: list[dict]) -> int:
    """The index of a kernel parameter among the function's buffers, then the scratch
    buffers (added to ``scratch`` as first seen)."""
    # SplitHostDevice names a kernel's pointer to buffer B "B_ptr"
    base = param[:-4] if param.endswith("_ptr") else param
    if base in params:
        return params.index(base)
    names = [s["name"] for s in scratch]
    if base not in names:
        if base not in allocated:
            raise UnsupportedKernel(f"kernel {kernel}: parameter {param!r} is none of the "
                                    f"function's buffers {params} nor a buffer it allocates")
        scratch.append({"name": base, **allocated[base]})
        names.append(base)
    return len(params) + names.index(base)


def _host_buffers(stmt) -> dict[str, dict]:
    """Global buffers the lowered host function allocates: ``{name: {"shape", "dtype"}}``."""
    out: dict[str, dict] = {}
    todo = [stmt]
    while todo:
        node = todo.pop()
        if node is None:
            continue
        kind = type(node).__name__
        if kind == "AllocBuffer" and node.buffer.scope() == "global":
            out[str(node.buffer.name)] = {"shape": [int(x) for x in node.buffer.shape],
                                          "dtype": str(node.buffer.dtype)}
        if kind == "SeqStmt":
            todo.extend(node.seq)
        elif kind == "IfThenElse":
            todo.extend((node.then_case, node.else_case))
        else:
            todo.append(getattr(node, "body", None))
    return out


def _in_call_order(lowered, kernels: list) -> list:
    """``kernels`` in the order the host function launches them."""
    if len(kernels) < 2:
        return kernels
    host = lowered["main"].script()
    return sorted(kernels, key=lambda k: host.find(f'"{k[0]}"') % (len(host) + 1))
