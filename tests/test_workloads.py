"""Workloads: references agree with the TE definitions, keys are stable, bad shapes are refused."""
import numpy as np
import pytest

from tensortune.workload import (BatchMatmul, Conv2d, Dense, Matmul, WorkloadError,
                                 workload_from_dict)

TINY = [
    Matmul(m=5, n=7, k=3),
    Dense(batch=3, in_features=6, out_features=4),
    Dense(batch=3, in_features=6, out_features=4, bias=True),
    BatchMatmul(b=2, m=3, n=5, k=4),
    Conv2d(n=1, c=3, h=7, w=7, filters=4, kh=3, kw=3, stride=2, padding=1),
    Conv2d(n=2, c=2, h=9, w=8, filters=3, kh=3, kw=2, dilation=2),
    Conv2d(n=1, c=4, h=6, w=6, filters=6, kh=3, kw=3, padding=1, groups=2),
    Conv2d(n=1, c=4, h=6, w=6, filters=4, kh=3, kw=3, stride=2, padding=2, dilation=2, groups=4),
]


def _run_default_build(workload, inputs):
    """The TE definition compiled with no schedule at all: the semantics, not the tuning."""
    import tvm

    mod = tvm.IRModule({"main": workload.prim_func()})
    module = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})).jit()
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(workload.output_shape, workload.dtype), dev)
    module["main"](*[tvm.runtime.tensor(a, dev) for a in inputs], out)
    return out.numpy()


@pytest.mark.parametrize("workload", TINY, ids=lambda w: w.describe())
def test_reference_matches_te_definition(workload):
    inputs = workload.random_inputs(seed=1)
    assert [a.shape for a in inputs] == workload.input_shapes
    ref = workload.reference(*inputs)
    assert ref.shape == workload.output_shape
    np.testing.assert_allclose(_run_default_build(workload, inputs), ref, rtol=1e-5, atol=1e-5)


def test_conv2d_output_shapes():
    # (7 + 2 - 3) // 2 + 1 = 4; dilation 2 makes a 3-tap kernel span 5 rows, 2 taps span 3
    assert Conv2d(n=1, c=3, h=7, w=7, filters=4, kh=3, kw=3, stride=2, padding=1).output_shape == (1, 4, 4, 4)
    assert Conv2d(n=2, c=2, h=9, w=8, filters=3, kh=3, kw=2, dilation=2).output_shape == (2, 3, 5, 6)


def test_flops_hand_checked():
    assert Matmul(m=2, n=3, k=4).flops == 2 * 2 * 3 * 4
    assert Dense(batch=2, in_features=3, out_features=5).flops == 2 * 2 * 3 * 5
    assert BatchMatmul(b=2, m=3, n=4, k=5).flops == 2 * 2 * 3 * 4 * 5
    # output 4x4, each of the 6 filters sees c/groups = 2 channels of a 3x3 window
    conv = Conv2d(n=1, c=4, h=8, w=8, filters=6, kh=3, kw=3, stride=2, padding=1, groups=2)
    assert conv.flops == 2 * 1 * 6 * 4 * 4 * 2 * 3 * 3 == 3456


def test_key_is_stable_and_distinguishes_shapes():
    # Pinned: record logs are matched by this key, so changing it orphans every existing log.
    assert Matmul(m=512, n=512, k=512).key == "matmul-fa6fe983c6"
    assert Matmul(m=512, n=512, k=512).key == Matmul(m=512, n=512, k=512).key
    keys = {w.key for w in TINY} | {Matmul(m=512, n=512, k=256).key, Matmul(m=512, n=256, k=512).key}
    assert len(keys) == len(TINY) + 2
    assert Dense(batch=1, in_features=2, out_features=3).key != Dense(
        batch=1, in_features=2, out_features=3, bias=True).key


