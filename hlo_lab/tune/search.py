"""``hlo tune``: a search over one module's fusion decisions, every candidate
compiled by real XLA, gated on outputs equal to stock's and measured against
stock (or, for a GPU target compiled without a GPU, priced by the GPU roofline).

The loop, per strategy, and how a killed search resumes: docs/tune.md#how-it-searches
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import queue
import random
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from hlo_analysis.rank_stats import kendall_tau
from hlo_tools import parse
from hlo_tools.errors import HloError
from passes.fusion.decisions import FusionDecisions, pipelines
from xla_bridge import worker
from xla_bridge.jax_internals import jax_versions

from . import evaluate
from .space import Proposal, Space, mutate, random_point, stock_decisions, text_hash
from .store import Measured, TuneStore, Where

STRATEGIES = ("hill", "anneal", "random")


@dataclass
class TuneCandidate:
    """A priced decision set and what it measured (``remeasured``: the second
    measurement of a win)."""

    proposal: Proposal
    measured: Measured
    remeasured: Measured | None = None

    @property
    def value(self) -> float | None:
        """Its speedup over stock, the second measurement when there is one; None when it failed or differed."""
        m = self.remeasured if self.remeasured is not None else self.measured
        return m.speedup if m.ok else None


@dataclass
class SearchOutcome:
    strategy: str
    candidates: list[TuneCandidate] = field(default_factory=list)
    best: TuneCandidate | None = None
    compiles: int = 0
    seconds: float = 0.0


class _Pool:
    """``n`` XLA worker processes; ``call`` runs on a free one (waiting for one),
    ``submit`` does so in the background, so ``n`` calls run in parallel."""

    def __init__(self, n: int):
        self.free: queue.Queue = queue.Queue()
        self.workers = [worker.Worker() for _ in range(max(1, n))]
        for w in self.workers:
            self.free.put(w)
        self.executor = ThreadPoolExecutor(len(self.workers))

    def call(self, fn: Callable, args: tuple, kwargs: dict, module: str, backend: str) -> Any:
        w = self.free.get()
        try:
            return w.call(fn, args, kwargs, phase="compiling", module=module, backend=backend)
        finally:
            self.free.put(w)

    def submit(self, fn: Callable, args: tuple, kwargs: dict, module: str, backend: str):
        return self.executor.submit(self.call, fn, args, kwargs, module, backend)

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        for w in self.workers:
            w.close()


def _first_line(e: BaseException) -> str:
    """What a failed candidate's row says: the exception's type and first line."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


@dataclass
class TuneResult:
    """What ``hlo tune`` reports (``as_dict`` is its ``--json``)."""

    module: str
    backend: str
    target: str | None
    objective: str
    strategy: str
    budget: int
    main: SearchOutcome
    baseline: SearchOutcome | None
    finals: dict[str, Measured]
    stock_share: float
    hook_mismatches: int
    seconds: float
    replay: str | None = None

    def as_dict(self) -> dict[str, Any]:
        tuned, best, rnd = (self.finals.get(label) for label in ("tuned", "best", "random"))
        ok = [c for c in self.main.candidates if c.value is not None]
        tau = kendall_tau([-c.proposal.predicted_us for c in ok], [c.value for c in ok]) if len(ok) >= 3 else float("nan")
        alls = self.main.candidates + (self.baseline.candidates if self.baseline else [])
        return {
            "module": self.module, "backend": self.backend, "target": self.target, "objective": self.objective,
            "strategy": self.strategy, "budget": self.budget,
            "stock_ms": tuned.stock_us / 1e3 if tuned and tuned.stock_us else None,
            "best_ms": tuned.cand_us / 1e3 if tuned and tuned.cand_us else None,
            "speedup": tuned.speedup if tuned else None,
            "speedup_p10": tuned.speedup_p10 if tuned else None,
            "speedup_p90": tuned.speedup_p90 if tuned else None,
            "outputs": tuned.verdict if tuned else None,
            "best_pass_speedup": best.speedup if best else None,
            "random_best_speedup": rnd.speedup if rnd else None,
            "candidates": len(self.main.candidates),
            "compiles": self.main.compiles,
            "search_seconds": round(self.main.seconds, 1),
            "random_candidates": len(self.baseline.candidates) if self.baseline else 0,
            "random_compiles": self.baseline.compiles if self.baseline else 0,
            "kendall_tau_model_vs_measured": None if math.isnan(tau) else tau,
            "unequal": sum(c.measured.status == "unequal" for c in alls),
            "errors": sum(c.measured.status == "error" for c in alls),
            "stock_decisions_matched": self.stock_share,
            "hook_mismatches": self.hook_mismatches,
            "first_error": next((c.measured.error for c in alls if c.measured.status == "error"), None),
            "first_unequal": next((c.measured.error for c in alls if c.measured.status == "unequal"), None),
            "best_decisions": self.main.best.proposal.decisions.as_dict() if self.main.best else None,
            "seconds": round(self.seconds, 1),
            "replay": self.replay,
        }


