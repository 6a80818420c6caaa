"""``hlo findings``: from what ``hlo tune`` wins on some model families to general
rules, each a condition and an action (``passes.fusion.rules.Rule``), each a pass
(``--passes rule:FILE#NAME``), validated on model families it was not derived
from, and bundled for review with ``hlo upstream``. XLA:CPU, measured; or an
XLA:GPU target compiled without a GPU, predicted by our roofline and XLA's model.

    evidence (hlo tune per training module) -> derive (levers the winners share,
    conditioned on a pattern) -> validate (held-out families, against BEST and stock)

The method and the rules found on the corpus: docs/findings.md
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import corpus
from hlo_tools import parse
from hlo_tools.fileio import make_dirs, write_output
from hlo_tools.formats import walk_module_files
from passes.fusion.rules import FORMAT, RuleFusion, base_name
from xla_bridge import load

from .derive import Derived, derive
from .evidence import CorpusModule, ModuleEvidence, gather
from .report import markdown
from .validate import Bench, Validation, validate

#: The families held out by default: one dense Llama-like model and the MoE one
#: that the training families (llama3, mistral, qwen3_moe) do not share a config with.
DEFAULT_HELD_OUT = ("gemma2", "mixtral")


def corpus_modules(pattern: str = "*-tiny-*", *, runnable_only: bool = True) -> list[CorpusModule]:
    """The bundled corpus's unsharded modules matching ``pattern`` (only the
    runnable ones unless ``runnable_only`` is False: a GPU target's predictions
    need no run), each with its family (the manifest's architecture)."""
    return [CorpusModule(e.name, e.meta.get("architecture") or e.name.split("-")[0], e.text("before_optimizations"),
                         e.runnable)
            for e in corpus.load() if (e.runnable or not runnable_only) and not e.sharded
            and fnmatch.fnmatch(e.name, pattern)]


def folder_modules(folder: str | Path) -> list[CorpusModule]:
    """Every module file in ``folder`` (a held-out set of the user's: HLO text, an
    ``.hlo.pb`` or StableHLO, as ``hlo scan`` finds them; XLA's side files are
    not modules). Its name: the file name without its suffixes; its family: that
    name up to its first ``-`` (``gemma2-tiny-prefill.hlo``: gemma2)."""
    files = walk_module_files(folder, recursive=False).files
    if not files:
        raise FileNotFoundError(f"{folder}: no module files (.hlo, .txt, .hlo.pb, .mlir, optionally .gz)")
    out, seen = [], {}
    for p in files:
        name = p.name.split(".")[0]
        if name in seen:
            raise ValueError(f"{folder}: {seen[name].name} and {p.name} both name module {name!r}: rename one")
        seen[name] = p
        out.append(CorpusModule(name, name.split("-")[0], load(p).to_text()))
    return out


def split(modules: Iterable[CorpusModule], held_out: Iterable[str]) -> tuple[list[CorpusModule], list[CorpusModule]]:
    """(training, held-out) by family."""
    held = set(held_out)
    modules = list(modules)
    return [m for m in modules if m.family not in held], [m for m in modules if m.family in held]


@dataclass
class Findings:
    train: list[ModuleEvidence]
    derived: list[Derived]
    validations: list[Validation]
    combined: dict[str, Any]
    held_out_modules: list[str]
    settings: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        by_name = {v.rule.name: v for v in self.validations}
        return {
            "format": FORMAT,
            "target": self.settings.get("target"),
            "backend": "gpu" if self.settings.get("target") else "cpu",
            "settings": self.settings,
            "train": [e.as_dict() for e in self.train],
            "held_out_modules": self.held_out_modules,
            "rules": [{**d.as_dict(), **by_name[d.rule.name].as_dict()} for d in self.derived],
            "combined": self.combined,
        }


def find(train: list[CorpusModule], held_out: list[CorpusModule], *, budget: int = 12, reps: int = 100,
         final_reps: int = 200, workers: int = 2, db: str | None = None, min_support: int = 2, seed: int = 0,
         target: str | None = None, progress: Callable[[str], None] = lambda _m: None) -> Findings:
    """Tunes ``train``, derives rules, validates them on ``held_out``: measured on
    XLA:CPU, or predicted for XLA:GPU ``target``."""
    if not train:
        raise ValueError("no training modules: every module is in a held-out family")
    if not held_out:
        raise ValueError("no held-out modules to validate the rules on")
    evidence = gather(train, budget=budget, reps=reps, final_reps=final_reps, workers=workers, db=db, seed=seed,
                      target=target, progress=progress)
    derived = derive(evidence, min_support=min_support)
    bench = Bench(reps=final_reps, target=target)
    try:
        validations, combined = validate([d.rule for d in derived], held_out, bench, progress)
    finally:
        bench.close()
    settings = {"target": target, "budget": budget, "reps": reps, "final_reps": final_reps,
                "min_support": min_support, "seed": seed,
                "train_families": sorted({m.family for m in train}),
                "held_out_families": sorted({m.family for m in held_out})}
    return Findings(evidence, derived, validations, combined, [m.name for m in held_out], settings)


def write(findings: Findings, out: str | Path) -> Path:
    """``findings.json`` (also the rules' pass file) and ``findings.md`` in ``out``."""
    out = make_dirs(out)
    data = findings.as_dict()
    write_output(out / "findings.json", json.dumps(data, indent=1) + "\n")
    write_output(out / "findings.md", markdown(data, out / "findings.json"))
    return out / "findings.json"


def bundle_rules(findings: Findings, findings_file: Path, modules: list[CorpusModule], out: str | Path, *,
                 reps: int = 50, seconds: float = 60.0, progress: Callable[[str], None] = lambda _m: None
                 ) -> dict[str, dict[str, Any]]:
    """An ``hlo upstream`` bundle per rule that held out, made on the held-out
    module where it gained most: rule name -> the bundle's figures, or its error."""
    from ..debug.upstream import UpstreamError, make_bundle  # lazy: the reducer, for runs that bundle only

    texts = {m.name: m.text for m in modules}
    out_dir = Path(out)
    bundles: dict[str, dict[str, Any]] = {}
    for v in findings.validations:
        if not v.held_out:
            continue
        name = v.rule.name
        trial = max(v.trials, key=lambda t: t.gain or 0.0)
        spec = f"rule:{findings_file}#{name}"  # RuleFusion.load splits at the last '#'

        progress(f"hlo upstream bundle of {name} on {trial.module}")
        try:
            base = base_name(v.rule.target)
            b = make_bundle(parse(texts[trial.module], source=trial.module), [RuleFusion((v.rule,))], spec,
                            out_dir / "upstream" / name, reps=reps, seconds=seconds,
                            baseline=(base, v.rule.base.passes(v.rule.target)))
            bundles[name] = {"module": trial.module, **b.as_dict()}
        except (UpstreamError, OSError) as e:
            bundles[name] = {"module": trial.module, "error": str(e)}
    return bundles
