"""Every tunable setting of tensortune, declared once and typed.

Algorithms receive a ``Settings`` value (or the fields they need); only ``Settings.from_env``
reads the environment, so nothing deeper in the package looks at ``os.environ``.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class MeasureSettings:
    """How candidates are built and timed."""

    # threads of the measured kernels' TVM thread pool; TVM alone would use half the logical
    # CPUs ("ignore hyper-threading"), i.e. one thread on a 2-vCPU machine
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    build_workers: int = 2
    # a candidate that takes longer to compile is a huge unrolled kernel, slow anyway
    build_timeout_s: float = 10.0
    # once a task has a few builds, one may take build_timeout_factor x their median (at least
    # build_timeout_floor_s): over the repository's 26,000 records this cuts 15% of all build
    # time and only one task of 271 lost its best config (to one 1.26x slower)
    build_timeout_factor: float = 10.0
    build_timeout_floor_s: float = 3.0
    run_timeout_s: float = 20.0
    # a remote device's server that cannot be had (restarting, or gone) is tried this many
    # more times, pausing device_retry_pause_s x the try's number, before the device is
    # reported unavailable (a service's pool then takes it out)
    device_retries: int = 5
    device_retry_pause_s: float = 2.0
    number: int = 4
    repeat: int = 3
    min_repeat_ms: int = 40
    warmup: int = 1
    # a model's function whose weights are constants is timed as the model runs it: its
    # weights flushed from the caches before each of cold_repeat single calls (BERT-base's
    # second FFN layer ran 10% slower in the model than warm in the tuner, and the configs
    # ranked differently cold; docs/benchmarks.md)
    cold_weights: bool = True
    cold_repeat: int = 15
    verify: str = "all"  # "all": check every candidate against numpy; "best": only new bests
    rtol: float = 1e-3
    atol: float = 1e-3
    # CPU cores other processes (and other VMs, as steal time) kept busy while a candidate was
    # timed; above this the timing is retried, since a busy neighbour distorts it 2-10x
    max_contention: float = 0.5
    contention_retries: int = 2


@dataclass(frozen=True)
class SearchSettings:
    """Knobs of the model-based search (simulated annealing by default)."""

    batch_size: int = 32
    # candidates per build and per measure stage (0: a whole batch in one of each): smaller
    # stages let the multi-job scheduler slip other jobs' stages in between
    stage_size: int = 0
    epsilon: float = 0.1
    sa_chains: int = 64
    sa_steps: int = 60
    sa_early_stop: int = 15
    sa_restarts: int = 1
    sa_t_start: float = 1.0
    sa_t_end: float = 0.0
    ga_population: int = 128
    ga_generations: int = 8
    ga_elite: int = 16
    ga_tournament: int = 3
    ga_mutation: float = 0.5  # chance that a child also takes one ``space.neighbor`` step
    es_starts: int = 8  # evolution strategies (Tuna): search distributions evolved side by side
    es_population: int = 24  # perturbations per start and generation (half antithetic)
    es_generations: int = 25
    es_sigma: float = 0.15  # noise, in units of a knob's whole range
    es_lr: float = 0.3
    early_stop_trials: int = 0  # 0 disables: stop a task after this many trials without improvement
    # measure the template's expert starting points first (``space.seeds``); off reproduces
    # AutoTVM's cold start from random configs
    seeds: bool = True
    # after a model's tuning, the confirm_top best configs of each task that takes part in
    # confirm_share of its tuned latency are timed again confirm_rounds times in turn, and the
    # steadiest is kept (``tasks.confirm``: a task's recorded best is its luckiest timing);
    # 0 rounds: the recorded best as it is
    confirm_top: int = 4
    confirm_rounds: int = 3
    confirm_share: float = 0.8
    # options of strategies that declare their own (``search.STRATEGIES[name].options``), by
    # strategy: {"hill": {"climbers": 4}}; set them with ``STRATEGIES[name].configure``
    # (checked against the registry by ``tuner.make_loop`` and each strategy as it reads them:
    # settings sit below ``search`` and import nothing of it)
    options: dict = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Settings:
    """The root settings object; build it with ``Settings.from_env()`` at the program's edge."""

    home: Path = field(default_factory=lambda: Path.home() / ".tensortune")
    target: dict | None = None  # None: detect the host CPU
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    seed: int = 0

    @staticmethod
    def from_env(environ: dict[str, str] | None = None) -> "Settings":
        """Read TENSORTUNE_* variables (HOME, THREADS, BUILD_WORKERS, NUMBER, REPEAT, MIN_REPEAT_MS,
        DEVICE_RETRIES, DEVICE_RETRY_PAUSE_S, SEED)."""
        env = dict(os.environ if environ is None else environ)
        s = Settings()
        if "TENSORTUNE_HOME" in env:
            s = dataclasses.replace(s, home=Path(env["TENSORTUNE_HOME"]))
        if "TENSORTUNE_SEED" in env:
            s = dataclasses.replace(s, seed=int(env["TENSORTUNE_SEED"]))
        m = s.measure
        for name, kind in (("threads", int), ("build_workers", int), ("number", int),
                           ("repeat", int), ("min_repeat_ms", int), ("device_retries", int),
                           ("device_retry_pause_s", float)):
            key = "TENSORTUNE_" + name.upper()
            if key in env:
                m = dataclasses.replace(m, **{name: kind(env[key])})
        return dataclasses.replace(s, measure=m)
