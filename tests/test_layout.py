"""The whole-model layout (NHWC activations, HWIO weights), weights packed once at build time,
and the per-function profile of a compiled model."""
import numpy as np
import pytest
import torch

from tensortune.frontend import from_torch
from tensortune.measure import LocalBuilder, LocalRunner, MeasureInput
from tensortune.settings import MeasureSettings
from tensortune.space import Config, apply_config, task_space
from tensortune.tasks import (applied_functions, build_model, compile_with_metaschedule,
                              extract_tasks, fused_module, write_metaschedule_db)
from tensortune.tasks.layout import check_layout
from tensortune.tasks.profile import profile_model
from tensortune.workload import default_target


class Block(torch.nn.Module):
    """A MobileNet-like block on irregular sizes: a 3-channel stem to 24 channels (ReLU6),
    a 24 -> 72 expansion, a depthwise 3x3 and a projection to 40, on a 13x13 image."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 24, 3, padding=1)
        self.expand = torch.nn.Conv2d(24, 72, 1)
        self.dw = torch.nn.Conv2d(72, 72, 3, padding=1, groups=72)
        self.project = torch.nn.Conv2d(72, 40, 1)
        self.fc = torch.nn.Linear(40, 10)

    def forward(self, x):
        x = torch.nn.functional.relu6(self.stem(x))
        x = torch.nn.functional.relu6(self.dw(torch.nn.functional.relu6(self.expand(x))))
        x = self.project(x)
        return self.fc(x.mean((2, 3)))


@pytest.fixture(scope="module")
def target():
    return default_target(2)


@pytest.fixture(scope="module")
def block():
    torch.manual_seed(0)
    module = Block().eval()
    x = torch.randn(1, 3, 13, 13)
    with torch.no_grad():
        expected = module(x).numpy()
    return from_torch(module, (x,)), x.numpy(), expected, module


@pytest.fixture(scope="module")
def tasks(block, target):
    return extract_tasks(block[0], target)


def _conv_tasks(tasks):
    return [t for t in tasks if "conv2d" in t.name]


def test_activations_stay_channels_last_between_layers(block, tasks):
    convs = _conv_tasks(tasks)
    assert len(convs) == 4 and all(t.tunable for t in convs)
    shapes = {t.task.workload.input_shapes[0][1:] for t in convs}
    assert shapes == {(13, 13, 3), (13, 13, 24), (13, 13, 72)}  # N H W C
    weights = sorted(t.task.workload.input_shapes[1] for t in convs)
    assert weights == [(1, 1, 24, 72), (1, 1, 72, 40), (3, 3, 1, 72), (3, 3, 3, 24)]  # H W I O
    # ReLU6 fuses into its convolution instead of being wrapped in transposes
    assert not any("clip" in t.name for t in tasks)
    transposes = [t for t in tasks if "transpose" in t.name]
    assert len(transposes) <= 2, [t.name for t in transposes]  # the model's input and output


def test_layout_names_are_checked():
    assert check_layout("NHWC") == "nhwc"
    with pytest.raises(ValueError, match="unknown layout 'nchw4c'.*nhwc, nchw"):
        check_layout("nchw4c")


def _config(task, **values) -> Config:
    """A valid config of ``task``'s space with the given knob values (the rest from its first
    seed-free valid sample)."""
    space = task_space(task.task)
    rng = np.random.default_rng(0)
    for _ in range(200):
        config = Config({**dict(space.sample(rng)), **values})
        if config in space:
            try:
                apply_config(task.task, config, space)
            except Exception:  # an invalid register tile: draw again
                continue
            return config
    raise AssertionError("no valid config found")


def test_a_packed_weight_is_split_off_timed_without_packing_and_verified(tasks):
    dw = next(t for t in _conv_tasks(tasks) if t.task.workload.input_shapes[1] == (3, 3, 1, 72))
    config = _config(dw, pack_param_0="root", vector_axis="ff")
    inputs = [MeasureInput(dw.task, config)]
    settings = MeasureSettings(number=1, repeat=1, min_repeat_ms=1, threads=2)
    with LocalBuilder(workers=1) as builder, LocalRunner(settings) as runner:
        builds = builder.build(inputs)
        (result,) = runner.run(inputs, builds)
    assert builds[0].prepack is not None, "a root pack of a constant weight becomes a prepack"
    assert builds[0].prepack["inputs"] == [1] and len(builds[0].prepack["shapes"][0]) == 5
    assert result.ok and result.verified, result.message


def test_the_model_holds_packed_weights_and_matches_torch(block, tasks, target):
    model, x, expected, _ = block
    best = {t.key: _config(t, pack_param_0="root") for t in _conv_tasks(tasks)}
    compiled = build_model(model, target, best)
    (got,) = compiled.run(x)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    # the packing ran once, at build time: no packing function is left to call
    source = compiled._library.mod.inspect_source() if hasattr(compiled._library, "mod") else ""
    assert "weight_prepack" not in source
    names = set(compiled.functions)
    assert {n for t in _conv_tasks(tasks) for n in t.functions} <= names
    # a second, different input: the reused input buffer is refilled
    x2 = np.random.default_rng(1).standard_normal(x.shape).astype("float32")
    with torch.no_grad():
        expected2 = block[3](torch.from_numpy(x2)).numpy()
    np.testing.assert_allclose(compiled.run(x2)[0], expected2, rtol=1e-4, atol=1e-4)


def test_profile_splits_latency_into_functions_with_flops(block, tasks, target):
    model, x, _, _ = block
    best = {t.key: _config(t) for t in _conv_tasks(tasks)}
    compiled = build_model(model, target, best)
    report = profile_model(compiled, repeat=3, peak_gflops=100.0)
    names = [f.name for f in report.functions]
    assert len(names) == len(set(names))
    convs = [f for f in report.functions if "conv2d" in f.name]
    assert len(convs) == 4 and all(f.flops > 0 and f.seconds > 0 and f.tuned for f in convs)
    assert report.latency_s > 0 and report.kernels_s > 0
    doc = report.to_json()
    assert doc["peak_gflops"] == 100.0
    assert all(0 <= f["share"] and f["of_peak"] is not None for f in doc["functions"])


def test_metaschedule_database_applies_to_the_nhwc_model(block, tasks, target, tmp_path):
    model, x, expected, _ = block
    best = {t.key: _config(t, pack_param_0="root") for t in _conv_tasks(tasks)}
    work_dir = write_metaschedule_db(tasks, best, tmp_path / "ms")
    tuned = {name for t in tasks if t.key in best for name in t.functions}
    assert set(applied_functions(work_dir, model, target)) == tuned
    compiled = compile_with_metaschedule(work_dir, model, target)
    np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-4)


def test_fused_functions_mark_constant_weights_layout_free(block, target):
    fused = fused_module(block[0], target)
    convs = [f for gv, f in fused.functions.items() if "conv2d" in gv.name_hint]
    assert convs and all(list(f.attrs["layout_free_buffers"]) for f in convs)


def test_weight_transposes_fold_in_numpy_to_what_fold_constant_gives(block):
    import tvm
    from tvm import relax

    from tensortune.tasks.extract import prepare
    from tensortune.tasks.layout import _DESIRED, clip_as_min_max, fold_constant_transposes

    model = block[0]
    converted = tvm.transform.Sequential([
        clip_as_min_max(), relax.transform.ConvertLayout(_DESIRED),
        relax.transform.CanonicalizeBindings()])(prepare(model.mod, {"layout": "nchw"}))
    folded = fold_constant_transposes()(converted)
    tvm.ir.assert_structural_equal(relax.transform.FoldConstant()(folded),
                                   relax.transform.FoldConstant()(converted), map_free_vars=True)
    left = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.permute_dims" \
                and isinstance(expr.args[0], tvm.ir.GenericConst):
            left.append(expr)

    relax.analysis.post_order_visit(converted["main"].body, visit)
    before, left = left, []
    relax.analysis.post_order_visit(folded["main"].body, visit)
    assert len(before) >= 4 and not left  # at least one per convolution, all folded by numpy


class Decoder(torch.nn.Module):
    """A U-Net-like decoder on small sizes: a 2x2 stride-2 transposed convolution (kernel =
    stride, U-Net's) between convolutions and concatenated with a skip, a nearest upsampling,
    and a 3x3 stride-2 transposed convolution with padding and output padding."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.down = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.up = torch.nn.ConvTranspose2d(16, 8, 2, 2)
        self.fuse = torch.nn.Conv2d(16, 8, 3, padding=1)
        self.up2 = torch.nn.ConvTranspose2d(8, 4, 3, 2, padding=1, output_padding=1)
        self.resize = torch.nn.Upsample(scale_factor=2)
        self.mix = torch.nn.Conv2d(8, 4, 1)
        self.head = torch.nn.Conv2d(8, 2, 1)

    def forward(self, x):
        skip = torch.relu(self.stem(x))
        y = torch.relu(self.fuse(torch.cat((skip, self.up(torch.relu(self.down(skip)))), 1)))
        return self.head(torch.relu(torch.cat((self.up2(y), self.mix(self.resize(y))), 1)))


@pytest.fixture(scope="module")
def decoder():
    torch.manual_seed(0)
    module = Decoder().eval()
    x = torch.randn(1, 3, 10, 12)
    with torch.no_grad():
        expected = module(x).numpy()
    return from_torch(module, (x,)), x.numpy(), expected


def test_transposed_convolutions_build_in_the_nhwc_pipeline_and_match_torch(decoder, target):
    from tvm import relax

    from tensortune.tasks.extract import prepare

    model, x, expected = decoder
    layouts = []

    def visit(expr):
        name = getattr(getattr(expr, "op", None), "name", "")
        if isinstance(expr, relax.Call) and name.startswith(("relax.nn.conv2d", "relax.image")):
            layouts.append((name.split(".")[-1], str(expr.attrs.layout if "resize" in name
                                                         else expr.attrs.data_layout)))

    relax.analysis.post_order_visit(prepare(model.mod)["main"].body, visit)
    # each transposed one is an ordinary NHWC convolution and a depth-to-space copy: kernel =
    # stride a 1x1 one to 2*2*8 channels; the 3x3 stride-2 one (padding 1, output padding 1)
    # a 2x2 one to 2*2*4 channels, its phases' unused taps zero; every convolution and the
    # upsampling keep channels last
    assert sorted(layouts) == [("conv2d", "NHWC")] * 7 + [("resize2d", "NHWC")]
    tasks = extract_tasks(model, target)
    assert not [t for t in tasks if "conv2d_transpose" in t.name]
    for kernel in ((1, 1, 16, 32), (2, 2, 8, 16)):
        ones = [t for t in _conv_tasks(tasks) if t.task.workload.input_shapes[1] == kernel]
        assert len(ones) == 1 and ones[0].tunable, kernel
    compiled = build_model(model, target, {})  # every function with its template's seed
    np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-5)


