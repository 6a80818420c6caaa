"""Which part of a module to draw: focus options and the node budget.

Graphs of real LLM modules have tens of thousands of instructions; ``select``
turns ``FocusOptions`` into a ``View``: the top-level instructions to draw, the
fusions to draw as clusters, and a notice that says what was cut.
"""

from __future__ import annotations

import collections
import difflib
import functools
from dataclasses import dataclass

from hlo_tools.ir import Computation, Instruction, Module
from hlo_tools.opcode import HloOpcode

from .style import Category, category


class VisualizeError(ValueError):
    """A focus option names something the module does not have, or a renderer is missing."""


#: The default edge budget per node of budget: 800 edges for the default 500 nodes,
#: which dot lays out in 1-3 s here on the corpus's CPU train steps (bench/viz_speed.py --sweep).
EDGES_PER_NODE = 1.6


@dataclass(frozen=True)
class FocusOptions:
    """What to draw. Defaults: the entry computation, fusions expanded, at most 500 nodes and 800 edges."""

    computation: str | None = None  # a computation's name; None: the entry
    whole_module: bool = False  # every non-fused computation, each as a cluster
    around: str | None = None  # an instruction's name: draw its neighbourhood
    radius: int = 2  # hops (operands or users) from ``around``
    collapse_fusions: bool = False  # draw each fusion as one node
    # node budget; fused instructions of expanded fusions count. dot is superlinear:
    # 500 nodes lay out in ~1 s here, 1000 in ~15-30 s (bench/viz_speed.py).
    max_nodes: int = 500
    # edge budget (edges inside expanded fusions count): dot's time follows the edges,
    # and how many ranks they span, more than the nodes (bench/viz_speed.py --sweep).
    # None: EDGES_PER_NODE x max_nodes, so 800 by default and a larger --max-nodes alone widens both.
    max_edges: int | None = None

    @property
    def edge_budget(self) -> int:
        """``max_edges``, or the default that follows ``max_nodes``."""
        return self.max_edges if self.max_edges is not None else int(EDGES_PER_NODE * self.max_nodes)


@dataclass(frozen=True)
class View:
    """The selected part of a module: top-level instructions (in text order) and
    the fusions among them drawn expanded, as clusters."""

    module: Module
    computations: tuple[Computation, ...]
    instructions: tuple[Instruction, ...]
    expanded: frozenset[str] = frozenset()  # names of fusions drawn as clusters
    center: str | None = None
    notice: str | None = None  # what was cut, in words; None when nothing was
    hidden: int = 0  # top-level instructions of the computations not drawn

    @functools.cached_property
    def names(self) -> frozenset[str]:
        return frozenset(i.name for i in self.instructions)

    @functools.cached_property
    def edge_count(self) -> int:
        """Edges the drawing will have: operand edges between drawn top-level
        instructions plus those inside expanded fusions."""
        names = self.names
        return sum(_edges_within(i, self.expanded) + sum(1 for o in i.operands if o.name in names)
                   for i in self.instructions)

    @property
    def node_count(self) -> int:
        """Nodes the drawing will have: top-level ones plus fused ones of expanded fusions."""
        return sum(_weight(i, self.expanded) for i in self.instructions)

    def drawn_instructions(self) -> list[Instruction]:
        """Every instruction that appears in the drawing, once: top-level ones and
        the bodies of expanded fusions (an expanded fusion is its cluster)."""
        out: list[Instruction] = []
        for instr in self.instructions:
            out.append(instr)
            if instr.name in self.expanded:
                out.extend(instr.fused_computation)
        return out


def _weight(instr: Instruction, expanded: frozenset[str] | set[str]) -> int:
    if instr.name in expanded:
        return len(instr.fused_computation)
    return 1


def _edges_within(instr: Instruction, expanded: frozenset[str] | set[str]) -> int:
    """Edges drawn inside ``instr``'s cluster (0 unless it is an expanded fusion)."""
    if instr.name in expanded:
        return sum(len(i.operands) for i in instr.fused_computation)
    return 0


def find_instruction(module: Module, name: str) -> Instruction:
    """The instruction called ``name`` (a leading ``%`` is ignored); raises
    VisualizeError with the closest names when there is none."""
    name = name.lstrip("%")
    for comp in module.computations:
        instr = comp.get_instruction(name)
        if instr is not None:
            return instr
    names = [i.name for i in module.instructions()]
    close = difflib.get_close_matches(name, names, n=5)
    hint = f"; did you mean {', '.join('%' + c for c in close)}?" if close else ""
    raise VisualizeError(f"module {module.name} has no instruction %{name}{hint}")


def _find_computation(module: Module, name: str) -> Computation:
    comp = module.get_computation(name.lstrip("%"))
    if comp is None:
        close = difflib.get_close_matches(name, [c.name for c in module.computations], n=5)
        hint = f"; did you mean {', '.join('%' + c for c in close)}?" if close else ""
        raise VisualizeError(f"module {module.name} has no computation %{name}{hint}")
    return comp


def _fusion_of(module: Module, comp: Computation) -> Instruction | None:
    """The fusion instruction whose body is ``comp`` (None if ``comp`` is not a fusion body)."""
    for instr in module.instructions():
        if instr.opcode is HloOpcode.FUSION and instr.fused_computation is comp:
            return instr
    return None


