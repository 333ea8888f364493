"""A CPU emulator of TVM's CUDA C, to check GPU kernels' indexing and synchronization here.

``emulate`` runs the kernels on the CPU: each CUDA thread is an OS thread, ``__syncthreads`` a
barrier, shared memory an arena poisoned with NaN before each block, and a ``cp.async`` is
done only at the ``cp.async.wait_group`` that must cover it (the latest a GPU may do it), so a
missing barrier or wait shows as a wrong result. It checks correctness, not speed.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np


# -- ---------------------------------------------------------------
PRELUDE = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
using std::max; using std::min;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define uint unsigned int
#define uchar unsigned char
#define ushort unsigned short
struct emu_dim3 { int x, y, z; };
static thread_local emu_dim3 threadIdx, blockIdx;
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) int2 { int x, y; };
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
static inline int2 make_int2(int a, int b) { return {a, b}; }
// CUDA's math intrinsics that the host's libm lacks (at full precision: a check, not a model)
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static std::barrier<>* emu_barrier = nullptr;
static inline void __syncthreads() { emu_barrier->arrive_and_wait(); }
// shared memory: one arena per block, poisoned with NaN before each block
static std::vector<float> emu_arena;
static thread_local size_t emu_shared_next = 0;
static inline void* emu_shared(size_t bytes) {
  size_t at = emu_shared_next;
  emu_shared_next += (bytes + 63) / 64 * 16;  // floats, 64-byte aligned
  if (emu_shared_next > emu_arena.size()) { fprintf(stderr, "shared arena exhausted\n"); abort(); }
  return emu_arena.data() + at;
}
// cp.async: queued per thread and done at the wait_group that must cover it
struct emu_copy { void* dst; const void* src; int bytes; };
static thread_local std::vector<std::vector<emu_copy>> emu_groups;
static thread_local std::vector<emu_copy> emu_pending;
static inline void emu_cp_async(void* dst, const void* src, int bytes) {
  if (((uintptr_t)dst % bytes) || ((uintptr_t)src % bytes)) {
    fprintf(stderr, "misaligned cp.async of %d bytes\n", bytes); abort();
  }
#ifdef EMU_EAGER
  memcpy(dst, src, bytes);  // the earliest a GPU may land it
#else
  emu_pending.push_back({dst, src, bytes});
#endif
}
static inline void emu_commit() { emu_groups.push_back(emu_pending); emu_pending.clear(); }
static inline void emu_wait(int n) {
  while ((int)emu_groups.size() > n) {
    for (auto& c : emu_groups.front()) memcpy(c.dst, c.src, c.bytes);
    emu_groups.erase(emu_groups.begin());
  }
}
"""

LAUNCHER = r"""
extern "C" int emu_launch_%(name)s(void** args, int gx, int gy, int gz, int tx, int ty, int tz) {
  int n = tx * ty * tz;
  emu_arena.assign(%(arena)d, 0.0f);
  for (int bz = 0; bz < gz; ++bz) for (int by = 0; by < gy; ++by) for (int bx = 0; bx < gx; ++bx) {
    std::fill(emu_arena.begin(), emu_arena.end(), NAN);
    std::barrier<> bar(n);
    emu_barrier = &bar;
    std::vector<std::thread> team;
    team.reserve(n);
    for (int t = 0; t < n; ++t) {
      team.emplace_back([=]() {
        threadIdx = {t %% tx, (t / tx) %% ty, t / (tx * ty)};
        blockIdx = {bx, by, bz};
        emu_shared_next = 0;
        emu_groups.clear();
        emu_pending.clear();
        %(name)s(%(args)s);
        emu_wait(0);
      });
    }
    for (auto& th : team) th.join();
  }
  return 0;
}
"""


