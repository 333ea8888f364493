"""Control-flow graphs of generated code: basic blocks, natural loops, static block frequencies.

Generic over instruction sets: callers describe each instruction's control flow with a ``Flow``
(x86 assembly in ``asm_cpu``, PTX in ``ptx``). Loops are the natural loops of the graph (a back
edge to a block that dominates its source), so blocks the compiler placed out of line (cold
paths, unrotated loops) still belong to their loop. Block frequencies are static estimates: the
header of a loop runs once per iteration, a conditional branch that stays in the loop goes
either way half of the time unless one side leads to a loop the other side does not reach (a
loop guard, or an error check before the work), which then takes it all, and a nested loop
passes on what enters it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Flow:
    """Control flow of one instruction."""

    target: int | None = None  # index of the instruction a branch jumps to
    conditional: bool = False  # the branch may fall through
    stops: bool = False  # return or trap: no successor


@dataclass(frozen=True)
class CodeLoop:
    """A natural loop of generated code: its instruction indices and what is known of it."""

    body: frozenset  # indices of the instructions of the loop (nested loops included)
    header: int  # index of the first instruction of the header block
    parent: int  # index of the enclosing code loop, -1 at the top
    depth: int
    exits: tuple = ()  # (branch index, whether the loop continues when it is taken)
    trip: int | None = None  # read from the code, when it can be
    kind: str | None = None  # the IR loop kind it must map to (e.g. "parallel"), if known
    unroll: int = 1  # IR iterations per code iteration (runtime-unrolled parallel loops)
    copy_of: int = -1  # the code loop this one is a remainder copy of (same IR loop)
    compute: bool = False  # its body has floating-point arithmetic instructions

    @property
    def start(self) -> int:
        return min(self.body)


@dataclass(frozen=True)
class LoopForest:
    loops: tuple[CodeLoop, ...]  # pre-order: outer before inner, siblings by position
    # per instruction: expected executions per iteration of its innermost loop (per run of the
    # program outside loops)
    frequency: np.ndarray
    # per loop: expected entries into it per iteration of its parent (per run at the top)
    entry: np.ndarray


def solve_trip(init: int, step: int, bound: int, keep_going, max_trip: int = 1 << 24
               ) -> int | None:
    """Iterations of a loop whose counter starts at ``init``, moves by ``step`` and continues
    while ``keep_going(counter, bound)``: the smallest t >= 1 that stops it. The counter is
    monotone, so t lies next to where it crosses ``bound``."""
    if not keep_going(init + step, bound):
        return 1
    if (step > 0 and bound > init) or (step < 0 and bound < init):
        near = abs(bound - init) // abs(step)
        for t in range(max(near - 1, 2), near + 3):
            if not keep_going(init + t * step, bound):
                return t if t <= max_trip else None
    return None


def basic_blocks(flows: Sequence[Flow]) -> list[tuple[int, int]]:
    """``[start, end)`` instruction ranges of the basic blocks."""
    n = len(flows)
    leaders = {0} if n else set()
    for i, f in enumerate(flows):
        if f.target is not None:
            leaders.add(f.target)
        if (f.target is not None or f.stops) and i + 1 < n:
            leaders.add(i + 1)
    starts = sorted(x for x in leaders if x < n)
    return [(a, b) for a, b in zip(starts, starts[1:] + [n])]


def natural_loops(flows: Sequence[Flow], entries: Sequence[int] = (0,),
                  extra: dict | None = None) -> LoopForest:
    """The natural loops of a control-flow graph and the static frequency of each instruction.
    ``extra`` maps an instruction to further successors (e.g. the return of an inlined parallel
    lambda to the code after its launch)."""
    blocks = basic_blocks(flows)
    if not blocks:
        return LoopForest((), np.zeros(0), np.zeros(0))
    block_of = np.zeros(len(flows), dtype=np.int64)
    for b, (a, e) in enumerate(blocks):
        block_of[a:e] = b
    succ: list[list[int]] = []
    for a, e in blocks:
        last = e - 1
        f = flows[last]
        out = [] if f.stops else ([int(block_of[f.target])] if f.target is not None else [])
        if not f.stops and (f.target is None or f.conditional) and e < len(flows):
            out.append(int(block_of[e]))
        out.extend(int(block_of[t]) for t in (extra or {}).get(last, ()) if 0 <= t < len(flows))
        succ.append(list(dict.fromkeys(out)))
    pred: list[list[int]] = [[] for _ in blocks]
    for b, out in enumerate(succ):
        for c in out:
            pred[c].append(b)
    heads = sorted({int(block_of[e]) for e in entries if 0 <= e < len(flows)})
    idom = _dominators(succ, pred, heads)

    def dominates(h: int, b) -> bool:
        while b is not None and b != h:
            b = idom.get(b)
        return b == h

    bodies: dict[int, set[int]] = {}
    for b, out in enumerate(succ):
        for h in out:
            if b in idom and dominates(h, b):
                body = bodies.setdefault(h, {h})
                todo = [b]
                while todo:
                    x = todo.pop()
                    if x not in body:
                        body.add(x)
                        todo.extend(pred[x])
    shapes = sorted(bodies.items(), key=lambda hb: (blocks[min(hb[1])][0], -len(hb[1])))
    loops: list[CodeLoop] = []
    block_sets: list[frozenset] = []
    for h, body in shapes:
        members = frozenset(i for x in body for i in range(*blocks[x]))
        exits = []
        for x in body:
            last = blocks[x][1] - 1
            f = flows[last]
            if f.target is not None and f.conditional:
                taken_in, fall_in = f.target in members, (last + 1) in members
                if taken_in != fall_in:
                    exits.append((last, taken_in))
        parents = [j for j, lp in enumerate(loops) if members < lp.body]
        parent = min(parents, key=lambda j: len(loops[j].body)) if parents else -1
        depth = loops[parent].depth + 1 if parent >= 0 else 0
        loops.append(CodeLoop(members, blocks[h][0], parent, depth, tuple(sorted(exits))))
        block_sets.append(frozenset(body))
    order = _preorder(loops)
    loops = [dataclasses.replace(loops[o], parent=order.index(loops[o].parent)
                                 if loops[o].parent >= 0 else -1) for o in order]
    block_sets = [block_sets[o] for o in order]
    freq, entry = _frequencies(succ, heads, [int(block_of[lp.header]) for lp in loops],
                               [lp.parent for lp in loops], block_sets)
    return LoopForest(tuple(loops), freq[block_of], entry)


def _dominators(succ, pred, entries) -> dict:
    """Immediate dominators (Cooper, Harvey and Kennedy) of the blocks reachable from
    ``entries``; the entries have ``None``."""
    order: list[int] = []
    seen: set[int] = set(entries)
    for e in entries:
        stack = [(e, iter(succ[e]))]
        while stack:
            node, it = stack[-1]
            nxt = next((c for c in it if c not in seen), None)
            if nxt is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(succ[nxt])))
    rpo = order[::-1]
    number = {b: i for i, b in enumerate(rpo)}
    root = -1  # a virtual root above all entries
    number[root] = -1
    idom: dict = {e: root for e in entries}
    changed = True
    while changed:
        changed = False
        for b in rpo:
            if b in entries:
                continue
            done = [p for p in pred[b] if p in idom]
            if not done:
                continue
            new = done[0]
            for p in done[1:]:
                new = _intersect(p, new, idom, number)
            if idom.get(b) != new:
                idom[b] = new
                changed = True
    return {b: (None if d == root else d) for b, d in idom.items()}


def _intersect(a, b, idom, number):
    while a != b:
        while number[a] > number[b]:
            a = idom[a]
        while number[b] > number[a]:
            b = idom[b]
    return a


def _preorder(loops: list[CodeLoop]) -> list[int]:
    """Old indices in pre-order (children by position)."""
    children: dict[int, list[int]] = {i: [] for i in range(-1, len(loops))}
    for i, lp in enumerate(loops):
        children[lp.parent].append(i)
    order: list[int] = []

    def walk(i: int) -> None:
        for c in sorted(children[i], key=lambda c: loops[c].start):
            order.append(c)
            walk(c)

    walk(-1)
    return order


def _topological(graph: dict, starts: list) -> list:
    """Kahn's order of the nodes of an acyclic ``graph`` (nodes on a cycle are left out)."""
    indegree = dict.fromkeys(graph, 0)
    for outs in graph.values():
        for y in outs:
            indegree[y] = indegree.get(y, 0) + 1
    ready = [x for x in dict.fromkeys(starts) if indegree.get(x, 0) == 0]
    order = []
    while ready:
        x = ready.pop()
        order.append(x)
        for y in graph.get(x, ()):
            indegree[y] -= 1
            if indegree[y] == 0:
                ready.append(y)
    return order


