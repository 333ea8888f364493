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

    cpu = codegen.llvm_get_system_cpu()
    # Cloud VMs often report a generic Intel model for AMD Zen parts; trust the AVX-512 flags.
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        flags = ""
    if "AuthenticAMD" in flags and " avx512f" in flags and codegen.llvm_is_valid_cpu("znver5", "x86_64-pc-linux-gnu"):
        cpu = "znver5"
    return {"kind": "llvm", "mcpu": cpu, "num-cores": int(num_cores or os.cpu_count() or 1)}


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
