"""x86-64 assembly (AT&T syntax, as LLVM prints it for TVM): functions, instructions, classes.

Pure text analysis, no TVM: ``parse_functions`` splits ``.s`` text into functions of
instructions and labels, ``reads``/``writes`` give the registers an instruction uses,
``classify`` sorts it into a class (FMA, other arithmetic, load, store, shuffle, integer,
branch, other) with its vector width, and ``load_use_distances`` measures how far each load is
from its first consumer. Loops and trip counts are in ``asm_loops``.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from .cfg import split_operands

CLASSES = ("fma", "arith", "load", "store", "shuffle", "int", "branch", "other")
VECTOR_CLASSES = ("fma", "arith", "load", "store", "shuffle")
REG_BITS = {"zmm": 512, "ymm": 256, "xmm": 128}
STACK_BASES = ("%rsp", "%rbp")

_GPR64 = {"ax": "rax", "bx": "rbx", "cx": "rcx", "dx": "rdx", "si": "rsi", "di": "rdi",
          "bp": "rbp", "sp": "rsp"}
_REG = re.compile(r"%([a-z]+[0-9]*[a-z]?)")
_VREG = re.compile(r"%([xyz])mm([0-9]+)")
_IMM = re.compile(r"^\$(-?(?:0x[0-9a-fA-F]+|[0-9]+))$")
_FMA = ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")
_SHUFFLE = ("shuf", "perm", "unpck", "blend", "insert", "extract", "align", "movddup", "movshdup",
            "movsldup", "movlhps", "movhlps", "compress", "expand", "pshufb")
_MOVES = ("mov", "vmov", "vbroadcast", "vpbroadcast", "vgather", "vpgather", "vscatter",
          "vpscatter", "vmaskmov", "vpmaskmov")
_INT = ("add", "sub", "imul", "mul", "div", "idiv", "inc", "dec", "neg", "shl", "shr", "sar",
        "sal", "rol", "ror", "and", "or", "xor", "not", "lea", "cmp", "test", "cmov", "set",
        "bt", "cqto", "cltq", "cltd", "cdq", "cqo", "movs", "movz", "bsf", "bsr", "popcnt",
        "tzcnt", "lzcnt", "andn", "shlx", "shrx", "sarx", "adc", "sbb")
_NO_DEST = ("cmp", "test", "vcomis", "vucomis", "comis", "ucomis", "push", "j", "call", "ret",
            "nop", "prefetch", "bt")


@dataclass(frozen=True)
class Instruction:
    mnemonic: str
    operands: tuple[str, ...] = ()
    comment: str = ""

    @property
    def dest(self) -> str | None:
        """The written operand (the last one in AT&T syntax), if the instruction writes one."""
        if not self.operands or self.mnemonic.startswith(_NO_DEST):
            return None
        return self.operands[-1]


@dataclass(frozen=True)
class AsmFunction:
    name: str
    instructions: tuple[Instruction, ...]
    labels: dict = field(default_factory=dict)  # label -> index of the instruction that follows


@dataclass(frozen=True)
class InsClass:
    cls: str  # one of CLASSES
    vector: bool
    bits: int  # widest vector register operand (0 for none)
    elem_bytes: int  # element size of a floating-point instruction (0 when not FP)


# -- parsing --------------------------------------------------------------------------------------
def parse_functions(text: str) -> list[AsmFunction]:
    """The functions of an assembly listing (``.type NAME,@function`` marks their names)."""
    names = set(re.findall(r"\.type\s+([^,\s]+)\s*,\s*@function", text))
    funcs: list[AsmFunction] = []
    name, instrs, labels = None, [], {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.endswith(":") and " " not in line and "\t" not in line:
            label = line[:-1]
            if label in names:
                if name is not None:
                    funcs.append(AsmFunction(name, tuple(instrs), labels))
                name, instrs, labels = label, [], {}
            elif name is not None:
                labels[label] = len(instrs)
            continue
        if name is None or line.startswith((".", "#")):
            continue
        ins = parse_instruction(line)
        if ins is not None:
            instrs.append(ins)
    if name is not None:
        funcs.append(AsmFunction(name, tuple(instrs), labels))
    return funcs


# the analyses below are pure functions of text that repeats (an unrolled loop is the same few
# lines): cached, they take 8 ms of a candidate's 120 instead of 19
@functools.lru_cache(maxsize=1 << 16)
def parse_instruction(line: str) -> Instruction | None:
    """One instruction line (``mnemonic op, op  # comment``); ``None`` for anything else."""
    code, _, comment = line.partition("#")
    code = code.strip()
    if not code or code.endswith(":"):
        return None
    parts = code.split(None, 1)
    mnemonic = parts[0].lower()
    if mnemonic in ("rep", "lock", "notrack", "data16") and len(parts) > 1:
        parts = parts[1].split(None, 1)
        mnemonic = parts[0].lower()
    ops = split_operands(parts[1]) if len(parts) > 1 else ()
    return Instruction(mnemonic, ops, comment.strip())


# -- registers and operands -----------------------------------------------------------------------
def is_memory(op: str) -> bool:
    return "(" in op and not op.startswith("$")


@functools.lru_cache(maxsize=1 << 12)
def register_family(name: str) -> str:
    """Canonical name of an architectural register: ``eax``/``ax``/``al`` -> ``rax``,
    ``r8d`` -> ``r8``, ``xmm3``/``ymm3``/``zmm3`` -> ``v3``."""
    name = name.lstrip("%").lower()
    m = re.fullmatch(r"[xyz]mm([0-9]+)", name)
    if m:
        return f"v{m.group(1)}"
    m = re.fullmatch(r"(r[0-9]+)[dwb]?", name)
    if m:
        return m.group(1)
    m = re.fullmatch(r"[re]?([abcd]x|si|di|bp|sp)", name)
    if m:
        return _GPR64[m.group(1)]
    m = re.fullmatch(r"([abcd])[lh]", name)
    if m:
        return _GPR64[m.group(1) + "x"]
    m = re.fullmatch(r"(si|di|bp|sp)l", name)
    if m:
        return _GPR64[m.group(1)]
    return name


@functools.lru_cache(maxsize=1 << 14)
def registers(op: str) -> tuple[str, ...]:
    """Register families named in an operand (for memory operands: base and index)."""
    return tuple(register_family(r) for r in _REG.findall(op))


def immediate(op: str) -> int | None:
    m = _IMM.match(op)
    return int(m.group(1), 0) if m else None


@functools.lru_cache(maxsize=1 << 16)
def reads(ins: Instruction) -> frozenset[str]:
    """Register families the instruction reads."""
    out: set[str] = set()
    if not ins.operands:
        return frozenset()
    dest = ins.dest
    for op in ins.operands[:-1] if dest is not None else ins.operands:
        out.update(registers(op))
    if dest is not None:
        if is_memory(dest):
            out.update(registers(dest))  # address registers
        elif _reads_dest(ins):
            out.update(registers(dest))
    return frozenset(out)


@functools.lru_cache(maxsize=1 << 16)
def writes(ins: Instruction) -> frozenset[str]:
    dest = ins.dest
    if dest is None or is_memory(dest):
        return frozenset()
    return frozenset(registers(dest))


def _reads_dest(ins: Instruction) -> bool:
    m = ins.mnemonic
    if m.startswith(_FMA) or ("{%k" in ins.operands[-1] and "{z}" not in ins.operands[-1]):
        return True  # FMA accumulates; merge-masking keeps the old lanes
    if m.startswith(("mov", "vmov", "vbroadcast", "vpbroadcast", "lea", "movs", "movz", "cvt",
                     "vcvt", "set", "pop")):
        return False
    if m.startswith("v") and len(ins.operands) >= 3:
        return False  # three-operand VEX/EVEX forms write their destination only
    if m.startswith(("xor", "vxor", "pxor", "sub", "vpxor")) and len(set(ins.operands)) == 1:
        return False  # zero idiom
    return True


# -- classes --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1 << 16)
def classify(ins: Instruction) -> InsClass:
    """The class of an instruction, whether it is a vector (packed SIMD) one, and its width."""
    m = ins.mnemonic
    bits = max((REG_BITS[p + "mm"] for p, _ in _VREG.findall(" ".join(ins.operands))), default=0)
    elem = _elem_bytes(m)
    if m.startswith("j"):
        return InsClass("branch", False, 0, 0)
    mem_src = any(is_memory(op) for op in ins.operands[:-1]) if ins.operands else False
    mem_dst = bool(ins.operands) and is_memory(ins.operands[-1]) and ins.dest is not None
    vector = _is_packed(m, bits)
    if m.startswith(_FMA):
        return InsClass("fma", vector, bits, elem)
    if m.startswith(_MOVES):
        if mem_dst:
            return InsClass("store", vector, bits, elem)
        if mem_src:
            return InsClass("load", vector, bits, elem)
        if m.startswith(("vbroadcast", "vpbroadcast")):
            return InsClass("shuffle", vector, bits, elem)
        return InsClass("other", False, bits, 0)  # register-to-register move
    if bits and mem_dst:
        return InsClass("store", vector, bits, elem)  # e.g. vextractps to memory
    if bits and any(s in m for s in _SHUFFLE):
        return InsClass("shuffle", vector, bits, elem)
    if bits or elem:
        if m.startswith(("vxor", "vpxor", "xorp")) and len(set(ins.operands)) == 1:
            return InsClass("other", False, bits, 0)  # zero idiom
        return InsClass("arith", vector, bits, elem)
    if mem_dst and m.startswith("mov"):
        return InsClass("store", False, 0, 0)
    if m.startswith(_INT):
        return InsClass("int", False, 0, 0)
    return InsClass("other", False, 0, 0)


def _is_packed(m: str, bits: int) -> bool:
    if not bits:
        return False
    if m.endswith(("ss", "sd", "sh")) and not m.startswith(("vbroadcast", "vpbroadcast")):
        return False  # scalar FP in an xmm register (vfmadd231ss, vmovss, vaddsd)
    if m.startswith(("vmovd", "vmovq", "movd", "movq")) and not m.startswith(("vmovdq", "movdq")):
        return False
    return True


def _elem_bytes(m: str) -> int:
    """Element size of a floating-point operation (0 for bitwise ones such as ``vorps``)."""
    if m.lstrip("v").startswith(("and", "or", "xor")):
        return 0
    for suffix, size in (("ps", 4), ("ss", 4), ("pd", 8), ("sd", 8), ("ph", 2), ("sh", 2)):
        if m.endswith(suffix) or m.endswith(suffix + "x") or m.endswith(suffix + "y"):
            return size
    return 0


def lanes(ic: InsClass) -> int:
    """Floating-point lanes an arithmetic instruction works on (1 for scalar)."""
    if not ic.elem_bytes:
        return 0
    return max(ic.bits // (8 * ic.elem_bytes), 1) if ic.vector else 1


def is_stack_access(ins: Instruction) -> bool:
    """Whether a memory operand of the instruction addresses the stack frame."""
    return any(is_memory(op) and any(b in op.split("(", 1)[1] for b in STACK_BASES)
               for op in ins.operands)


def is_spill(ins: Instruction, ic: InsClass) -> tuple[bool, bool]:
    """(spill store, reload) of a vector register to or from the stack frame."""
    if "Spill" in ins.comment:
        return True, False
    if "Reload" in ins.comment:
        return False, True
    if not ic.bits or not is_stack_access(ins):
        return False, False
    if ic.cls == "store":
        return True, False
    return False, any(is_memory(op) for op in ins.operands[:-1])


# -- load-to-use ----------------------------------------------------------------------------------
def load_use_distances(instrs, body, wrap: bool = True) -> list[int]:
    """For each load among the instructions ``body`` (indices, in order), the number of
    instructions to the first one that reads the loaded register (0 when the load is a memory
    operand of its consumer); the search wraps around a loop body when ``wrap``."""
    order = sorted(body)
    n = len(order)
    out = []
    for pos, i in enumerate(order):
        ins = instrs[i]
        if not ins.operands or ins.mnemonic.startswith(("lea", "nop", "prefetch")):
            continue
        ic = classify(ins)
        reads_memory = any(is_memory(op) for op in ins.operands[:-1]) or (
            ins.dest is None and any(is_memory(op) for op in ins.operands))
        if ic.cls == "store" or not reads_memory:
            continue
        if ic.cls != "load":
            out.append(0)  # a memory operand folded into its consumer
            continue
        loaded = writes(ins)
        for step in range(1, n if wrap else n - pos):
            other = instrs[order[(pos + step) % n]]
            if loaded & reads(other):
                out.append(step)
                break
            loaded = loaded - writes(other)
            if not loaded:
                break
    return out
