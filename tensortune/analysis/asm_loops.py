"""Loops of x86 assembly: a kernel's functions as one control-flow graph, trip counts from code.

``link`` lays out TVM's compute function with each parallel-launch lambda inlined where it is
launched, ``find_loops`` finds the natural loops (see ``cfg``) and reads each loop's trip count
from an exit test that compares an induction register (stepped by a constant from a constant
initial value) with a bound, the way LLVM emits counted loops.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from .asm_cpu import (AsmFunction, Instruction, classify, immediate, is_memory, register_family,
                      registers, writes)
from .cfg import CodeLoop, Flow, LoopForest, natural_loops, solve_trip

_FLAG_SETTERS = ("cmp", "test", "ucomis", "vucomis", "comis", "vcomis", "add", "sub", "inc", "dec",
                 "and", "or", "xor", "neg", "shl", "shr", "sar", "imul", "bt")
# counters whose result the branch compares with zero (``addq $64, %rax; jne``)
_COUNTERS = ("add", "sub", "inc", "dec")


@dataclass(frozen=True)
class AsmProgram:
    """Functions laid out as one instruction sequence, each parallel lambda inlined after the
    instruction that takes its address (where the launch happens); its returns continue after
    the inlined copy, so loops around a launch contain the lambda."""

    instructions: tuple[Instruction, ...]
    labels: dict  # label -> index of the instruction that follows
    owner: tuple[int, ...]  # per instruction: index into ``names``
    names: tuple[str, ...]
    parallel: frozenset = frozenset()  # owners that are parallel-launch lambdas
    entries: tuple[int, ...] = (0,)  # first instructions of the root functions
    returns_to: dict = field(default_factory=dict)  # a lambda's return -> where the caller goes on


def link(funcs: list[AsmFunction], roots: list[str], is_lambda) -> AsmProgram:
    """Lay out ``roots`` (and what they launch) as one ``AsmProgram``; ``is_lambda(name)`` tells
    which functions are parallel-launch bodies (inlined at their launch; the rest are skipped)."""
    by_name = {f.name: f for f in funcs}
    instrs: list[Instruction] = []
    labels: dict = {}
    owner: list[int] = []
    names: list[str] = []
    parallel: set[int] = set()
    done: set[str] = set()
    entries: list[int] = []
    returns_to: dict = {}

    def emit(func: AsmFunction) -> None:
        done.add(func.name)
        fid = len(names)
        names.append(func.name)
        if is_lambda(func.name):
            parallel.add(fid)
        at_index: dict[int, list[str]] = {}
        for label, i in func.labels.items():
            at_index.setdefault(i, []).append(label)
        for i, ins in enumerate(func.instructions):
            for label in at_index.get(i, ()):
                labels[label] = len(instrs)
            instrs.append(ins)
            owner.append(fid)
            for op in ins.operands:
                callee = op[:-len("(%rip)")] if op.endswith("(%rip)") else None
                if callee in by_name and callee not in done and is_lambda(callee):
                    first = len(instrs)
                    emit(by_name[callee])
                    for k in range(first, len(instrs)):
                        if instrs[k].mnemonic.startswith("ret"):
                            returns_to[k] = len(instrs)
        for label in at_index.get(len(func.instructions), ()):
            labels[label] = len(instrs)

    for name in roots:
        if name in by_name and name not in done:
            entries.append(len(instrs))
            emit(by_name[name])
    for func in funcs:  # lambdas nobody launches (not expected from TVM)
        if func.name not in done and is_lambda(func.name):
            entries.append(len(instrs))
            emit(func)
    return AsmProgram(tuple(instrs), labels, tuple(owner), tuple(names), frozenset(parallel),
                      tuple(entries), returns_to)


def program_of(func: AsmFunction) -> AsmProgram:
    """A single function as a program."""
    return AsmProgram(func.instructions, dict(func.labels), (0,) * len(func.instructions),
                      (func.name,))


def flows(prog: AsmProgram) -> list[Flow]:
    """Control flow of each instruction (a jump to an unknown place ends the path)."""
    out = []
    for ins in prog.instructions:
        m = ins.mnemonic
        if m.startswith("j"):
            target = prog.labels.get(ins.operands[0]) if ins.operands else None
            conditional = not m.startswith("jmp")
            out.append(Flow(target, conditional, stops=target is None and not conditional))
        else:
            out.append(Flow(stops=m.startswith(("ret", "ud2"))))
    return out


def find_loops(prog: AsmProgram) -> LoopForest:
    """The natural loops of the program in pre-order, with the trip counts the code tells; the
    top-level loops of a parallel lambda have kind ``"parallel"`` (see ``_unroll_factors``)."""
    instrs, owner = prog.instructions, prog.owner
    extra = {k: [v] for k, v in prog.returns_to.items()}
    fp = [c.cls in ("fma", "arith") and c.elem_bytes > 0 for c in map(classify, instrs)]
    forest = natural_loops(flows(prog), prog.entries, extra)
    loops = forest.loops
    out: list[CodeLoop] = []
    steps: dict[int, int] = {}  # exit-test steps of the top-level loops of parallel lambdas
    for i, lp in enumerate(loops):
        lo = lp.header
        while lo > 0 and owner[lo - 1] == owner[lp.header]:
            lo -= 1
        trip = trip_count(instrs, lp, lo)
        compute = any(fp[k] for k in lp.body)
        top = lp.parent < 0 or owner[loops[lp.parent].header] != owner[lp.header]
        if owner[lp.header] in prog.parallel and top:
            steps[i] = abs(exit_step(instrs, lp, lo) or 0)
            out.append(dataclasses.replace(lp, trip=trip, kind="parallel", compute=compute))
        else:
            out.append(dataclasses.replace(lp, trip=trip, compute=compute))
    return dataclasses.replace(forest, loops=tuple(_unroll_factors(out, owner, steps)))


def _unroll_factors(loops: list[CodeLoop], owner, steps: dict[int, int]) -> list[CodeLoop]:
    """LLVM unrolls (or vectorizes) a parallel lambda's loop, whose trip count is only known at
    run time, into a main loop and a remainder loop: the remainder becomes a ``copy_of`` the
    main loop, whose ``unroll`` is the ratio of their exit-test steps (or else of their sizes).
    Unrolled twice, the odd iteration is peeled instead, with no remainder loop."""
    groups: dict[int, list[int]] = {}
    for i in steps:
        groups.setdefault(owner[loops[i].header], []).append(i)
    for members in groups.values():
        if len(members) == 1:
            if steps[members[0]] == 2:
                loops[members[0]] = dataclasses.replace(loops[members[0]], unroll=2)
            continue
        size = {i: len(loops[i].body) for i in members}
        main = max(members, key=lambda i: size[i])
        rest = [i for i in members if i != main]
        small = min(rest, key=lambda i: size[i])
        if steps[main] and steps[small] and steps[main] % steps[small] == 0:
            unroll = steps[main] // steps[small]
        else:
            unroll = round(size[main] / max(size[small], 1))
        loops[main] = dataclasses.replace(loops[main], unroll=max(unroll, 1))
        for i in rest:
            loops[i] = dataclasses.replace(loops[i], copy_of=main)
    return loops


_CONTINUE = {"ne": lambda v, b: v != b, "l": lambda v, b: v < b, "b": lambda v, b: v < b,
             "le": lambda v, b: v <= b, "be": lambda v, b: v <= b, "g": lambda v, b: v > b,
             "a": lambda v, b: v > b, "ge": lambda v, b: v >= b, "ae": lambda v, b: v >= b,
             "nz": lambda v, b: v != b, "e": lambda v, b: v == b, "z": lambda v, b: v == b}
_SWAP = {"l": "g", "g": "l", "b": "a", "a": "b", "le": "ge", "ge": "le", "be": "ae", "ae": "be",
         "ne": "ne", "nz": "nz", "e": "e", "z": "z"}
_NEGATE = {"ne": "e", "e": "ne", "nz": "z", "z": "nz", "l": "ge", "ge": "l", "b": "ae", "ae": "b",
           "le": "g", "g": "le", "be": "a", "a": "be"}


@dataclass(frozen=True)
class _ExitTest:
    reg: str  # the induction register
    bound: int | None  # the value it is compared with (None: a runtime value)
    cond: str  # the loop continues while ``reg <cond> bound``
    setter: int  # index of the flag-setting instruction
    branch: int  # index of the branch that tests it
    immediate: bool  # the bound is a constant in the instruction


def _exit_tests(instrs, loop: CodeLoop, lo: int) -> list[_ExitTest]:
    """The loop's exit branches that compare an induction register, the last one first."""
    out = []
    body = sorted(loop.body)
    for branch, taken_continues in sorted(loop.exits, key=lambda e: -e[0]):
        cond = instrs[branch].mnemonic[1:]
        if cond not in _CONTINUE:
            continue
        test = _test_at(instrs, body, loop, lo, branch,
                        cond if taken_continues else _NEGATE[cond])
        if test is not None:
            out.append(test)
    return out