@pytest.mark.parametrize("workload", TINY, ids=lambda w: w.describe())
def test_dict_round_trip(workload):
    d = workload.to_dict()
    assert d["op"] == workload.op
    back = workload_from_dict(d)
    assert back == workload and type(back) is type(workload) and back.key == workload.key


@pytest.mark.parametrize("build, words", [
    (lambda: Matmul(m=0, n=4, k=4), ["m", "positive"]),
    (lambda: BatchMatmul(b=-1, m=2, n=2, k=2), ["b", "positive"]),
    (lambda: Dense(batch=2, in_features=3, out_features=0), ["out_features", "positive"]),
    (lambda: Conv2d(n=1, c=4, h=5, w=5, filters=4, kh=3, kw=3, padding=-1), ["padding"]),
    (lambda: Conv2d(n=1, c=6, h=5, w=5, filters=4, kh=1, kw=1, groups=4), ["groups=4", "6"]),
    (lambda: Conv2d(n=1, c=4, h=5, w=5, filters=6, kh=1, kw=1, groups=4), ["groups=4", "6"]),
    (lambda: Conv2d(n=1, c=1, h=3, w=3, filters=1, kh=5, kw=5, padding=0), ["empty", "5x5"]),
    (lambda: Conv2d(n=1, c=1, h=4, w=4, filters=1, kh=3, kw=3, dilation=2), ["empty", "dilation 2"]),
    (lambda: workload_from_dict({"op": "softmax", "n": 3}), ["unknown operator", "softmax"]),
    (lambda: workload_from_dict({"m": 3}), ["unknown operator", "None"]),
    (lambda: workload_from_dict({"op": "matmul", "m": 2, "n": 2, "k": 2, "batch": 4}),
     ["unknown parameter", "batch"]),
])
def test_bad_workloads_are_refused_by_name(build, words):
    with pytest.raises(WorkloadError) as err:
        build()
    for word in words:
        assert word in str(err.value)


def test_padding_makes_a_large_kernel_valid():
    # 3x3 input, 5x5 kernel: empty without padding, one output pixel with padding 1
    assert Conv2d(n=1, c=1, h=3, w=3, filters=1, kh=5, kw=5, padding=1).output_shape == (1, 1, 1, 1)


def test_host_cpu_trusts_llvm_then_cpuid_family_then_isa_flags():
    from tensortune.workload.task import amd_core, host_cpu

    def known(name):
        return True

    zen4 = ("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
            "flags\t\t: fpu avx2 avx512f avx512bw\n")
    zen3 = "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nflags\t\t: fpu avx2\n"
    zen5 = "vendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nflags\t\t: avx512f\n"
    amd_unknown = "vendor_id\t: AuthenticAMD\ncpu family\t: 99\nflags\t\t: fpu avx2 avx512f\n"
    intel_amx = "vendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n"
    intel_old = "vendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx512f\n"
    # the Zen 4 that used to be called znver5 because it has AVX-512
    assert host_cpu("x86-64-v4", zen4, known) == "znver4"
    assert host_cpu("znver4", zen4, known) == "znver4"
    assert host_cpu("znver3", zen3, known) == "znver3"
    assert host_cpu("x86-64-v3", zen3, known) == "znver3"
    assert host_cpu("x86-64-v4", zen5, known) == "znver5"
    assert host_cpu("x86-64-v4", amd_unknown, known) == "znver4"
    assert host_cpu("x86-64-v4", zen4, lambda name: False) == "x86-64-v4"
    assert host_cpu("rocketlake", intel_amx, known) == "sapphirerapids"
    assert host_cpu("graniterapids", intel_amx, known) == "graniterapids"
    assert host_cpu("skylake-avx512", intel_old, known) == "skylake-avx512"
    assert host_cpu("rocketlake", intel_amx, lambda name: False) == "rocketlake"
    assert [amd_core(25, m) for m in (1, 17, 33, 97, 160)] == \
        ["znver3", "znver4", "znver3", "znver4", "znver4"]
    assert amd_core(23, 49) == "znver2" and amd_core(6, 1) is None
