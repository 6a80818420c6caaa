"""Benchmark results in SQLite (default ``~/.cache/hlo-pass-lab/results.db``).

One row per benchmark, each written in its own transaction (WAL journal), so a
run killed half-way leaves every earlier row intact.  A row is keyed by the XLA
version that produced it (``jax``/``jaxlib``: the worker's, which under
``versions`` is not this process's) and its ``side`` (that version plus any
extra XLA flags), so ``trend`` shows a module over versions.  Columns added since
a database was made are added to it on open (``_migrate``), keeping its rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

from .jax_internals import jax_versions

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    module TEXT NOT NULL,
    module_hash TEXT NOT NULL,
    rewritten_hash TEXT,
    passes TEXT NOT NULL DEFAULT '',
    backend TEXT NOT NULL,
    device TEXT NOT NULL,
    pipeline_a TEXT NOT NULL,
    pipeline_b TEXT,
    jax TEXT, jaxlib TEXT, git_commit TEXT,
    reps INTEGER, warmup INTEGER, input_sets INTEGER,
    a_median_us REAL, a_p10_us REAL, a_p90_us REAL,
    b_median_us REAL, b_p10_us REAL, b_p90_us REAL,
    speedup REAL, speedup_p10 REAL, speedup_p90 REAL,
    verdict TEXT,
    extra TEXT,
    side TEXT,
    predicted_us REAL
);
CREATE INDEX IF NOT EXISTS runs_module ON runs(module, created);
"""

#: Columns added after the first schema: (name, type), added to older databases on open.
_ADDED_COLUMNS = (("side", "TEXT"), ("predicted_us", "REAL"))


def default_db() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hlo-pass-lab" / "results.db"


def connect(db: str | os.PathLike | None = None) -> sqlite3.Connection:
    path = Path(db) if db is not None else default_db()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    _migrate(conn)
    return conn


def _migrate(conn: sqlite3.Connection) -> None:
    """Adds the columns an older database lacks (its rows get NULL there)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    with conn:
        for name, kind in _ADDED_COLUMNS:
            if name not in have:
                conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def git_commit(repo: str | os.PathLike | None = None) -> str | None:
    repo = repo or Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def record(result, *, module_text: str, rewritten_text: str | None = None, passes: str = "",
           db: str | os.PathLike | None = None, extra: dict | None = None, versions: dict | None = None,
           side: str | None = None, predicted_us: float | None = None) -> int:
    """Stores one ``BenchResult``; returns its row id.  ``versions``: the jax and
    jaxlib that measured it when not this process's (a version's worker);
    ``side``: its label (version and extra flags); ``predicted_us``: the cost
    model's time for it."""
    v = versions or jax_versions()
    b = result.b
    row = dict(
        created=time.strftime("%Y-%m-%dT%H:%M:%S"), module=result.name_a, module_hash=text_hash(module_text),
        rewritten_hash=text_hash(rewritten_text) if rewritten_text is not None else None, passes=passes,
        backend=result.backend, device=result.device, pipeline_a=result.pipeline_a, pipeline_b=result.pipeline_b or None,
        jax=v["jax"], jaxlib=v["jaxlib"], git_commit=git_commit(), reps=result.reps, warmup=result.warmup,
        input_sets=result.input_sets, a_median_us=result.a.median_us, a_p10_us=result.a.p10_us, a_p90_us=result.a.p90_us,
        b_median_us=b.median_us if b else None, b_p10_us=b.p10_us if b else None, b_p90_us=b.p90_us if b else None,
        speedup=result.speedup, speedup_p10=result.speedup_p10, speedup_p90=result.speedup_p90, verdict=result.verdict,
        extra=json.dumps(extra or {}), side=side or v["jaxlib"], predicted_us=predicted_us)
    conn = connect(db)
    try:
        with conn:  # one transaction: the row is there whole or not at all
            cur = conn.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        return int(cur.lastrowid)
    finally:
        conn.close()


def history(db: str | os.PathLike | None = None, *, limit: int = 20, module: str | None = None) -> list[dict]:
    """The most recent rows, newest first (``module``: only that module's)."""
    path = Path(db) if db is not None else default_db()
    if not path.exists():
        return []
    # Read-only: reading history never writes a schema into someone's file.
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'").fetchone():
            return []
        q = "SELECT * FROM runs" + (" WHERE module = ?" if module else "") + " ORDER BY id DESC LIMIT ?"
        return [dict(r) for r in conn.execute(q, ([module] if module else []) + [limit])]
    finally:
        conn.close()


def _version_key(v: str | None) -> tuple:
    return tuple(int(x) if x.isdigit() else 0 for x in (v or "").split("."))


def trend(module: str, db: str | os.PathLike | None = None) -> list[dict]:
    """``module``'s latest row per side (XLA version and flags), oldest version
    first: its measured median and predicted time as XLA releases go by."""
    latest: dict[str, dict] = {}
    for r in history(db, limit=1_000_000, module=module):  # newest first: the first seen per side is its latest
        key = r.get("side") or r.get("jaxlib") or "?"
        if key not in latest:
            latest[key] = r | {"runs": 0}
        latest[key]["runs"] += 1
    return sorted(latest.values(), key=lambda r: (_version_key(r.get("jaxlib")), r.get("side") or ""))