def _emulated_helpers(source: str) -> str:
    """TVM's inline-asm helpers (cp.async and its groups) as emulated functions."""
    def repl(m):
        name, params = m.group(1), m.group(2)
        if name.startswith("tvm_builtin_ptx_cp_async_wait_group"):
            n = int(re.search(r"(\d+)$", name).group(1))
            return f"static inline void {name}() {{ emu_wait({n}); }}"
        if name.startswith("tvm_builtin_ptx_cp_async_commit_group"):
            return f"static inline void {name}() {{ emu_commit(); }}"
        cp = re.match(r"ptx_cp_async_legacy_(?:ca|cg)_(\d+)_(\d+)_(\d+)$", name)
        if cp:
            nbytes, dscale, sscale = (int(x) for x in cp.groups())
            return (f"static inline void {name}({params}) {{ emu_cp_async((uint8_t*)dst + "
                    f"dst_off * {dscale}, (uint8_t*)src + src_off * {sscale}, {nbytes}); }}")
        raise ValueError(f"the emulator has no version of helper {name}")
    return re.sub(r"__forceinline__ __device__ void (\w+)\(([^)]*)\) \{.*?\n\}", repl, source,
                  flags=re.S)


def emulator_source(cuda_source: str, kernels: list[dict]) -> str:
    """C++ for the host compiler: the kernels of ``cuda_source`` and a launcher for each."""
    starts = [i for i in (cuda_source.find("__forceinline__"), cuda_source.find('extern "C"'))
              if i >= 0]
    body = _emulated_helpers(cuda_source[min(starts):])
    shared = [0]

    def to_arena(m):
        kind, name, count = m.group(1), m.group(2), int(m.group(3))
        shared[0] += count * 8 + 64  # floats, generous for any element type
        return f"{kind}* {name} = ({kind}*)emu_shared({count} * sizeof({kind}));"

    body = re.sub(r"__shared__ (?:alignas\(\d+\) )?(\w+) (\w+)\[(\d+)\];", to_arena, body)
    if re.search(r"\basm\b|__shfl|extern __shared__", body):
        raise ValueError("the kernel uses an instruction the emulator lacks")
    out = [PRELUDE, body]
    for k in kernels:
        sig = re.search(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?'
                        + re.escape(k["name"]) + r"\(([^)]*)\)", body)
        params = [p for p in sig.group(1).split(",") if p.strip()]
        args = ", ".join(f"({p.strip().rsplit(' ', 1)[0].replace('__restrict__', '').strip()})"
                         f"args[{i}]" for i, p in enumerate(params))
        out.append(LAUNCHER % {"name": k["name"], "args": args, "arena": max(shared[0], 16)})
    return "\n".join(out)


def emulate(cuda_source: str, kernels: list[dict], buffers: list[np.ndarray],
            workdir: str | None = None, eager: bool = False) -> None:
    """Run ``kernels`` (launch specs as ``measure.cuda_build`` writes them: name, grid, block,
    args indexing ``buffers``) of ``cuda_source`` on the CPU, in place on ``buffers``. A
    ``cp.async`` lands at the wait that must cover it, or with ``eager`` at once: the latest
    and the earliest a GPU may land it (a missing wait shows in the first, a missing barrier
    before overwriting a buffer still read in the second)."""
    src = ("#define EMU_EAGER\n" if eager else "") + emulator_source(cuda_source, kernels)
    tag = hashlib.sha1(src.encode()).hexdigest()[:16]
    with tempfile.TemporaryDirectory(prefix="tt-emu-", dir=workdir) as tmp:
        cpp, lib = os.path.join(tmp, f"{tag}.cpp"), os.path.join(tmp, f"{tag}.so")
        Path(cpp).write_text(src)
        done = subprocess.run(["g++", "-std=c++20", "-O1", "-w", "-fno-strict-aliasing",
                               "-shared", "-fPIC", "-pthread", "-o", lib, cpp],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the emulated kernel does not compile: {done.stderr[:2000]}")
        so = ctypes.CDLL(lib)
        for k in kernels:
            ptrs = (ctypes.c_void_p * len(k["args"]))(
                *[buffers[i].ctypes.data for i in k["args"]])
            getattr(so, "emu_launch_" + k["name"])(
                ptrs, *[ctypes.c_int(int(v)) for v in (*k["grid"], *k["block"])])
