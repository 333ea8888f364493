"""PTX (as ``nvcc -ptx`` prints it) and ``ptxas -v`` reports: kernels, loops, instruction classes.

Pure text analysis, no TVM: ``parse_ptx`` splits PTX into kernels of instructions and labels,
``find_loops`` finds the natural loops and their trip counts after Tuna's Algorithm 3 (the
register a loop's exit ``setp`` compares, its initial ``mov`` before the loop and its constant
``add`` in the loop), ``classify`` sorts instructions into the classes XFEATUR counts, and
``parse_ptxas`` reads registers, spills, stack, shared memory and barriers per kernel.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from .cfg import CodeLoop, Flow, LoopForest, natural_loops, solve_trip, split_operands

CLASSES = ("fma", "arith", "int", "ld.global", "ld.shared", "ld.local", "st.global", "st.shared",
           "st.local", "bar", "branch", "other")
_FP = (".f16", ".f32", ".f64", ".bf16", ".f16x2", ".bf16x2")
_ARITH = ("add", "sub", "mul", "div", "min", "max", "neg", "abs", "rcp", "sqrt", "rsqrt", "ex2",
          "lg2", "sin", "cos", "tanh", "mad", "fma", "copysign")
_INT = _ARITH + ("shl", "shr", "and", "or", "xor", "not", "rem", "setp", "selp", "bfe", "bfi",
                 "popc", "clz", "brev", "cnot", "mul24", "mad24", "prmt", "lop3", "shf")
_REG = re.compile(r"%[a-zA-Z_][\w.]*")
_INT_LITERAL = re.compile(r"^-?(?:0[xX][0-9a-fA-F]+|[0-9]+)$")
_CONTINUE = {"eq": lambda v, b: v == b, "ne": lambda v, b: v != b, "lt": lambda v, b: v < b,
             "le": lambda v, b: v <= b, "gt": lambda v, b: v > b, "ge": lambda v, b: v >= b,
             "lo": lambda v, b: v < b, "ls": lambda v, b: v <= b, "hi": lambda v, b: v > b,
             "hs": lambda v, b: v >= b}
_NEGATE = {"eq": "ne", "ne": "eq", "lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "lo": "hs",
           "hs": "lo", "ls": "hi", "hi": "ls"}
_SWAP = {"eq": "eq", "ne": "ne", "lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "lo": "hi",
         "hi": "lo", "ls": "hs", "hs": "ls"}


@dataclass(frozen=True)
class PtxInstruction:
    opcode: str  # e.g. "fma.rn.f32", "ld.global.nc.f32"
    operands: tuple[str, ...] = ()
    predicate: str = ""  # "%p1" or "!%p1" when guarded

    @property
    def writes(self) -> tuple[str, ...]:
        """Registers the instruction defines (the first operand, braces unpacked)."""
        if not self.operands or self.opcode.startswith(("st.", "bar", "bra", "ret", "exit",
                                                        "red.", "membar", "fence")):
            return ()
        return tuple(_REG.findall(self.operands[0]))

    @property
    def reads(self) -> tuple[str, ...]:
        skip = 1 if self.writes else 0
        regs = [r for op in self.operands[skip:] for r in _REG.findall(op)]
        if self.predicate:
            regs.append(self.predicate.lstrip("!"))
        return tuple(regs)


@dataclass(frozen=True)
class PtxKernel:
    name: str
    instructions: tuple[PtxInstruction, ...]
    labels: dict = field(default_factory=dict)  # label -> index of the instruction that follows
    max_threads: int = 0  # product of ``.maxntid`` (0 when absent)
    shared_bytes: int = 0  # statically declared ``.shared`` arrays


@dataclass(frozen=True)
class PtxasInfo:
    """What ``ptxas -v`` reports for one kernel."""

    registers: int = 0
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared_bytes: int = 0
    barriers: int = 0


# -- parsing --------------------------------------------------------------------------------------
def parse_ptx(text: str) -> list[PtxKernel]:
    """The ``.entry`` kernels of a PTX module."""
    kernels = []
    for m in re.finditer(r"\.entry\s+([\w$]+)\s*\(", text):
        name = m.group(1)
        open_at = text.find("{", m.end())
        if open_at < 0:
            continue
        header = text[m.end():open_at]
        close_at = _matching_brace(text, open_at)
        body = text[open_at + 1:close_at]
        ntid = re.search(r"\.maxntid\s+([\d,\s]+)", header)
        max_threads = 1
        for x in (ntid.group(1).replace(",", " ").split() if ntid else []):
            max_threads *= int(x)
        shared = sum(int(b) for b in re.findall(r"\.shared\b[^;]*?\[(\d+)\]", body))
        instrs, labels = _parse_body(body)
        kernels.append(PtxKernel(name, tuple(instrs), labels, max_threads if ntid else 0, shared))
    return kernels


def _matching_brace(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _parse_body(body: str) -> tuple[list[PtxInstruction], dict]:
    instrs: list[PtxInstruction] = []
    labels: dict = {}
    for raw in body.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        while True:  # labels may share a line with an instruction
            m = re.match(r"^([$\w]+):\s*", line)
            if not m:
                break
            labels[m.group(1)] = len(instrs)
            line = line[m.end():]
        if not line or line.startswith((".", "{", "}")):
            continue
        ins = parse_instruction(line)
        if ins is not None:
            instrs.append(ins)
    return instrs, labels


def parse_instruction(line: str) -> PtxInstruction | None:
    """One PTX statement (``@%p1 bra $L__BB0_1;``); ``None`` for anything else."""
    line = line.rstrip(";").strip()
    if not line:
        return None
    predicate = ""
    if line.startswith("@"):
        pred, _, line = line.partition(" ")
        predicate = pred[1:]
        line = line.strip()
    parts = line.split(None, 1)
    ops = split_operands(parts[1]) if len(parts) > 1 else ()
    return PtxInstruction(parts[0], ops, predicate)


def parse_ptxas(text: str) -> dict[str, PtxasInfo]:
    """Per kernel, the resources in ``ptxas -v`` output."""
    out: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line) or re.search(
            r"Function properties for ([\w$]+)", line)
        if m:
            current = out.setdefault(m.group(1), {})
            continue
        if current is None:
            continue
        for key, pattern in (("stack_frame", r"(\d+) bytes stack frame"),
                             ("spill_stores", r"(\d+) bytes spill stores"),
                             ("spill_loads", r"(\d+) bytes spill loads"),
                             ("registers", r"Used (\d+) registers"),
                             ("barriers", r"used (\d+) barriers"),
                             ("shared_bytes", r"(\d+) bytes smem")):
            m = re.search(pattern, line)
            if m:
                current[key] = int(m.group(1))
    return {name: PtxasInfo(**values) for name, values in out.items()}


# -- classes --------------------------------------------------------------------------------------
def classify(ins: PtxInstruction) -> str:
    """One of ``CLASSES``."""
    op = ins.opcode
    base = op.split(".", 1)[0]
    if base in ("ld", "ldu"):
        space = next((s for s in ("global", "shared", "local") if f".{s}" in op), "other")
        return f"ld.{space}" if space != "other" else "other"
    if base == "st":
        space = next((s for s in ("global", "shared", "local") if f".{s}" in op), "other")
        return f"st.{space}" if space != "other" else "other"
    if base in ("bar", "barrier"):
        return "bar"
    if base == "bra":
        return "branch"
    floating = op.endswith(_FP) or any(f"{t}." in op for t in _FP)
    if base in ("fma", "mad") and floating:
        return "fma"
    if base in _ARITH and floating:
        return "arith"
    if base in _INT:
        return "int"
    return "other"


def is_load(ins: PtxInstruction) -> bool:
    """A load from memory (kernel parameters excluded)."""
    return ins.opcode.startswith(("ld.", "ldu.", "tex.")) and not ins.opcode.startswith("ld.param")


# -- loops ----------------------------------------------------------------------------------------
def flows(kernel: PtxKernel) -> list[Flow]:
    out = []
    for ins in kernel.instructions:
        if ins.opcode.startswith("bra") and ins.operands:
            target = kernel.labels.get(ins.operands[0])
            guarded = bool(ins.predicate)
            out.append(Flow(target, guarded, stops=target is None and not guarded))
        else:
            out.append(Flow(stops=ins.opcode in ("ret", "exit", "trap") and not ins.predicate))
    return out


def find_loops(kernel: PtxKernel) -> LoopForest:
    """The natural loops of a kernel in pre-order, with the trip counts the code tells."""
    forest = natural_loops(flows(kernel))
    fp = [classify(i) in ("fma", "arith") for i in kernel.instructions]
    loops = tuple(dataclasses.replace(lp, trip=trip_count(kernel.instructions, lp),
                                      compute=any(fp[i] for i in lp.body))
                  for lp in forest.loops)
    return dataclasses.replace(forest, loops=loops)


def trip_count(instrs, loop: CodeLoop, max_trip: int = 1 << 24) -> int | None:
    """Iterations of ``loop`` after Tuna's Algorithm 3: an exit branch's predicate comes from a
    ``setp`` comparing a register the loop steps by a constant with a constant (or with a
    register holding one); the initial value is the last constant ``mov`` into it before the
    loop."""
    body = sorted(loop.body)
    for branch, taken_continues in sorted(loop.exits, key=lambda e: -e[0]):
        guard = instrs[branch].predicate
        pred = guard.lstrip("!")
        setp = next((k for k in range(branch - 1, -1, -1)
                     if k in loop.body and pred in instrs[k].writes), None)
        if setp is None or not instrs[setp].opcode.startswith("setp."):
            continue
        cmp = instrs[setp].opcode.split(".")[1]
        if cmp not in _CONTINUE or len(instrs[setp].operands) < 3:
            continue
        # the branch is taken when the comparison holds (or fails, for @!%p)
        cond = cmp if guard.startswith("!") != taken_continues else _NEGATE[cmp]
        a, b = instrs[setp].operands[1:3]
        values = {x: _constant(instrs, loop, x) for x in (a, b)}
        steps = {x: _step(instrs, body, x) for x in (a, b)}
        if steps[a] and values[b] is not None and not steps[b]:
            reg, bound = a, values[b]
        elif steps[b] and values[a] is not None and not steps[a]:
            reg, bound, cond = b, values[a], _SWAP[cond]
        else:
            continue
        init = _initial(instrs, loop, reg)
        if init is None:
            continue
        after = sum(_update(instrs[k], reg) or 0 for k in body if setp < k < branch)
        trip = solve_trip(init - after, steps[reg], bound, _CONTINUE[cond], max_trip)
        if trip is not None:
            return trip
    return None


def _update(ins: PtxInstruction, reg: str) -> int | None:
    """The constant ``ins`` adds to ``reg``; ``None`` if it writes ``reg`` otherwise; 0 if not."""
    if reg not in ins.writes:
        return 0
    ops = ins.operands
    if ins.opcode.startswith(("add.", "sub.")) and len(ops) == 3 and ops[1] == reg \
            and _INT_LITERAL.match(ops[2]):
        k = int(ops[2], 0)
        return k if ins.opcode.startswith("add.") else -k
    return None


def _step(instrs, body, reg: str) -> int | None:
    if not reg.startswith("%"):
        return 0
    total = 0
    for k in body:
        delta = _update(instrs[k], reg)
        if delta is None:
            return None
        total += delta
    return total


def _initial(instrs, loop: CodeLoop, reg: str) -> int | None:
    """The constant ``mov``ed into ``reg`` last before the loop's first instruction."""
    for k in range(loop.start - 1, -1, -1):
        ins = instrs[k]
        if reg in ins.writes:
            if ins.opcode.startswith("mov.") and len(ins.operands) == 2 and _INT_LITERAL.match(
                    ins.operands[1]):
                return int(ins.operands[1], 0)
            return None
    return None


def _constant(instrs, loop: CodeLoop, operand: str) -> int | None:
    """An integer literal, or a register the loop does not change holding one."""
    if _INT_LITERAL.match(operand):
        return int(operand, 0)
    if operand.startswith("%") and all(operand not in instrs[k].writes for k in loop.body):
        return _initial(instrs, loop, operand)
    return None


# -- load-to-use ----------------------------------------------------------------------------------
def load_use_distances(instrs, body, wrap: bool = True) -> list[int]:
    """For each load among the instructions ``body`` (indices, in order), the number of
    instructions to the first one that reads a loaded register; the search wraps around a loop
    body when ``wrap``."""
    order = sorted(body)
    n = len(order)
    out = []
    for pos, i in enumerate(order):
        ins = instrs[i]
        if not is_load(ins) or not ins.writes:
            continue
        loaded = set(ins.writes)
        span = n if wrap else n - pos
        for step in range(1, span):
            other = instrs[order[(pos + step) % n]]
            if loaded & set(other.reads):
                out.append(step)
                break
            loaded -= set(other.writes)
            if not loaded:
                break
    return out