SUBPIXEL = [(4, 2, 1, 0), (3, 2, 1, 1), (5, 3, 2, 2), (3, 1, 1, 0), (2, 2, 0, 0), (4, 2, 3, 1)]


class Upsamplers(torch.nn.Module):
    """After a convolution (whose NHWC output they take), one transposed convolution of each
    kind in ``SUBPIXEL`` (kernel, stride, padding, output padding): FPN's and GANs' 4x4
    stride-2 upsampling, odd strides, a stride of 1, U-Net's kernel = stride, a padding wider
    than a phase's taps; 24 -> 40 channels on an 11x13 input."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 24, 3, padding=1)
        self.ups = torch.nn.ModuleList(torch.nn.ConvTranspose2d(24, 40, k, s, p, o)
                                       for k, s, p, o in SUBPIXEL)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        return tuple(up(x) for up in self.ups)


def test_transposed_convolutions_as_subpixel_convolutions_match_torch(target):
    torch.manual_seed(0)
    module = Upsamplers().eval()
    x = torch.randn(1, 3, 11, 13)
    with torch.no_grad():
        expected = [y.numpy() for y in module(x)]
    model = from_torch(module, (x,))
    tasks = extract_tasks(model, target)
    assert not [t for t in tasks if "conv2d_transpose" in t.name], [t.name for t in tasks]
    compiled = build_model(model, target, {})
    outputs = compiled.run(x.numpy())
    assert len(outputs) == len(SUBPIXEL)
    for got, want, kind in zip(outputs, expected, SUBPIXEL):
        assert got.shape == want.shape, kind
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(kind))
