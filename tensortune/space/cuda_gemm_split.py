"""The second half of a ``cuda.gemm`` kernel whose K was cut in parts (``rfactor``): the sum of
the parts' partial results, with the write-back and any fused epilogue.

- ``k_parts`` slice: the slices of each K tile were summed by their own threads (``threadIdx.z``)
  into a shared ``[slices, BM, BN]`` buffer; the same block adds them up.
- ``k_parts`` split: the parts of K were summed by their own blocks (``blockIdx.z``) into a global
  ``[splits, M, N]`` scratch buffer (TVM allocates it as workspace; the device runner as a
  scratch buffer of the launch spec); a second kernel adds them up, 4 outputs per thread.
"""
from __future__ import annotations

SUM_THREADS = 128  # threads per block of the split-K sum kernel


def sum_slices(sch, final, write_back, block_loop, threads, m_name: str, n_name: str,
               width: int) -> None:
    """The block adds up the slices' partial sums (``final``, reading them from shared memory)
    and writes the result back (``write_back``): each thread a run of ``width`` adjacent
    outputs along N, the slices summed in registers."""
    sch.reverse_compute_at(final, block_loop, preserve_unit_loops=True)
    names = [iv.var.name for iv in sch.get(final).iter_vars]  # the loops' order here
    loops = dict(zip(names, sch.get_loops(final)[-len(names):]))
    kz = loops[names[0]]  # rfactor puts the slice axis first
    i, j = loops[m_name], loops[n_name]
    width = width if _extent(sch, j) % width == 0 else 1
    j, lanes = sch.split(j, [None, width])
    others = [loop for name, loop in loops.items() if loop not in (kz, i) and name != n_name]
    sch.reorder(*others, i, j, kz, lanes)  # the unit batch loops outside
    fused = sch.fuse(i, j)
    serial, *bound = sch.split(fused, [None, *(extent for _, extent in threads)])
    for loop, (name, _) in zip(bound, threads):
        sch.bind(loop, name)
    sch.unroll(kz)
    sch.decompose_reduction(final, kz)
    sch.reverse_compute_at(write_back, bound[-1], preserve_unit_loops=True)
    if width > 1:
        sch.vectorize(sch.get_loops(write_back)[-1])


def sum_splits(sch, final, write_back, loop_names, m_name: str, n_name: str, k_name: str,
               width: int) -> None:
    """A kernel of its own adds up the parts' partial sums (``final``, from the global scratch
    buffer) over the whole output: ``SUM_THREADS`` threads a block, ``width`` adjacent outputs
    along N a thread, then the write-back (``write_back``, with any epilogue)."""
    # ``final`` kept the original loop nest, K reduced to the loop over the parts
    loops = dict(zip(loop_names, sch.get_loops(final)))
    kz, i, j = loops[k_name], loops[m_name], loops[n_name]
    width = width if _extent(sch, j) % width == 0 else 1
    j, lanes = sch.split(j, [None, width])
    others = [loops[n] for n in loop_names if n not in (m_name, n_name, k_name)]
    sch.reorder(*others, i, j, kz, lanes)
    fused = sch.fuse(*others, i, j)
    bx, tx = sch.split(fused, [None, SUM_THREADS])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.unroll(kz)
    sch.decompose_reduction(final, kz)
    sch.reverse_compute_at(write_back, tx, preserve_unit_loops=True)
    if width > 1:
        sch.vectorize(sch.get_loops(write_back)[-1])


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)