def _distances(starts: list[Instruction], limit: int | None) -> dict[Instruction, int]:
    """Hops from ``starts`` over operand and user edges, within one computation."""
    dist = {s: 0 for s in starts}
    queue = collections.deque(starts)
    while queue:
        node = queue.popleft()
        d = dist[node]
        if limit is not None and d >= limit:
            continue
        for nxt in (*node.operands, *node.users):
            if nxt not in dist:
                dist[nxt] = d + 1
                queue.append(nxt)
    return dist


def _within_budget(ranked: list[Instruction], expanded: set[str], options: FocusOptions) -> tuple[list[Instruction], str | None]:
    """The longest prefix of ``ranked`` whose drawing stays within both budgets
    (at least one instruction, so a view is never empty), and the budget that
    stopped it in words (None when everything fits)."""
    kept: list[Instruction] = []
    seen: set[Instruction] = set()
    nodes = edges = 0
    for instr in ranked:
        new_edges = _edges_within(instr, expanded) + sum(1 for o in instr.operands if o in seen)
        new_edges += sum(1 for u in set(instr.users) if u in seen for o in u.operands if o is instr)
        nodes_after, edges_after = nodes + _weight(instr, expanded), edges + new_edges
        if kept and nodes_after > options.max_nodes:
            return kept, f"the budget of {options.max_nodes} nodes"
        if kept and edges_after > options.edge_budget:
            return kept, f"the budget of {options.edge_budget} edges"
        kept.append(instr)
        seen.add(instr)
        nodes, edges = nodes_after, edges_after
    return kept, None


def select(module: Module, options: FocusOptions = FocusOptions()) -> View:
    """Applies the focus options and the node budget; see ``FocusOptions``."""
    center: Instruction | None = None
    expand_center: str | None = None
    if options.around:
        center = find_instruction(module, options.around)
        fused = {id(c) for c in module.fusion_computations()}
        while id(center.parent) in fused:  # focus on the top-level fusion that holds it, expanded
            center = _fusion_of(module, center.parent)
            expand_center = center.name
        comps = (center.parent,)
    elif options.whole_module:
        fused = {id(c) for c in module.fusion_computations()}
        comps = tuple(c for c in module.computations if id(c) not in fused)
    else:
        comps = (_find_computation(module, options.computation) if options.computation else module.entry,)

    candidates: list[Instruction] = [i for c in comps for i in c]
    if center is not None:
        dist = _distances([center], options.radius)
        order = {i: n for n, i in enumerate(candidates)}
        ranked = sorted(dist, key=lambda i: (dist[i], order[i]))
        scope = f"within {options.radius} of %{center.name}"
    else:
        dist = {}
        for c in comps:
            if c.root is not None:
                dist.update(_distances([c.root], None))
        far = max(dist.values(), default=0) + 1
        order = {i: n for n, i in enumerate(candidates)}
        ranked = sorted(candidates, key=lambda i: (dist.get(i, far), order[i]))
        scope = "in " + (f"{len(comps)} computations" if len(comps) > 1 else f"%{comps[0].name}")

    expanded: set[str] = set()
    if not options.collapse_fusions:
        expanded = {i.name for i in ranked if i.opcode is HloOpcode.FUSION}
    elif expand_center:  # the focused instruction is inside it: keep it visible
        expanded = {expand_center}
    notes: list[str] = []
    kept, over = _within_budget(ranked, expanded, options)
    if over and expanded:
        # collapse fusions before cutting instructions; keep the focused fusion open if that fits
        keep = {expand_center} & expanded if expand_center else set()
        if _within_budget(ranked, keep, options)[1]:
            keep = set()
        notes.append(f"{len(expanded) - len(keep)} fusions collapsed to one node each to fit {over}")
        expanded = keep
        kept, over = _within_budget(ranked, expanded, options)
    cut = ranked[len(kept):]
    if cut:
        hist = collections.Counter(i.opcode_text for i in cut).most_common(6)
        what = ", ".join(f"{n} {op}" for op, n in hist)
        basis = f"nearest to %{center.name}" if center is not None else "nearest to the root"
        notes.append(f"showing {len(kept)} of {len(ranked)} instructions {scope} ({basis}) within {over}; "
                     f"{len(cut)} not shown: {what}{', …' if len(hist) == 6 else ''}")
    elif center is not None:
        notes.append(f"showing the {len(kept)} instructions {scope} of {len(candidates)} in %{center.parent.name}")

    keep_set = set(kept)
    drawn = tuple(i for i in candidates if i in keep_set)
    expanded_kept = frozenset(n for n in expanded if n in {i.name for i in drawn})
    return View(module, comps, drawn, expanded_kept, center.name if center is not None else None,
                "; ".join(notes) or None, len(candidates) - len(drawn))


def suggest_focus(view: View) -> Instruction | None:
    """An instruction worth ``--around``: among those a cut view does not show
    (else the collapsed fusions it shows), the largest matmul, else the largest
    fusion, else the largest instruction, by output bytes; None when there is none."""
    names = view.names
    pool = [i for c in view.computations for i in c if i.name not in names
            and i.opcode not in (HloOpcode.PARAMETER, HloOpcode.CONSTANT)]
    if not pool:
        pool = [i for i in view.instructions if i.opcode is HloOpcode.FUSION and i.name not in view.expanded]
    for wanted in (Category.MATMUL, Category.FUSION, None):
        matching = [i for i in pool if wanted is None or category(i) is wanted]
        if matching:
            return max(matching, key=lambda i: i.shape.byte_size)
    return None