class Tuner:
    """One ``hlo tune`` run on one module (see the module docstring)."""

    def __init__(self, name: str, text: str, *, budget: int = 60, seconds: float | None = None,
                 backend: str = "cpu", target: str | None = None, strategy: str = "hill", seed: int = 0,
                 workers: int = 2, db: str | os.PathLike | None = None, reps: int = 100, final_reps: int = 400,
                 baseline: bool = True, progress: Callable[[str, int, int], None] | None = None,
                 model: str | None = None):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
        if budget < 1:
            raise ValueError("--budget must be at least 1 candidate")
        self.name, self.text = name, text
        self.budget, self.seconds = budget, seconds
        self.backend, self.target = ("gpu" if target else backend), target
        # the GPU whose roofline prices candidates and the GPU passes' decisions
        self.model = model or target or ("h100" if self.backend == "gpu" else None)
        self.strategy, self.seed, self.workers = strategy, seed, workers
        self.db, self.reps, self.final_reps = db, reps, final_reps
        self.baseline = baseline and strategy != "random"
        self.progress = progress or (lambda msg, done, total: None)
        self.objective = (f"predicted: our GPU roofline of {target}, compiled without a GPU (nothing runs)"
                          if target else f"measured on XLA:{self.backend.upper()}, paired ABBA against stock")
        self.module_hash = text_hash(text)
        self.hook_mismatches = 0

    # -- measurement -----------------------------------------------------------------

    def _where(self, strategy: str) -> Where:
        v = jax_versions()
        key = "|".join(map(str, (self.module_hash, self.backend, self.target or "", self.model or "", strategy,
                                 self.seed, self.budget, self.reps, self.workers, v["jax"], v["jaxlib"])))
        return Where(self.name, self.module_hash, self.backend, self.target or "", self.objective, strategy,
                     hashlib.sha256(key.encode()).hexdigest()[:16])

    def _kwargs(self, reps: int) -> dict:
        return dict(backend=self.backend, target=self.target, model=self.model, reps=reps, lock=self.lock)

    def _measure(self, proposals: list[Proposal], store: TuneStore, kind: str, reps: int) -> list[tuple[Measured, bool]]:
        """Each proposal measured (``kind`` "candidate" or "remeasure"), or found
        in the database; every new measurement is stored as it arrives."""
        known = self.known[kind]
        out: list[tuple[Measured, bool] | None] = [None] * len(proposals)
        futures, theirs = {}, []
        for i, p in enumerate(proposals):
            if p.fused_hash in known:
                out[i] = (known[p.fused_hash], False)
            elif store.claim(kind, p.fused_hash):
                if (m := store.find(kind, p.fused_hash, reps=0 if self.target else reps)) is not None:
                    store.release(kind, p.fused_hash)  # another run measured it since this one started
                    known[p.fused_hash], out[i] = m, (m, False)
                    continue
                futures[i] = self.pool.submit(evaluate.evaluate, (self.text, p.decisions.as_dict(), p.fused_hash),
                                              self._kwargs(reps), self.name, self.backend)
            else:  # another run on this database is measuring it: its row is ours too
                theirs.append(i)
        for i, f in futures.items():
            out[i] = (self._measured(proposals[i], f.result, store, kind), True)
        for i in theirs:
            p = proposals[i]
            m = store.wait_for(kind, p.fused_hash, reps=0 if self.target else reps)
            if m is not None:
                known[p.fused_hash] = m
                out[i] = (m, False)
            else:  # that run went away first: measured here after all
                store.claim(kind, p.fused_hash)
                out[i] = (self._measured(p, lambda p=p: self.pool.call(
                    evaluate.evaluate, (self.text, p.decisions.as_dict(), p.fused_hash), self._kwargs(reps),
                    self.name, self.backend), store, kind), True)
        return out  # type: ignore[return-value]

    def _measured(self, p: Proposal, result: Callable[[], Measured], store: TuneStore, kind: str) -> Measured:
        """One candidate's measurement (``result`` runs or waits for it), stored
        and its claim released; a failure is that candidate's row, not the run's end."""
        try:
            m = result()
        except (HloError, OSError) as e:  # XlaAbortError, XlaCompileError, PassError...: this candidate only
            m = Measured(p.fused_hash, "error", error=_first_line(e))
        except Exception as e:  # noqa: BLE001 - a pass that raised in the worker (RemoteError) is a failed candidate
            m = Measured(p.fused_hash, "error", error=_first_line(e))
        if m.hook_hash is not None and m.hook_hash != p.fused_hash:
            self.hook_mismatches += 1
        store.add(kind, p.decisions.as_dict(), p.decisions.key(), p.predicted_us, m)
        store.release(kind, p.fused_hash)
        self.known[kind][p.fused_hash] = m
        return m

    # -- one search ------------------------------------------------------------------

    def _search(self, strategy: str, starts: list[FusionDecisions], base: Proposal) -> SearchOutcome:
        where = self._where(strategy)
        store = TuneStore(self.db, where)
        rng = random.Random(f"{self.seed}:{strategy}")
        out = SearchOutcome(strategy)
        seen: set[str] = set()
        current: TuneCandidate | None = None
        t0 = time.perf_counter()
        t_end = t0 + self.seconds if self.seconds else None
        stalls = 0
        pending = list(starts) if strategy != "random" else []
        while len(out.candidates) < self.budget and stalls < 40:
            if t_end is not None and time.perf_counter() > t_end:
                break
            left = self.budget - len(out.candidates)
            n = min(self.workers, left)
            batch = self._propose(strategy, pending[:left], current, base, rng, n, seen)
            pending = []
            if not batch:
                stalls += 1
                continue
            stalls = 0
            results = self._measure(batch, store, "candidate", self.reps)
            new = []
            for p, (m, compiled) in zip(batch, results):
                seen.add(p.fused_hash)
                c = TuneCandidate(p, m)
                out.compiles += compiled
                out.candidates.append(c)
                new.append(c)
            top = max((c for c in new if c.value is not None), key=lambda c: c.value, default=None)
            if top is not None and (out.best is None or top.value > out.best.value):
                if not self.target:  # a noisy win is measured again before it is kept
                    ((top.remeasured, _),) = self._measure([top.proposal], store, "remeasure", self.reps)
                if top.value is not None and (out.best is None or top.value > out.best.value):
                    out.best = top
            current = self._accept(strategy, current, new, out, rng)
            self.progress(f"{strategy}: best {out.best.value:.3f}x" if out.best else f"{strategy}: no candidate yet",
                          len(out.candidates), self.budget)
        out.seconds = time.perf_counter() - t0
        return out

    def _propose(self, strategy: str, pending: list[FusionDecisions], current: TuneCandidate | None, base: Proposal,
                 rng: random.Random, n: int, seen: set[str]) -> list[Proposal]:
        """The next ``n`` candidates: the start points first; then random points
        (random search) or the model's cheapest of several mutations of the
        current point, each a fused module not measured in this search."""
        fresh: dict[str, Proposal] = {}
        if pending:
            for d in pending:
                p = self.space.price(d)
                if p.fused_hash not in seen:
                    fresh.setdefault(p.fused_hash, p)
            return list(fresh.values())
        if strategy == "random":
            for _ in range(n * 4):
                p = self.space.price(random_point(base, rng, self.model))
                if p.fused_hash not in seen:
                    fresh.setdefault(p.fused_hash, p)
                if len(fresh) == n:
                    break
            return list(fresh.values())
        start = current.proposal if current is not None else base
        for _ in range(n * 3):
            p = self.space.price(mutate(start, rng, self.model))
            if p.fused_hash not in seen:
                fresh.setdefault(p.fused_hash, p)
        ranked = sorted(fresh.values(), key=lambda p: (p.predicted_us, p.fused_hash))
        # the model's cheapest, and (from two workers on) one drawn from the rest:
        # the model is a guide, not the judge (it ranks XLA:CPU's library calls poorly)
        picked = ranked[:n - n // 2]
        rest = ranked[len(picked):]
        return picked + rng.sample(rest, min(n // 2, len(rest)))

    def _accept(self, strategy: str, current: TuneCandidate | None, new: list[TuneCandidate], out: SearchOutcome,
                rng: random.Random) -> TuneCandidate | None:
        """The point the next mutations start from: the best (hill-climbing), or
        for annealing a candidate accepted by the Metropolis rule at a
        temperature falling with the budget spent."""
        if strategy != "anneal":
            return out.best
        temp = 0.03 * (1 - len(out.candidates) / self.budget) + 0.002
        for c in new:
            if c.value is None:
                continue
            if current is None or current.value is None or c.value >= current.value or \
                    rng.random() < math.exp((c.value - current.value) / temp):
                current = c
        return current

    # -- the run ---------------------------------------------------------------------

    def run(self) -> TuneResult:
        t0 = time.perf_counter()
        self.pool = _Pool(self.workers)
        fd, self.lock = tempfile.mkstemp(prefix="hlo-tune-", suffix=".lock")
        os.close(fd)
        try:
            self.progress("compiling stock and reading the hook's input", 0, self.budget)
            prep = self.pool.call(evaluate.prepare, (self.text, self.backend, self.target), {}, self.name, self.backend)
            self.space = Space(prep["seen"], self.model)
            stock_d, share = stock_decisions(self.space.module, parse(prep["stock_optimized"], source="<stock>"),
                                             self.model)
            base = self.space.price(FusionDecisions.for_target(self.model))
            main_where = self._where(self.strategy)
            store = TuneStore(self.db, main_where)
            self.known = {k: store.measured(k, reps=0 if self.target else self.reps) for k in ("candidate", "remeasure")}
            # BEST, stock's own decisions, and each pipeline shape with its default knobs (a coarse sweep)
            starts = [base.decisions, stock_d] + [dataclasses.replace(base.decisions, pipeline=shape)
                                                  for shape in pipelines(self.model) if shape != base.decisions.pipeline]
            elsewhere = store.best_elsewhere()
            if elsewhere is not None:
                try:
                    starts.append(FusionDecisions.from_dict(elsewhere))
                except (ValueError, TypeError):
                    pass  # written by another version of the decision set: not a start point
            main = self._search(self.strategy, starts, base)
            baseline = self._search("random", [], base) if self.baseline else None
            finals = self._finals(main, baseline, base, store)
            return TuneResult(self.name, self.backend, self.target, self.objective, self.strategy, self.budget, main,
                              baseline, finals, share, self.hook_mismatches, time.perf_counter() - t0)
        finally:
            self.pool.close()
            os.unlink(self.lock)

    def _finals(self, main: SearchOutcome, baseline: SearchOutcome | None, base: Proposal,
                store: TuneStore) -> dict[str, Measured]:
        """The tuned best, BEST and random search's best, each measured once more
        against stock with ``final_reps`` repetitions (predicted: as priced)."""
        picks = {"tuned": main.best.proposal if main.best else None, "best": base,
                 "random": baseline.best.proposal if baseline and baseline.best else None}
        out: dict[str, Measured] = {}
        done: dict[str, Measured] = {}
        self.progress("measuring the tuned module, BEST and random search's best once more", self.budget, self.budget)
        for label, p in picks.items():
            if p is None:
                continue
            if p.fused_hash not in done:
                try:
                    m = self.pool.call(evaluate.evaluate, (self.text, p.decisions.as_dict(), p.fused_hash),
                                       self._kwargs(self.final_reps), self.name, self.backend)
                except Exception as e:  # noqa: BLE001 - reported as that row's error
                    m = Measured(p.fused_hash, "error", error=_first_line(e))
                store.add("final", p.decisions.as_dict(), p.decisions.key(), p.predicted_us, m)
                done[p.fused_hash] = m
            out[label] = done[p.fused_hash]
        return out
