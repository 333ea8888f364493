"""The CPU template's expert seeds (valid on irregular shapes, measured first) and its row-wise
space for functions that are not one tiled reduction (softmax, layer norm, elementwise)."""
import numpy as np
import pytest
import torch

from tensortune.frontend import from_torch
from tensortune.measure import LocalBuilder, LocalRunner, MeasureInput
from tensortune.settings import MeasureSettings, SearchSettings
from tensortune.space import apply_config, task_seeds, task_space
from tensortune.space.seeds import cpu_seeds
from tensortune.tasks import extract_tasks
from tensortune.tuner.evaluator import Evaluator
from tensortune.tuner.loop import TuneLoop
from tensortune.search import STRATEGIES
from tensortune.workload import (BatchMatmul, Conv2d, Dense, Matmul, Task, default_target,
                                vector_lanes)
from tests.fakes import FakeBuilder, ReplayRunner
from tests.template_checks import matching_configs


@pytest.fixture(scope="module")
def target():
    return default_target(2)


def _model_tasks(module, shape, target):
    torch.manual_seed(0)
    model = from_torch(module.eval(), (torch.randn(*shape),))
    return [t for t in extract_tasks(model, target) if t.tunable]


class Irregular(torch.nn.Module):
    """Channels 3 -> 24 -> 120 -> 200 on a 37x37 image, a depthwise 3x3 at stride 2, a dense."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 24, 3, padding=1)
        self.up = torch.nn.Conv2d(24, 120, 1)
        self.dw = torch.nn.Conv2d(120, 120, 3, stride=2, padding=1, groups=120)
        self.out = torch.nn.Conv2d(120, 200, 3, padding=1)
        self.fc = torch.nn.Linear(200, 72)

    def forward(self, x):
        x = torch.relu(self.dw(torch.relu(self.up(torch.relu(self.stem(x))))))
        return self.fc(torch.relu(self.out(x)).mean((2, 3)))


@pytest.mark.parametrize("lanes", [8, 16])
def test_seeds_are_valid_schedules_on_irregular_shapes(lanes):
    # the target's ISA decides the space (AVX2 fuses the 37x37 1x1 layer's positions), so the
    # seeds' width goes with it; configs are only applied here, never run
    target = {"kind": "llvm", "mcpu": "haswell" if lanes == 8 else "skylake-avx512",
              "num-cores": 2}
    tasks = _model_tasks(Irregular(), (1, 3, 37, 37), target)
    convs = [t for t in tasks if "conv2d" in t.name]
    # the 120 -> 200 3x3 runs as Winograd (input transform, batched GEMM, output transform)
    assert len(convs) == 3 and sum("winograd" in t.name for t in tasks) == 2
    for t in tasks:
        space = task_space(t.task)
        seeds = cpu_seeds(space, t.task.workload.prim_func(), lanes=lanes, threads=2)
        assert seeds, f"no seed for {t.describe()}"
        assert len(set(seeds)) == len(seeds) and all(c in space for c in seeds)
        for config in seeds:
            apply_config(t.task, config, space)  # raises if the template refuses it
    for t in convs:  # convolutions vectorize their output channels, whole vectors when they can
        first = cpu_seeds(task_space(t.task), t.task.workload.prim_func(), lanes=lanes)[0]
        assert first["vector_axis"] == "ff"
        channels = t.task.workload.output_shape[-1]
        assert first["tile_ff"][-1] % (lanes if channels % lanes == 0 else 1) == 0
        assert first["pack_param_0"] == "root"  # the weight is packed once, at build time


class Stems(torch.nn.Module):
    """Stems of three colours: a 7x7 at stride 2 to 24 channels, a 6x6 at stride 2 to 72 with
    SiLU (YOLOv5's), on an image of 37 x 38."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 24, 7, stride=2, padding=3)
        self.b = torch.nn.Conv2d(3, 72, 6, stride=2, padding=2)

    def forward(self, x):
        b = torch.nn.functional.silu(self.b(x)).mean((2, 3))
        return torch.relu(self.a(x)).mean((2, 3)) + b.narrow(1, 0, 24)


@pytest.mark.parametrize("lanes", [8, 16])
def test_a_stems_window_streams_inside_the_register_tile_from_a_padded_copy(target, lanes):
    """Three input channels: with the window outside the tile the accumulators went to memory
    after every 3 FMAs (YOLOv5s's and ResNeXt's stems ran 2-2.3x slower on Zen 3), and an
    inlined padding checks bounds on every broadcast. The first seeds take the whole window
    inside the tile and pad up front; the other layers' recipe follows; all compute the conv."""
    stems = [t for t in _model_tasks(Stems(), (1, 3, 37, 38), target) if "conv2d" in t.name]
    assert len(stems) == 2
    for t in stems:
        space = task_space(t.task)
        seeds = cpu_seeds(space, t.task.workload.prim_func(), lanes=lanes, threads=2)
        k = {24: 7, 72: 6}[t.task.workload.output_shape[-1]]
        first = seeds[0]
        assert (first["tile_ry"], first["tile_rx"], first["tile_rc"]) == ((1, k), (1, k), (1, 3))
        assert first["producer_at"] == "root"
        assert any(c["tile_rx"] == (k, 1) and c["producer_at"] == "inline" for c in seeds)
        assert len(matching_configs(t.task, space, seeds[:4] + seeds[-2:])) == 6


class Late1x1(torch.nn.Module):
    """ResNeXt's late 1x1 convolutions: 256 -> 512 at 14x14, then 512 -> 1024 at 7x7."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(256, 512, 1)
        self.b = torch.nn.Conv2d(512, 1024, 1, stride=2)

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.a(x))))


@pytest.mark.parametrize("lanes,most", [(8, 12), (16, 30)])
def test_register_tiles_fit_the_isas_vector_registers(target, lanes, most):
    """AVX2 has 16 vector registers: 14 accumulators spilled on Zen 3 (ResNeXt-50's 1x1
    convolutions 1.2-1.5x slower than 8), so its seeds keep two W vectors and a broadcast
    free; AVX-512's 32 also take 30 where rows allow no more (7 of a 7x7 layer)."""
    tasks = [t for t in _model_tasks(Late1x1(), (1, 256, 14, 14), target) if "conv2d" in t.name]
    assert len(tasks) == 2
    for t in tasks:
        seeds = cpu_seeds(task_space(t.task), t.task.workload.prim_func(), lanes=lanes)
        tiles = [c["tile_ff"][-1] // lanes * c["tile_xx"][-1] * c["tile_yy"][-1] for c in seeds]
        assert seeds and max(tiles) <= most, (t.name, tiles)
        assert max(tiles) >= 7  # at least a vector on every row of a 7-wide image


@pytest.mark.parametrize("lanes", [8, 16])
def test_channels_just_short_of_whole_vectors_are_padded_and_a_prime_count_gets_a_ragged_tile(
        target, lanes):
    """ShuffleNet's 58 and 116 channels (2- and 4-lane tiles at a fifth of Zen 3's peak) are
    padded to 64 and 120, whole 8-lane vectors, and the padded seeds compute the convolution.
    29 channels, fewer than a padding pays for, take 29 lanes (16 + 8 + 4 + 1 with AVX-512),
    a tile LLVM vectorizes only fully unrolled and unblocked (10x slower under unroll 16 or
    inside a cache block)."""
    inputs = []
    for channels, padded in ((116, 120), (58, 64)):
        [conv] = [t.task for t in _model_tasks(torch.nn.Conv2d(channels, channels, 1),
                                               (1, channels, 28, 28), target)
                  if "conv2d" in t.name]
        space = task_space(conv)
        extents = {k.name: k.extent for k in space.knobs if hasattr(k, "extent")}
        assert extents["tile_ff"] == padded and extents["tile_rc"] == channels
        seeds = cpu_seeds(space, conv.workload.prim_func(), lanes=lanes, threads=2)
        assert seeds and all(c["tile_ff"][-1] % 8 == 0 for c in seeds)
        inputs += [MeasureInput(conv, c) for c in seeds[:2]]
    [prime] = [t.task for t in _model_tasks(torch.nn.Conv2d(16, 29, 1), (1, 16, 28, 28), target)
               if "conv2d" in t.name]
    space = task_space(prime)
    seeds = cpu_seeds(space, prime.workload.prim_func(), lanes=16, threads=2)
    assert {c["tile_ff"][-1] for c in seeds} == {29}
    for c in seeds:  # four registers a row: at most seven rows of them
        rows = np.prod([c[k][-1] for k in ("tile_xx", "tile_yy")])
        assert c["unroll"] == 512 and c["tile_ff"][2] == c["tile_xx"][2] == 1 and rows * 4 <= 32
    inputs.append(MeasureInput(prime, seeds[0]))
    settings = MeasureSettings(number=1, repeat=1, min_repeat_ms=1, threads=2)
    with LocalBuilder(workers=2) as builder, LocalRunner(settings) as runner:
        results = runner.run(inputs, builder.build(inputs))
    for inp, result in zip(inputs, results):  # the runner checks against numpy's reference
        assert result.ok and result.verified, (dict(inp.config), result.message)


def test_twelve_channels_take_a_widened_half_vector_or_the_image_rows(target):
    """A 3-D U-Net's 12-channel outputs: 12 lanes split into three 4-lane registers (and
    spilled under 14 rows), 6 lanes run as one 8-lane register: the first seeds take 6 lanes
    under twice the rows, and the tile stays blocked (it is not ragged). Every other seed
    vectorizes the image rows instead (``xx/copy``), read from a padded copy laid out
    rows-innermost, with the 12 channels unrolled; all compute the convolution."""
    [conv] = [t.task for t in _model_tasks(torch.nn.Conv2d(24, 12, 3, padding=1),
                                           (1, 24, 37, 40), target) if "conv2d" in t.name]
    space = task_space(conv)
    seeds = cpu_seeds(space, conv.workload.prim_func(), lanes=16, threads=2)
    assert seeds[0]["vector_axis"] == "ff" and seeds[0]["tile_ff"][-1] == 6
    assert seeds[0]["unroll"] == 16
    assert {c["tile_ff"][-1] for c in seeds if c["vector_axis"] == "ff"} >= {6, 4}
    rows = [c for c in seeds if c["vector_axis"] == "xx/copy"]
    assert rows and rows == seeds[1::2][:len(rows)]
    assert 12 in {c["tile_ff"][-1] for c in rows}  # every channel unrolled, one row of 8
    assert all(c["tile_xx"][-1] % 8 == 0 for c in rows)
    assert len(matching_configs(conv, space, seeds)) == len(seeds)
    # 37 columns (a prime): no vector divides them, no seed vectorizes them
    [prime] = [t.task for t in _model_tasks(torch.nn.Conv2d(24, 12, 3, padding=1),
                                            (1, 24, 40, 37), target) if "conv2d" in t.name]
    assert all(c["vector_axis"] == "ff" for c in cpu_seeds(
        task_space(prime), prime.workload.prim_func(), lanes=16, threads=2))
    # a 24-channel output fills a vector: no such choice, its space as it was
    [wide] = [t.task for t in _model_tasks(torch.nn.Conv2d(24, 24, 3, padding=1),
                                           (1, 24, 37, 40), target) if "conv2d" in t.name]
    choices = next(k for k in task_space(wide).knobs if k.name == "vector_axis").options
    assert choices == ("ff", "xx", "yy"), choices


def test_seeds_for_operator_workloads_and_their_target(target):
    task = Task(Matmul(m=200, n=120, k=72), target)
    seeds = task_seeds(task)
    assert seeds and seeds[0]["vector_axis"] == "j"
    # whole vectors, or whole half vectors where no multiple of the vector divides 120
    lanes = vector_lanes(target)
    assert seeds[0]["tile_j"][-1] % (lanes if 120 % lanes == 0 else lanes // 2) == 0
    conv = Task(Conv2d(n=1, c=24, h=37, w=37, filters=72, kh=3, kw=3, padding=1), target)
    assert all(c in task_space(conv) for c in task_seeds(conv))


def test_vector_lanes_follow_the_targets_isa():
    assert vector_lanes({"kind": "llvm", "mcpu": "skylake-avx512"}) == 16
    assert vector_lanes({"kind": "llvm", "mcpu": "znver3"}) == 8
    assert vector_lanes({"kind": "cuda", "arch": "sm_90"}) == 8


def test_the_loop_measures_the_seeds_before_anything_else(target):
    task = Task(Matmul(m=64, n=64, k=64), target)
    space = task_space(task)
    seeds = task_seeds(task, space)
    runner = ReplayRunner(lambda config: 1e-3)
    builder = FakeBuilder()
    loop = TuneLoop(space, STRATEGIES["sa"], None, SearchSettings(batch_size=4), seeds=seeds)
    evaluator = Evaluator(task, builder, runner, budget=len(seeds) + 4)
    loop.step(evaluator)
    assert builder.built == seeds[:4]
    while evaluator.remaining:
        loop.step(evaluator)
    assert builder.built[:len(seeds)] == seeds and len(builder.built) == len(seeds) + 4


class Attention(torch.nn.Module):
    """Softmax over the last axis, a layer norm and GELU: BERT's untiled functions."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(48)

    def forward(self, q, k):
        scores = torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1)
        return torch.nn.functional.gelu(self.norm(scores @ k))


def test_softmax_layer_norm_and_elementwise_functions_are_tuned_and_verified(target):
    torch.manual_seed(0)
    model = from_torch(Attention().eval(), (torch.randn(2, 24, 48), torch.randn(2, 24, 48)))
    tasks = extract_tasks(model, target)
    rowwise = [t for t in tasks if t.tunable and "rows" in {k.name for k in
                                                            task_space(t.task).knobs}]
    names = " ".join(t.name for t in rowwise)
    assert "softmax" in names and "layer_norm" in names, [t.name for t in tasks]
    settings = MeasureSettings(number=1, repeat=1, min_repeat_ms=1, threads=2)
    inputs = []
    for t in rowwise:
        space = task_space(t.task)
        inputs += [MeasureInput(t.task, c) for c in task_seeds(t.task, space)[:2]]
        inputs.append(MeasureInput(t.task, space.sample(np.random.default_rng(0))))
    with LocalBuilder(workers=2) as builder, LocalRunner(settings) as runner:
        results = runner.run(inputs, builder.build(inputs))
    for inp, result in zip(inputs, results):
        assert result.ok and result.verified, (inp.task.workload.name, dict(inp.config),
                                               result.message)


@pytest.mark.parametrize("workload", [
    Matmul(m=197, n=48, k=40),  # ViT's 197 tokens: prime, no register tile of rows divides it
    Dense(batch=197, in_features=40, out_features=48, bias=True),
    BatchMatmul(b=2, m=197, n=197, k=24),  # attention's scores: 197 columns too
])
def test_rows_no_register_tile_divides_are_padded_to_one_that_does(target, workload):
    task = Task(workload, target)
    space = task_space(task)
    extents = {k.name: k.extent for k in space.knobs if hasattr(k, "extent")}
    assert extents["tile_i"] == 200  # padded to a multiple of 8 rows
    seeds = task_seeds(task, space)
    assert seeds[0]["tile_i"][-1] > 1 and seeds[0]["tile_j"][-1] % 16 == 0
    inputs = [MeasureInput(task, c) for c in seeds[:2]]
    settings = MeasureSettings(number=1, repeat=1, min_repeat_ms=1, threads=2)
    with LocalBuilder(workers=2) as builder, LocalRunner(settings) as runner:
        results = runner.run(inputs, builder.build(inputs))
    for inp, result in zip(inputs, results):  # the runner checks against numpy's reference
        assert result.ok and result.verified, (dict(inp.config), result.message)


# 440 at 14x14 (RegNet-Y's first stage-4 block): at 7x7 an AVX2 host fuses its positions and
# keeps the 440 channels (test_avx2_tiles_a_short_rows_positions_six_at_a_time)
@pytest.mark.parametrize("channels, padded, size", [(255, 256, 10), (440, 448, 14)])
def test_outputs_just_short_of_a_vector_multiple_are_padded_and_keep_their_names(
        target, channels, padded, size):
    """YOLO's detection head (255 channels: 17-lane tiles otherwise) and RegNet's 440-channel
    layers (2.5 vectors, as ONNX Runtime pads them too): a 1x1 convolution is padded to a
    multiple of 16 once its window axes of one are dropped; its knobs keep their names, the
    weight's padded copy is made once (split off as a prepack, as a packed weight is), and the
    padded seeds compute what numpy does."""
    from tensortune.measure.prepack import has_prepack

    tasks = _model_tasks(torch.nn.Conv2d(16, channels, 1), (1, 16, size, size), target)
    task = next(t.task for t in tasks if "conv2d" in t.name)
    space = task_space(task)
    extents = {k.name: k.extent for k in space.knobs if hasattr(k, "extent")}
    assert extents["tile_ff"] == padded and "tile_rc" in extents and "tile_ry" not in extents
    seeds = task_seeds(task, space)
    assert seeds[0]["vector_axis"] == "ff" and seeds[0]["tile_ff"][-1] % 16 == 0
    assert all(has_prepack(apply_config(task, c, space).mod["main"]) for c in seeds[:2])
    inputs = [MeasureInput(task, c) for c in seeds[:2]]
    settings = MeasureSettings(number=1, repeat=1, min_repeat_ms=1, threads=2)
    with LocalBuilder(workers=2) as builder, LocalRunner(settings) as runner:
        results = runner.run(inputs, builder.build(inputs))
    for inp, result in zip(inputs, results):
        assert result.ok and result.verified, (dict(inp.config), result.message)


class ShortRows(torch.nn.Module):
    """MobileNet V3's last stage: 1x1 convolutions at 7x7 (24 -> 72 with HardSwish, whose
    input is read twice, then 72 -> 40 with a residual's add), and one at stride 2."""

    def __init__(self):
        super().__init__()
        self.expand = torch.nn.Conv2d(24, 72, 1)
        self.project = torch.nn.Conv2d(72, 24, 1)
        self.down = torch.nn.Conv2d(24, 40, 1, stride=2)

    def forward(self, x):
        return self.down(x + self.project(torch.nn.functional.hardswish(self.expand(x))))


def test_avx2_tiles_a_short_rows_positions_six_at_a_time(target):
    """With AVX2's 16 registers a 7-wide row takes 7 accumulators at most (ResNeXt-50's 7x7
    1x1 convolutions at 40% of Zen 3's peak): a stride-1 1x1 convolution's 49 positions
    (or a prime row's 169) become one axis padded to 54, six to a tile (1.2x faster there),
    or to 50, two to a tile, where the channels are a multiple of five vectors but not of
    two. AVX-512 keeps its
    rows, and so do a strided convolution and one whose channels are padded; the fused
    seeds, built for an AVX2 CPU (which every x86 host here runs), compute what numpy does."""
    avx2 = {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}
    tasks = [t.task for t in _model_tasks(ShortRows(), (1, 24, 7, 7), avx2) if "conv2d" in t.name]
    assert len(tasks) == 3
    inputs = []
    for task in tasks:
        extents = {k.name: k.extent for k in task_space(task).knobs if hasattr(k, "extent")}
        wide = Task(task.workload, {**avx2, "mcpu": "skylake-avx512"})
        rows = {k.name for k in task_space(wide).knobs}
        assert {"tile_yy", "tile_xx"} <= rows and "tile_yy_xx" not in rows
        if "tile_yy_xx" not in extents:  # the strided one
            assert task.workload.prim_func().params[0].shape[1] == 7
            continue
        assert extents["tile_yy_xx"] == 54 and "tile_ry" not in extents
        seeds = task_seeds(task)
        tiles = {(c["tile_yy_xx"][-1], c["tile_ff"][-1] // 8) for c in seeds}
        assert seeds and all(rows in (3, 6, 9) and rows * vecs <= 12 for rows, vecs in tiles)
        inputs += [MeasureInput(task, c) for c in seeds[:2]]
    assert len(inputs) == 4
    # channels no multiple of two vectors but of five (RegNet-Y's 440, 55 vectors): not padded
    # to 448, the positions padded to 50 and tiled two at a time by five vectors
    [wide] = [t.task for t in _model_tasks(torch.nn.Conv2d(16, 440, 1), (1, 16, 7, 7), avx2)
              if "conv2d" in t.name]
    extents = {k.name: k.extent for k in task_space(wide).knobs if hasattr(k, "extent")}
    assert extents["tile_yy_xx"] == 50 and extents["tile_ff"] == 440, extents
    seeds = task_seeds(wide)
    two_by_five = [c for c in seeds if (c["tile_yy_xx"][-1], c["tile_ff"][-1]) == (2, 40)]
    assert two_by_five, [(c["tile_yy_xx"], c["tile_ff"]) for c in seeds]
    inputs += [MeasureInput(wide, two_by_five[0]), MeasureInput(wide, seeds[0])]
    # a prime row (SqueezeNet's 13x13): 169 positions as 174, six to a tile; 14x14 keeps rows
    [prime] = [t.task for t in _model_tasks(torch.nn.Conv2d(48, 64, 1), (1, 48, 13, 13), avx2)
               if "conv2d" in t.name]
    extents = {k.name: k.extent for k in task_space(prime).knobs if hasattr(k, "extent")}
    assert extents["tile_yy_xx"] == 174, extents
    seeds = task_seeds(prime)
    assert seeds[0]["tile_yy_xx"][-1] == 6 and seeds[0]["tile_ff"][-1] == 16
    inputs += [MeasureInput(prime, seeds[0])]
    [even] = [t.task for t in _model_tasks(torch.nn.Conv2d(48, 64, 1), (1, 48, 14, 14), avx2)
              if "conv2d" in t.name]
    assert {"tile_yy", "tile_xx"} <= {k.name for k in task_space(even).knobs}
    # other padded channels (248 as 256) keep the rows: both padded did 12% more work
    [padded] = [t.task for t in _model_tasks(torch.nn.Conv2d(16, 248, 1), (1, 16, 7, 7), avx2)
                if "conv2d" in t.name]
    assert {"tile_yy", "tile_xx"} <= {k.name for k in task_space(padded).knobs}
    settings = MeasureSettings(number=1, repeat=1, min_repeat_ms=1, threads=2)
    with LocalBuilder(workers=2) as builder, LocalRunner(settings) as runner:
        results = runner.run(inputs, builder.build(inputs))
    for inp, result in zip(inputs, results):
        assert result.ok and result.verified, (dict(inp.config), result.message)


class PrimeRows(torch.nn.Module):
    """Inception's 17x17 stage in small: 1x7 and 7x1 convolutions, 24 -> 192 -> 192 -> 160."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(24, 192, (1, 7), padding=(0, 3))
        self.b = torch.nn.Conv2d(192, 192, (7, 1), padding=(3, 0))
        self.c = torch.nn.Conv2d(192, 160, (1, 7), padding=(0, 3))

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def test_a_prime_rows_single_position_takes_a_wide_tile_whose_weights_stay_in_l1():
    """With AVX2's 16 registers 17 columns allow no register tile of positions, so every tile
    held 1 position x 1-4 vectors (31-45% of Zen 3's peak): the first seed is one position x
    64 channels (8 vectors; 40, five, where 160 channels are no multiple of 64) with the input
    channels in blocks of at most 96 (a 24 KB weight panel); a 14x14 layer keeps its tiles of
    positions, and AVX-512's 32 registers take a whole row of 17. The wide seeds compute what
    numpy does."""
    avx2 = {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}
    tasks = [t.task for t in _model_tasks(PrimeRows(), (1, 24, 17, 17), avx2)
             if "conv2d" in t.name]
    assert len(tasks) == 3
    for task in tasks:
        first = task_seeds(task)[0]
        width = 64 if task.workload.prim_func().params[-1].shape[-1] == 192 else 40
        assert first["tile_ff"][-1] == width, dict(first)
        assert first["tile_xx"][-1] == first["tile_yy"][-1] == 1
        assert first["tile_rc"][-1] <= 96 and first["tile_rc"][-1] * width * 4 <= 24 * 1024
        wide = Task(task.workload, {**avx2, "mcpu": "skylake-avx512"})
        assert all(c["tile_ff"][-1] < 64 for c in task_seeds(wide))
        assert any(17 in (c["tile_xx"][-1], c["tile_yy"][-1]) for c in task_seeds(wide)[:2])
    [even] = [t.task for t in _model_tasks(PrimeRows(), (1, 24, 14, 14), avx2)
              if "conv2d" in t.name][:1]
    assert all(c["tile_ff"][-1] < 64 for c in task_seeds(even))
    inputs = [MeasureInput(t, task_seeds(t)[0]) for t in tasks]
    settings = MeasureSettings(number=1, repeat=1, min_repeat_ms=1, threads=2)
    with LocalBuilder(workers=2) as builder, LocalRunner(settings) as runner:
        results = runner.run(inputs, builder.build(inputs))
    for inp, result in zip(inputs, results):
        assert result.ok and result.verified, (dict(inp.config), result.message)


class ChannelsOut(torch.nn.Module):
    """A 1-D convolution to 200 channels over 150 samples and a softmax over the channels: the
    model runs them channels-last, so its output (N, C, W) is a transposing copy."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 200, 1)

    def forward(self, x):
        return torch.softmax(self.conv(x), dim=1)


def test_a_transposing_copy_is_tiled_first_and_other_row_wise_spaces_are_unchanged(target):
    tasks = [t for t in _model_tasks(ChannelsOut(), (1, 3, 150), target)
             if "rows" in {k.name for k in task_space(t.task).knobs}]
    rows = {t.name: next(k for k in task_space(t.task).knobs if k.name == "rows").options
            for t in tasks}
    # the input's and the output's transposes, and only they: the softmax keeps its rows
    assert {n for n, r in rows.items() if "tile16" in r} == {n for n in rows if "transpose" in n}
    assert len([n for n in rows if "transpose" in n]) == 2, rows
    copy = next(t for t in tasks if "squeeze_transpose" in t.name)  # 150 x 200 -> 200 x 150
    space = task_space(copy.task)
    seeds = task_seeds(copy.task, space)
    assert [c["rows"] for c in seeds[:2]] == ["tile16", "tile16"], seeds
    # 200 channels: tiles of 8 divide them, 16 and 32 leave them whole; 150 samples whole
    tiled = [c for c in seeds if str(c["rows"]).startswith("tile")]
    assert {c["rows"] for c in tiled} == {"tile8", "tile16", "tile32"}
    inputs = [MeasureInput(copy.task, c) for c in tiled]
    settings = MeasureSettings(number=1, repeat=1, min_repeat_ms=1, threads=2)
    with LocalBuilder(workers=2) as builder, LocalRunner(settings) as runner:
        results = runner.run(inputs, builder.build(inputs))
    for inp, result in zip(inputs, results):
        assert result.ok and result.verified, (dict(inp.config), result.message)
