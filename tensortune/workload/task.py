"""A ``Task``: one workload on one target, the unit that is tuned and recorded."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os

from .base import Workload


def default_target(num_cores: int | None = None) -> dict:
    """The host CPU as a TVM target dict (TVM 0.27 refuses the old string form)."""
    from tvm.target import codegen

    try:
        cpuinfo = open("/proc/cpuinfo").read()
    except OSError:
        cpuinfo = ""
    cpu = host_cpu(codegen.llvm_get_system_cpu(), cpuinfo,
                   lambda name: codegen.llvm_is_valid_cpu(name, "x86_64-pc-linux-gnu"))
    return {"kind": "llvm", "mcpu": cpu, "num-cores": int(num_cores or os.cpu_count() or 1)}


def parse_target(text: str, num_cores: int | None = None) -> dict:
    """A target from the command line: ``host``, ``llvm:<mcpu>`` (any CPU LLVM knows, e.g.
    ``llvm:znver3``) or ``cuda:<arch>`` (e.g. ``cuda:sm_90``)."""
    from tvm.target import codegen

    kind, _, rest = text.strip().partition(":")
    if kind == "host" and not rest:
        return default_target(num_cores)
    if kind == "llvm" and rest:
        if not codegen.llvm_is_valid_cpu(rest, "x86_64-pc-linux-gnu"):
            raise ValueError(f"LLVM knows no x86 CPU {rest!r} (e.g. znver3, znver4, "
                             "sapphirerapids, skylake-avx512)")
        return {"kind": "llvm", "mcpu": rest, "num-cores": int(num_cores or os.cpu_count() or 1)}
    if kind == "cuda" and rest.startswith("sm_") and rest[3:].isdigit():
        # the host part names the kernels as TVM's build does (``main_kernel``), which the
        # PTX features look up
        return {"kind": "cuda", "arch": rest, "host": {"kind": "llvm"}}
    raise ValueError(f"bad target {text!r}: use host, llvm:<mcpu> (e.g. llvm:znver3) or "
                     "cuda:<arch> (e.g. cuda:sm_90)")


def host_cpu(llvm_cpu: str, cpuinfo: str, known) -> str:
    """The ``mcpu`` for this host: LLVM's name where it knows the core, else the core that the
    CPUID family and model name, else what the ISA flags imply.

    Cloud VMs often report a made-up CPU model, so LLVM may fall back to a generic name
    (``x86-64-v4``) or guess a client part (a Sapphire Rapids Xeon as a Rocket Lake desktop);
    an AMX unit or an AMD family/model then says better. ``known(name)`` says whether LLVM
    knows an ``mcpu``."""
    amd, intel = "AuthenticAMD" in cpuinfo, "GenuineIntel" in cpuinfo
    flags = _field(cpuinfo, "flags").split()
    if intel and "amx_tile" in flags and llvm_cpu != "sapphirerapids" \
            and known("sapphirerapids") and not llvm_cpu.endswith(("rapids", "diamond")):
        return "sapphirerapids"
    if amd and not llvm_cpu.startswith("znver"):
        core = amd_core(_int(_field(cpuinfo, "cpu family")), _int(_field(cpuinfo, "model")))
        if core is None and "avx512f" in flags:
            core = "znver4"  # the first AMD core with AVX-512
        if core and known(core):
            return core
    return llvm_cpu


def amd_core(family: int | None, model: int | None) -> str | None:
    """LLVM's name for an AMD core by CPUID family and model (the ranges of LLVM's
    ``getAMDProcessorTypeAndSubtype``): family 19h is Zen 3 or Zen 4, 1Ah Zen 5."""
    if family == 0x1A:
        return "znver5"
    if family == 0x19 and model is not None:
        zen4 = (0x10 <= model <= 0x1F or 0x60 <= model <= 0x7F or 0xA0 <= model <= 0xAF)
        return "znver4" if zen4 else "znver3"
    if family == 0x17 and model is not None:
        return "znver2" if model >= 0x30 else "znver1"
    return None


def _field(cpuinfo: str, key: str) -> str:
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return ""


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


# ISA extensions whose absence kills a kernel with SIGILL, as LLVM and /proc/cpuinfo name them
_ISA = {"avx512f": "avx512f", "avx512bw": "avx512bw", "avx512dq": "avx512dq",
        "avx512vl": "avx512vl", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16",
        "avx2": "avx2", "fma": "fma", "avx": "avx"}


def missing_host_features(target: dict, cpuinfo: str | None = None) -> list[str]:
    """The ISA extensions an LLVM x86 ``target`` compiles for that this host lacks (empty when
    its code runs here, or when the target is not an x86 CPU with an ``mcpu``). ``cpuinfo`` is
    the text of /proc/cpuinfo (read when None; no check when unreadable)."""
    if target.get("kind") != "llvm" or not target.get("mcpu"):
        return []
    if cpuinfo is None:
        try:
            cpuinfo = open("/proc/cpuinfo").read()
        except OSError:
            return []
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
                  if line.startswith("flags")), None)
    if flags is None:
        return []
    import tvm
    from tvm.target import codegen

    tgt = tvm.target.Target({"kind": "llvm", "mcpu": target["mcpu"]})
    return [name for name, flag in _ISA.items()
            if flag not in flags and codegen.target_has_features(name, tgt)]


@functools.lru_cache(maxsize=64)
def _mcpu_features(mcpu: str) -> frozenset[str]:
    """The ISA extensions (``_ISA``'s LLVM names) LLVM's ``mcpu`` compiles for."""
    import tvm
    from tvm.target import codegen

    tgt = tvm.target.Target({"kind": "llvm", "mcpu": mcpu})
    return frozenset(name for name in _ISA if codegen.target_has_features(name, tgt))


def device_reason(target: dict, device: dict | None) -> str:
    """Why a device whose CPU is the target ``device`` cannot run code compiled for ``target``
    ('' when it can); ``device=None`` is this host (``untimeable_reason``). A device runs a
    target of its own kind whose ISA extensions it has all of."""
    if device is None:
        return untimeable_reason(target)
    if target.get("kind") != device.get("kind"):
        return f"it runs {device.get('kind')} code, not {target.get('kind')}"
    if target.get("kind") != "llvm" or not target.get("mcpu"):
        return ""
    missing = sorted(_mcpu_features(target["mcpu"]) - _mcpu_features(device.get("mcpu") or
                                                                      "x86-64"))
    if missing:
        return f"its CPU ({device.get('mcpu')}) lacks {', '.join(missing)}"
    return ""


class UntimeableTarget(ValueError):
    """This host cannot time candidates for the target (``check_timeable``)."""


def untimeable_reason(target: dict, cpuinfo: str | None = None, cuda_here: bool = False) -> str:
    """Why this host cannot time code compiled for ``target`` ('' when it can): a CUDA target
    (timed only on a GPU host's device runner, unless ``cuda_here``: the caller is that
    runner), or a CPU target compiled to instructions this CPU lacks (its code dies with
    SIGILL). The one place that decides it; ``check_timeable`` raises it."""
    if target.get("kind") == "cuda" and not cuda_here:
        return (f"a CUDA target ({target.get('arch')}) is timed only through a GPU host's "
                "device runner: no GPU is timed on here")
    missing = missing_host_features(target, cpuinfo)
    if missing:
        return (f"the target mcpu {target.get('mcpu')} uses {', '.join(missing)}, which this CPU "
                "lacks")
    return ""


def check_timeable(target: dict, remedy: str = "", cpuinfo: str | None = None) -> None:
    """Raise ``UntimeableTarget`` when this host cannot time ``target`` (``untimeable_reason``);
    ``remedy`` says what to do instead, after the reason."""
    reason = untimeable_reason(target, cpuinfo)
    if reason:
        raise UntimeableTarget(f"cannot time candidates on this host: {reason}"
                               + (f"; {remedy}" if remedy else ""))


def vector_lanes(target: dict) -> int:
    """float32 lanes of the widest vector an LLVM x86 ``target`` compiles to: 16 with
    AVX-512, 8 with AVX2 (and for a target without an ``mcpu``)."""
    if target.get("kind") != "llvm" or not target.get("mcpu"):
        return 8
    return _mcpu_lanes(target["mcpu"])


@functools.cache
def _mcpu_lanes(mcpu: str) -> int:
    import tvm
    from tvm.target import codegen

    tgt = tvm.target.Target({"kind": "llvm", "mcpu": mcpu})
    return 16 if codegen.target_has_features("avx512f", tgt) else 8


def target_key(target: dict) -> str:
    return json.dumps(target, sort_keys=True, separators=(",", ":"))


def tvm_version() -> str:
    import tvm

    return tvm.__version__


@dataclasses.dataclass(frozen=True)
class Task:
    """A workload, a target and the template that spans its search space."""

    workload: Workload
    target: dict = dataclasses.field(hash=False, compare=False)
    template: str = "cpu.generic"

    @property
    def target_key(self) -> str:
        return target_key(self.target)

    @property
    def key(self) -> str:
        """Hashes everything that affects timing except the config: workload, target, template, TVM."""
        blob = "|".join([self.workload.key, self.target_key, self.template, tvm_version()])
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def tvm_target(self):
        import tvm

        return tvm.target.Target(self.target)

    def __hash__(self):
        return hash((self.workload, self.target_key, self.template))

    def __eq__(self, other):
        return isinstance(other, Task) and (self.workload, self.target_key, self.template) == (
            other.workload, other.target_key, other.template)