def _test_at(instrs, body, loop: CodeLoop, lo: int, branch: int, cond: str) -> _ExitTest | None:
    setter = None
    for k in range(branch - 1, max(branch - 16, -1), -1):
        if k not in loop.body or instrs[k].mnemonic.startswith("j"):
            break
        if _sets_flags(instrs[k]):
            setter = k
            break
    if setter is None:
        return None
    ins = instrs[setter]
    if ins.mnemonic.startswith("cmp") and len(ins.operands) == 2:
        src, dst = ins.operands
        if is_memory(src) or is_memory(dst) or immediate(dst) is not None:
            return None
        if (k := immediate(src)) is not None:
            regs = registers(dst)
            return _ExitTest(regs[0], k, cond, setter, branch, True) if len(regs) == 1 else None
        a, b = registers(src), registers(dst)
        if len(a) != 1 or len(b) != 1:
            return None
        step_a, step_b = _step(instrs, body, a[0]), _step(instrs, body, b[0])
        if step_a == 0 and step_b:  # AT&T ``cmp a, b`` tests ``b <cond> a``
            return _ExitTest(b[0], _initial(instrs, loop, a[0], lo), cond, setter, branch, False)
        if step_b == 0 and step_a:
            return _ExitTest(a[0], _initial(instrs, loop, b[0], lo), _SWAP[cond], setter, branch,
                             False)
        return None
    if (ins.mnemonic.startswith(_COUNTERS) and ins.operands and not is_memory(ins.operands[-1])
            and cond in ("ne", "nz", "e", "z")):
        regs = registers(ins.operands[-1])
        return _ExitTest(regs[0], 0, cond, setter, branch, True) if len(regs) == 1 else None
    return None


