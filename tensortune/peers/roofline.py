"""The FP32 FMA roofline of this host: ``fma_peak_gflops`` times a hand-written loop of the
host's widest FMA (AVX-512 or AVX2; C, gcc -march=native, OpenMP). Benchmarks and ``tune-op``
state every result as a fraction of it.
"""
from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path

# The widest FMA the host has, chosen by the compiler (-march=native): AVX-512 with 16
# independent zmm accumulators, or AVX2 with 12 ymm ones (16 ymm registers hold 12 plus the two
# constants). FMA latency (4 cycles) x 2 FMA ports needs at least 8 chains in flight.
_FMA_SOURCE = r"""
#include <immintrin.h>
#include <omp.h>

#if defined(__AVX512F__)
#define ACC 16
#define LANES 16
typedef __m512 vec;
#define SET1 _mm512_set1_ps
#define FMADD _mm512_fmadd_ps
#define ADD _mm512_add_ps
#define STORE _mm512_storeu_ps
#elif defined(__AVX2__) && defined(__FMA__)
#define ACC 12
#define LANES 8
typedef __m256 vec;
#define SET1 _mm256_set1_ps
#define FMADD _mm256_fmadd_ps
#define ADD _mm256_add_ps
#define STORE _mm256_storeu_ps
#else
#error "the host has neither AVX-512 nor AVX2 with FMA"
#endif

int fma_lanes(void) { return LANES; }
int fma_accumulators(void) { return ACC; }

double fma_loop(long iters, int threads, float *sink, int *team) {
    double t0 = omp_get_wtime();
    #pragma omp parallel num_threads(threads)
    {
        vec acc[ACC];
        const vec a = SET1(0.999999f), b = SET1(1e-6f);
        for (int j = 0; j < ACC; j++) acc[j] = SET1((float)(j + omp_get_thread_num()));
        for (long i = 0; i < iters; i++) {
            #pragma GCC unroll 16
            for (int j = 0; j < ACC; j++) acc[j] = FMADD(acc[j], a, b);
        }
        vec s = acc[0];
        for (int j = 1; j < ACC; j++) s = ADD(s, acc[j]);
        float out[LANES], total = 0.0f;
        STORE(out, s);
        for (int j = 0; j < LANES; j++) total += out[j];
        sink[omp_get_thread_num()] = total;  /* keeps the loop alive */
        if (omp_get_thread_num() == 0) *team = omp_get_num_threads();
    }
    return omp_get_wtime() - t0;
}
"""


def _compile_fma(workdir: Path) -> ctypes.CDLL:
    src, lib = workdir / "fma.c", workdir / "fma.so"
    src.write_text(_FMA_SOURCE)
    cmd = ["gcc", "-O2", "-march=native", "-fopenmp", "-shared", "-fPIC", str(src), "-o", str(lib)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building the FMA loop failed: {' '.join(cmd)}\n{done.stderr}")
    dll = ctypes.CDLL(str(lib))
    dll.fma_loop.restype = ctypes.c_double
    dll.fma_loop.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.POINTER(ctypes.c_float),
                            ctypes.POINTER(ctypes.c_int)]
    return dll


def fma_peak_gflops(threads: int, seconds: float = 0.2, repeat: int = 5) -> float:
    """Best observed FP32 GFLOP/s of ``threads`` threads running independent FMAs of the host's
    widest vector width (AVX-512 or AVX2)."""
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    with tempfile.TemporaryDirectory(prefix="tensortune-fma-") as tmp:
        dll = _compile_fma(Path(tmp))
        flops_per_iter = dll.fma_accumulators() * dll.fma_lanes() * 2  # mul + add per lane
        sink, team = (ctypes.c_float * threads)(), ctypes.c_int(0)

        def run(iters: int) -> float:
            return dll.fma_loop(iters, threads, sink, ctypes.byref(team))

        iters = 1 << 16
        # grow the loop until one run takes long enough that thread start-up is noise
        while (elapsed := run(iters)) < seconds / 4:
            iters *= 4
        iters = max(int(iters * seconds / elapsed), 1)
        best = min(run(iters) for _ in range(repeat))
    # count the threads OpenMP actually ran, not the ones asked for
    return iters * flops_per_iter * team.value / best / 1e9
