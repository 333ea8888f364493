"""A ``Task``: one workload on one target, the unit that is tuned and recorded."""
from __future__ import annotations

import dataclasses
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


def host_cpu(llvm_cpu: str, cpuinfo: str, known) -> str:
    """The ``mcpu`` for this host: LLVM's guess, unless the flags say better.

    Cloud VMs often report a made-up CPU model, so LLVM guesses an older or client part (a Zen 5
    as a generic Intel, a Sapphire Rapids Xeon as a Rocket Lake desktop); the ISA flags are
    trusted instead. ``known(name)`` says whether LLVM knows an ``mcpu``."""
    amd, intel = "AuthenticAMD" in cpuinfo, "GenuineIntel" in cpuinfo
    if amd and " avx512f" in cpuinfo and known("znver5"):
        return "znver5"
    if intel and " amx_tile" in cpuinfo and known("sapphirerapids"):
        return "sapphirerapids"
    return llvm_cpu


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


def vector_lanes(target: dict) -> int:
    """float32 lanes of the widest vector an LLVM x86 ``target`` compiles to: 16 with
    AVX-512, 8 with AVX2 (and for a target without an ``mcpu``)."""
    if target.get("kind") != "llvm" or not target.get("mcpu"):
        return 8
    import tvm
    from tvm.target import codegen

    tgt = tvm.target.Target({"kind": "llvm", "mcpu": target["mcpu"]})
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
