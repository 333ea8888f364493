"""No function left on TVM's unscheduled default: small models of each family, built with
seeds only (no tuning), give every kernel a template seed or the generic CPU rule, match
PyTorch, and say so (the function table, ``default_functions``, the profile)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from tensortune.session import Session  # noqa: E402
from tensortune.settings import Settings  # noqa: E402

SCHEDULED = {"tuned", "seeded", "fallback", "view"}


class EfficientBlock(nn.Module):
    """Stem, MBConv (1x1 expand + SiLU, 5x5 depthwise + SiLU, squeeze-and-excitation, 1x1
    project, residual), a grouped 3x3 convolution, pooling and a classifier."""

    def __init__(self, c=16, expand=4):
        super().__init__()
        h = c * expand
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c),
                                  nn.SiLU())
        self.expand = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(h, h, 5, 1, 2, groups=h, bias=False), nn.BatchNorm2d(h),
                                nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(h, 8, 1), nn.SiLU(),
                                nn.Conv2d(8, h, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))
        self.grouped = nn.Sequential(nn.Conv2d(c, 2 * c, 3, 1, 1, groups=4), nn.SiLU())
        self.head = nn.Linear(2 * c, 10)

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(self.expand(x))
        x = x + self.project(y * self.se(y))
        return self.head(self.grouped(x).mean((2, 3)))


class ViTBlock(nn.Module):
    """Patch embedding, LayerNorm, attention (q, k, v reshaped, transposed and split, batched
    matmuls, softmax), a GELU MLP, a class head: 16 tokens of 48 dimensions, 2 heads."""

    def __init__(self, dim=48, heads=2, patch=8, image=32):
        super().__init__()
        self.heads = heads
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2, dim) * 0.02)
        self.ln1, self.ln2, self.ln = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(
            2, 0, 3, 1, 4)
        a = ((q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5).softmax(-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, n, d))
        x = x + self.mlp(self.ln2(x))
        return self.head(self.ln(x).mean(1))


class UNetBlock(nn.Module):
    """Two strided convolutions down, a ConvTranspose2d up, a skip concatenation, a bilinear
    resize."""

    def __init__(self, c=8):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1), nn.ReLU())
        self.down2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, 2, 1), nn.ReLU())
        self.up = nn.ConvTranspose2d(2 * c, c, 2, 2)
        self.fuse = nn.Sequential(nn.Conv2d(2 * c, c, 3, 1, 1), nn.ReLU())
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        d1 = self.down(x)
        u = self.fuse(torch.cat([self.up(self.down2(d1)), d1], 1))
        return self.out(F.interpolate(u, scale_factor=2, mode="bilinear", align_corners=False))


class ShuffleBlock(nn.Module):
    """A ShuffleNet V2 unit: channel split (a function of two outputs), a branch, concat,
    channel shuffle (reshape, transpose, reshape), max pooling."""

    def __init__(self, c=16, groups=2):
        super().__init__()
        self.groups = groups
        self.stem = nn.Sequential(nn.Conv2d(3, 2 * c, 3, 2, 1), nn.ReLU())
        self.branch = nn.Sequential(nn.Conv2d(c, c, 1), nn.ReLU(),
                                    nn.Conv2d(c, c, 3, 1, 1, groups=c), nn.Conv2d(c, c, 1),
                                    nn.ReLU())
        self.pool = nn.MaxPool2d(3, 2, 1)

    def forward(self, x):
        a, b = self.stem(x).chunk(2, 1)
        x = torch.cat([a, self.branch(b)], 1)
        n, c, h, w = x.shape
        x = x.reshape(n, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(n, c, h, w)
        return self.pool(x)


class RMSNorm(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        x = self.fc(x)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class ResMobileBlock(nn.Module):
    """A ResNet basic block and a MobileNet V2 inverted residual (ReLU6)."""

    def __init__(self, c=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.basic = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c),
                                   nn.ReLU(), nn.Conv2d(c, c, 3, 1, 1, bias=False),
                                   nn.BatchNorm2d(c))
        self.inverted = nn.Sequential(
            nn.Conv2d(c, 4 * c, 1, bias=False), nn.BatchNorm2d(4 * c), nn.ReLU6(),
            nn.Conv2d(4 * c, 4 * c, 3, 1, 1, groups=4 * c, bias=False), nn.BatchNorm2d(4 * c),
            nn.ReLU6(), nn.Conv2d(4 * c, c, 1, bias=False), nn.BatchNorm2d(c))
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(x + self.basic(x))
        x = x + self.inverted(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class SpeechBlock(nn.Module):
    """A 1-D feature encoder (strided, GELU, instance norm), a depthwise 1-D convolution with
    batch norm and SiLU, and a linear head over the sequence."""

    def __init__(self, c=24):
        super().__init__()
        self.fe = nn.Sequential(nn.Conv1d(1, c, 10, 5, bias=False), nn.GroupNorm(c, c), nn.GELU(),
                                nn.Conv1d(c, c, 3, 2), nn.GELU())
        self.dw = nn.Sequential(nn.Conv1d(c, c, 7, padding=3, groups=c), nn.BatchNorm1d(c),
                                nn.SiLU(), nn.Conv1d(c, c, 1))
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        x = self.fe(x)
        return self.fc((x + self.dw(x)).transpose(1, 2))


FAMILIES = {"efficientnet": (EfficientBlock, (1, 3, 32, 32)), "vit": (ViTBlock, (1, 3, 32, 32)),
            "unet": (UNetBlock, (1, 3, 32, 32)), "shuffle": (ShuffleBlock, (1, 3, 32, 32)),
            "rmsnorm": (RMSNorm, (1, 8, 64)), "resnet_mobilenet": (ResMobileBlock, (1, 3, 32, 32)),
            "speech": (SpeechBlock, (1, 1, 400))}


def _model(name):
    cls, shape = FAMILIES[name]
    torch.manual_seed(0)
    module = cls().eval()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return module, torch.randn(*shape)


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    return Settings(home=tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="module")
def vit(settings):
    module, x = _model("vit")
    session = Session.from_torch(module, (x,), name="vit", settings=settings)
    return module, x, session, session.build(best={})


def _check(module, x, session, compiled):
    with torch.no_grad():
        expected = module(x).numpy()
    np.testing.assert_allclose(session.run(x.numpy())[0], expected, rtol=1e-4, atol=1e-5)
    schedules = {name: info["schedule"] for name, info in compiled.functions.items()}
    assert set(schedules.values()) <= SCHEDULED, schedules
    assert compiled.default_functions() == []
    return schedules


@pytest.mark.parametrize("name", ["efficientnet", "unet", "shuffle", "rmsnorm",
                                  "resnet_mobilenet", "speech"])
def test_seeded_build_leaves_no_function_on_the_default_schedule(name, settings):
    module, x = _model(name)
    session = Session.from_torch(module, (x,), name=name, settings=settings)
    schedules = _check(module, x, session, session.build(best={}))
    if name == "efficientnet":  # conv + SiLU (x * sigmoid(x)) is the tiled template's now
        from tensortune.space import task_space

        silu = [t for t in session.extract()  # sigmoid is 1 / (1 + fast_exp(-x)) by now
                if "fast_exp" in t.name and "conv2d" in t.name]
        tiled = [t for t in silu if any(k.name.startswith("tile_")
                                        for k in task_space(t.task).knobs)]
        assert len(tiled) >= 4, [t.name for t in silu]  # stem, expand, depthwise, grouped
    if name == "shuffle":  # the channel split is two strided slices (tasks.slices), scheduled
        split = [n for n in schedules if "strided_slice" in n]
        assert split and not [n for n in schedules if n.startswith("split")], schedules
        assert all(schedules[n] in ("seeded", "tuned", "fallback") for n in split), schedules


def test_vit_block_attention_and_layer_norm_are_scheduled_and_profiled(vit):
    module, x, session, compiled = vit
    schedules = _check(module, x, session, compiled)
    assert any("layer_norm" in n for n in schedules)
    assert any("softmax" in n for n in schedules)
    # reshapes that the VM runs as views need no kernel: marked, never "default"
    report = session.profile(repeat=3).to_json()
    assert report["default_functions"] == []
    timed = {f["name"]: f["schedule"] for f in report["functions"]}
    assert timed and set(timed.values()) <= {"tuned", "seeded", "fallback"}
    assert not set(timed) & {n for n, s in schedules.items() if s == "view"}


def test_untuned_build_lists_every_kernel_as_default(vit, settings):
    _, _, session, seeded = vit
    untuned = session.build(tuned=False)
    try:
        defaults = untuned.default_functions()
        kernels = [n for n, i in untuned.functions.items() if i["schedule"] != "view"]
        assert defaults and sorted(defaults) == sorted(kernels)
        from tensortune.tasks.profile import default_function_shares

        shares = default_function_shares(untuned, repeat=2)
        assert {r["name"] for r in shares} == set(defaults)
        # each timed in the profile (medians of instrumented runs, against the plain latency)
        assert all(r["ms"] > 0 and r["share"] > 0 for r in shares)
    finally:
        session.compiled = seeded


def test_vit_block_through_onnx(tmp_path, settings):
    module, x = _model("vit")
    path = tmp_path / "vit.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter announces its deprecation
        torch.onnx.export(module, (x,), str(path), dynamo=False, input_names=["x"])
    session = Session.from_onnx(path, settings=settings)
    schedules = _check(module, x, session, session.build(best={}))
    # ONNX's attention splits q, k, v: one function (tasks.attention) reads them where the
    # projection wrote them, scheduled by its own template; no copy of them is left
    fused = {n: s for n, s in schedules.items() if n.startswith("attention")}
    assert len(fused) == 1 and set(fused.values()) <= {"seeded", "tuned"}, schedules
    assert not [n for n in schedules if "strided_slice" in n or "softmax" in n], schedules


def test_function_table_names_gpu_and_view_schedules():
    from types import SimpleNamespace

    from tensortune.tasks.compile import default_functions, function_table

    def call(name):
        return SimpleNamespace(name=name, calls=1)

    task = SimpleNamespace(key="k", workload=SimpleNamespace(flops=10))
    calls = [(call("a"), task), (call("b"), task), (call("r"), task)]
    gpu = function_table(calls, ["a"], {}, target={"kind": "cuda"}, views={"r"})
    assert [gpu[n]["schedule"] for n in "abr"] == ["tuned", "dlight", "view"]
    assert default_functions(gpu) == []
    cpu = function_table(calls, [], {}, target={"kind": "llvm"}, views={"r"})
    assert default_functions(cpu) == ["a", "b"]


def test_generic_rule_schedules_what_no_template_fits():
    """The fallback rule on a function with two outputs and a row reduction: parallel,
    vectorized, and still correct."""
    import tvm
    from tvm import te

    from tensortune.space.cpu_fallback import fallback_schedule

    a = te.placeholder((64, 128), name="a")
    k = te.reduce_axis((0, 128), "k")
    total = te.compute((64,), lambda i: te.sum(a[i, k], axis=k), name="total")
    scaled = te.compute((64, 128), lambda i, j: a[i, j] / total[i], name="scaled")
    doubled = te.compute((64, 128), lambda i, j: a[i, j] * 2.0, name="doubled")
    func = te.create_prim_func([a, scaled, doubled])
    sch = fallback_schedule(func, lanes=16)
    text = sch.mod.script()
    assert "T.vectorized" in text and "_rf" in text  # the row sum split into vector lanes
    lib = tvm.compile(sch.mod, target=tvm.target.Target({"kind": "llvm"}))
    x = np.random.default_rng(0).random((64, 128), dtype="float32") + 0.5
    outs = [tvm.runtime.tensor(np.zeros((64, 128), "float32")) for _ in range(2)]
    lib["main"](tvm.runtime.tensor(x), *outs)
    np.testing.assert_allclose(outs[0].numpy(), x / x.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(outs[1].numpy(), 2 * x, rtol=1e-6)


def test_ragged_row_reductions_are_vectorized_and_costly_producers_made_once():
    """A softmax over 37 columns (no whole vector divides it; ViT's 197 tokens alike): each
    row's maximum and sum run in vectors of partials with the last chunk peeled off, the
    partials in parallel, the exponential computed once for the sum and the normalization,
    and the result exact."""
    import tvm
    from tvm import te, topi

    from tensortune.space.cpu_fallback import fallback_schedule

    a = te.placeholder((3, 37, 37), name="a")
    out = topi.nn.fast_softmax(a, axis=-1)
    sch = fallback_schedule(te.create_prim_func([a, out]), lanes=16)
    text = sch.mod.script()
    assert text.count("_partition") >= 4, text  # max and sum: 2 x 16 lanes, then the rest
    assert "T_fast_exp = T.sblock_alloc_buffer" in text  # made once, not inlined twice
    for partial in ("T_softmax_maxelem_rf", "T_softmax_expsum_rf"):
        loops = sch.get_loops(sch.get_sblock(partial + "_init"))
        assert int(sch.get(loops[0]).kind) == 1, partial  # the rows in parallel
    lib = tvm.compile(sch.mod, target=tvm.target.Target({"kind": "llvm"}))
    x = np.random.default_rng(0).standard_normal((3, 37, 37)).astype("float32") * 4
    got = tvm.runtime.tensor(np.zeros((3, 37, 37), "float32"))
    lib["main"](tvm.runtime.tensor(x), got)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_record_of_an_older_row_wise_space_is_rebuilt_with_the_seed(settings):
    """A config recorded before the row-wise space grew knobs (``parallel``, ``reduce``, the
    rows of 0) no longer fits it: the build warns and seeds that function."""
    from tensortune.space import Config, task_space

    module, x = _model("rmsnorm")
    session = Session.from_torch(module, (x,), name="rmsnorm", settings=settings)
    rowwise = [t for t in session.extract()
               if t.tunable and "rows" in {k.name for k in task_space(t.task).knobs}]
    assert rowwise
    old = {t.key: Config({"rows": 1, "vector": 16, "unroll": 16}) for t in rowwise}
    with pytest.warns(UserWarning, match="does not belong to the current"):
        compiled = session.build(best=old)
    names = {n for t in rowwise for n in t.functions}
    assert {compiled.functions[n]["schedule"] for n in names} == {"seeded"}
    _check(module, x, session, compiled)