def exit_step(instrs, loop: CodeLoop, lo: int = 0) -> int | None:
    """How much the register tested by an exit branch of the loop changes per iteration."""
    body = sorted(loop.body)
    for test in _exit_tests(instrs, loop, lo):
        step = _step(instrs, body, test.reg)
        if step:
            return step
    return None


def trip_count(instrs, loop: CodeLoop, lo: int = 0, max_trip: int = 1 << 24) -> int | None:
    """Iterations of ``loop`` when an exit test compares an induction register (stepped by a
    constant) with a constant. The initial value is the constant last written to the register
    before the loop (searched back to ``lo``); when there is none and the bound is an
    immediate, the register is taken to count up from 0, as LLVM's canonical loops do."""
    body = sorted(loop.body)
    for test in _exit_tests(instrs, loop, lo):
        if test.bound is None:
            continue
        step = _step(instrs, body, test.reg)
        if not step:
            continue
        init = _initial(instrs, loop, test.reg, lo)
        if init is None and test.immediate and step > 0 and test.bound > 0:
            init = 0
        if init is None:
            continue
        after = sum(_update(instrs[k], test.reg) or 0 for k in range(test.setter + 1, test.branch))
        # the compared value trails the updates made after the test
        trip = solve_trip(init - after, step, test.bound, _CONTINUE[test.cond], max_trip)
        if trip is not None:
            return trip
    return None


def _sets_flags(ins: Instruction) -> bool:
    m = ins.mnemonic
    return (m.startswith(_FLAG_SETTERS) and not m.endswith(("ps", "pd", "ss", "sd"))
            and not m.startswith(("shlx", "shrx", "sarx", "andn")))


def _update(ins: Instruction, reg: str) -> int | None:
    """The constant ``ins`` adds to ``reg``; ``None`` if it writes ``reg`` otherwise; 0 if not."""
    if reg not in writes(ins):
        return 0
    m, ops = ins.mnemonic, ins.operands
    if m.startswith("inc"):
        return 1
    if m.startswith("dec"):
        return -1
    if m.startswith(("add", "sub")) and len(ops) == 2 and (k := immediate(ops[0])) is not None:
        return k if m.startswith("add") else -k
    if m.startswith("lea") and len(ops) == 2:
        mm = re.fullmatch(r"(-?[0-9]+)?\(%([a-z0-9]+)\)", ops[0])
        if mm and register_family(mm.group(2)) == reg:
            return int(mm.group(1) or 0)
    return None


def _step(instrs, body, reg: str) -> int | None:
    """The constant the loop body adds to ``reg`` per iteration (``None`` if not a constant)."""
    total = 0
    for k in body:
        delta = _update(instrs[k], reg)
        if delta is None:
            return None
        total += delta
    return total


def _initial(instrs, loop: CodeLoop, reg: str, lo: int = 0, window: int = 48) -> int | None:
    """The constant ``reg`` holds on entry to the loop: the last write to it before the loop
    (scanning back from its header, or from its first instruction when the instruction before
    the header is in the loop), when that is ``xor r, r`` or ``mov $imm, r``."""
    first = loop.header if loop.header - 1 not in loop.body else loop.start
    for k in range(first - 1, max(first - window, lo) - 1, -1):
        ins = instrs[k]
        if reg not in writes(ins):
            continue
        m, ops = ins.mnemonic, ins.operands
        if m.startswith(("xor", "sub")) and len(ops) == 2 and ops[0] == ops[1]:
            return 0
        if m.startswith("mov") and len(ops) == 2 and (k2 := immediate(ops[0])) is not None:
            return k2
        return None
    return None