def _frequencies(succ, heads, loop_heads, parents, bodies) -> tuple[np.ndarray, np.ndarray]:
    """Per block: expected executions per iteration of its innermost loop; per loop: expected
    entries per iteration of its parent (see the module doc)."""
    n = len(succ)
    innermost = np.full(n, -1)
    for li, body in enumerate(bodies):  # pre-order: inner loops come later and win
        for b in body:
            innermost[b] = li
    freq = np.zeros(n)
    entry = np.zeros(len(bodies))
    for region in range(-1, len(bodies)):
        inside = (lambda b: True) if region < 0 else bodies[region].__contains__
        starts = heads if region < 0 else [loop_heads[region]]

        def node(b):
            """The block itself, ("loop", child) for a nested loop's block, None outside."""
            if not inside(b):
                return None
            li = innermost[b]
            if li == region:
                return b
            while parents[li] != region:
                li = parents[li]
            return ("loop", li)

        def outs(x):
            if isinstance(x, tuple):
                body = bodies[x[1]]
                targets = [c for b in body for c in succ[b] if c not in body]
            else:
                targets = succ[x]
            nodes = [node(c) for c in targets if region < 0 or c != loop_heads[region]]
            return list(dict.fromkeys(m for m in nodes if m is not None and m != x))

        graph: dict = {}
        todo = [node(h) for h in starts]
        seen = set(todo)
        while todo:
            x = todo.pop()
            graph[x] = outs(x)
            for y in graph[x]:
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        order = _topological(graph, [node(h) for h in starts])
        # the loops each node leads to, to favour the side of a branch that enters a loop
        reach: dict = {}
        for x in reversed(order):
            own = {x} if isinstance(x, tuple) else set()
            reach[x] = own.union(*(reach.get(y, set()) for y in graph[x]))
        p: dict = {node(h): 1.0 for h in starts}
        for x in order:
            targets = graph[x]
            if not targets:
                continue
            common = set.intersection(*(reach.get(y, set()) for y in targets))
            favoured = [y for y in targets if reach.get(y, set()) - common] or targets
            share = p.get(x, 0.0) / len(favoured)
            for y in favoured:
                p[y] = p.get(y, 0.0) + share
        for x, value in p.items():
            if isinstance(x, tuple):
                entry[x[1]] = value
            else:
                freq[x] = value
    return freq, entry


def split_operands(text: str) -> tuple[str, ...]:
    """An instruction's operands split at top-level commas (x86 and PTX alike: commas inside
    (), [] or {} belong to one operand)."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur).strip())
    return tuple(o for o in out if o)
