"""``hlo tune``'s candidates in the results database (``results``), one row
each, written in its own transaction as soon as it is measured: a search killed
half-way keeps every candidate it measured, and the same search run again
finds them (by the hash of the fused module it would compile) instead of
compiling them again.

A row is keyed by what it measured: the module (hash), backend, GPU target, the
jax/jaxlib versions and the fused module's hash; ``kind`` says whether it is a
first measurement ("candidate"), a win measured again before it was kept
("remeasure"), or the end-of-search comparison ("final").
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass, field

from xla_bridge.jax_internals import jax_versions

from ..scan import process_alive
from xla_bridge.results import connect

SCHEMA = """
CREATE TABLE IF NOT EXISTS tune_candidates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    search TEXT NOT NULL,
    module TEXT NOT NULL,
    module_hash TEXT NOT NULL,
    backend TEXT NOT NULL,
    target TEXT NOT NULL DEFAULT '',
    jax TEXT, jaxlib TEXT,
    objective TEXT NOT NULL,
    strategy TEXT NOT NULL,
    kind TEXT NOT NULL,
    decisions TEXT NOT NULL,
    decisions_key TEXT NOT NULL,
    fused_hash TEXT NOT NULL,
    predicted_us REAL,
    kernels INTEGER,
    compile_s REAL,
    reps INTEGER,
    stock_us REAL, cand_us REAL,
    speedup REAL, speedup_p10 REAL, speedup_p90 REAL,
    verdict TEXT,
    status TEXT NOT NULL,
    error TEXT
);
CREATE INDEX IF NOT EXISTS tune_module ON tune_candidates(module_hash, backend, target, fused_hash);
CREATE TABLE IF NOT EXISTS tune_claims (
    key TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    created REAL NOT NULL
);
"""

#: A claim older than this is another run's that died without saying so on
#: another machine (on this one, its process is asked directly).
CLAIM_STALE_S = 3600.0


@dataclass
class Measured:
    """What one candidate measured (or why it could not be): ``status`` "ok",
    "unequal" (outputs differ from stock's: never kept; ``error`` names the first
    output that differs) or "error" (XLA refused or aborted; ``error`` says what XLA said)."""

    fused_hash: str
    status: str
    speedup: float | None = None
    speedup_p10: float | None = None
    speedup_p90: float | None = None
    stock_us: float | None = None
    cand_us: float | None = None
    compile_s: float | None = None
    verdict: str = ""
    error: str = ""
    kernels: int | None = None
    reps: int | None = None
    hook_hash: str | None = field(default=None, repr=False)  # the fused module the worker's hook made

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.speedup is not None

    @classmethod
    def of_row(cls, row: dict) -> "Measured":
        return cls(fused_hash=row["fused_hash"], status=row["status"], speedup=row["speedup"],
                   speedup_p10=row["speedup_p10"], speedup_p90=row["speedup_p90"], stock_us=row["stock_us"],
                   cand_us=row["cand_us"], compile_s=row["compile_s"], verdict=row["verdict"] or "",
                   error=row["error"] or "", kernels=row["kernels"], reps=row["reps"])


@dataclass(frozen=True)
class Where:
    """What every row of one search shares."""

    module: str
    module_hash: str
    backend: str
    target: str
    objective: str
    strategy: str
    search: str


class TuneStore:
    """The candidates of one module on one backend/target/jax, in ``db``
    (None: the default results database)."""

    def __init__(self, db: str | os.PathLike | None, where: Where):
        self.db = db
        self.where = where
        self.versions = jax_versions()

    def _conn(self):
        conn = connect(self.db)
        conn.executescript(SCHEMA)
        return conn

    def _rows(self, kind: str, extra: str = "", args: tuple = ()) -> list[dict]:
        w = self.where
        conn = self._conn()
        try:
            q = ("SELECT * FROM tune_candidates WHERE module_hash=? AND backend=? AND target=? AND jax IS ? "
                 "AND jaxlib IS ? AND kind=? " + extra + " ORDER BY id")
            return [dict(r) for r in conn.execute(q, (w.module_hash, w.backend, w.target, self.versions["jax"],
                                                      self.versions["jaxlib"], kind, *args))]
        finally:
            conn.close()

    def measured(self, kind: str = "candidate", *, reps: int = 0) -> dict[str, Measured]:
        """Every fused module measured before on this module/backend/target/jax
        with at least ``reps`` repetitions: hash -> its first measurement.  Errors
        are left out (a worker that died for another reason gets its retry)."""
        out: dict[str, Measured] = {}
        for r in self._rows(kind, "AND status != 'error' AND reps >= ?", (reps,)):
            out.setdefault(r["fused_hash"], Measured.of_row(r))
        return out

    def best_elsewhere(self) -> dict | None:
        """The decisions of the best candidate another search kept before this
        one first ran (a win measured twice, or, predicted, the best priced), so
        a new search starts from it, and this one, run again, from the same."""
        conn = self._conn()
        try:
            first = conn.execute("SELECT MIN(id) FROM tune_candidates WHERE search=?", (self.where.search,)).fetchone()[0]
        finally:
            conn.close()
        kind = "candidate" if self.where.target else "remeasure"
        rows = self._rows(kind, "AND search != ? AND status='ok' AND speedup IS NOT NULL AND id < ?",
                          (self.where.search, first if first is not None else 1 << 62))
        for r in sorted(rows, key=lambda r: -r["speedup"]):
            try:
                return json.loads(r["decisions"])
            except ValueError:  # a row this version cannot read: the next best
                continue
        return None

    # -- claims: concurrent runs on one database measure each candidate once --------

    def _claim_key(self, kind: str, fused_hash: str) -> str:
        w = self.where
        return "|".join((w.module_hash, w.backend, w.target, str(self.versions["jax"]), str(self.versions["jaxlib"]),
                         kind, fused_hash))

    def claim(self, kind: str, fused_hash: str) -> bool:
        """True when this process is to measure the candidate: nobody claimed it,
        or the run that did is gone (its process ended, or its claim is stale).
        Atomic: of two runs asking at once, one gets it."""
        key, me = self._claim_key(kind, fused_hash), (os.getpid(), platform.node(), time.time())
        conn = self._conn()
        try:
            with conn:
                if conn.execute("INSERT OR IGNORE INTO tune_claims VALUES (?, ?, ?, ?)", (key, *me)).rowcount:
                    return True
                row = conn.execute("SELECT pid, host, created FROM tune_claims WHERE key=?", (key,)).fetchone()
                if _claim_alive(row["pid"], row["host"], row["created"]):
                    return False
                # the claimer is gone: take it over, unless another run just did
                return bool(conn.execute("UPDATE tune_claims SET pid=?, host=?, created=? WHERE key=? AND pid=? "
                                         "AND host=? AND created=?",
                                         (*me, key, row["pid"], row["host"], row["created"])).rowcount)
        finally:
            conn.close()

    def release(self, kind: str, fused_hash: str) -> None:
        """Drops this process's claim (its row is written, or it gave up)."""
        conn = self._conn()
        try:
            with conn:
                conn.execute("DELETE FROM tune_claims WHERE key=? AND pid=? AND host=?",
                             (self._claim_key(kind, fused_hash), os.getpid(), platform.node()))
        finally:
            conn.close()

    def find(self, kind: str, fused_hash: str, *, reps: int = 0, errors: bool = False) -> "Measured | None":
        """The first row of a candidate measured with at least ``reps`` repetitions
        (``errors``: a failed one counts too), or None."""
        rows = self._rows(kind, "AND fused_hash=? AND (reps >= ? OR status = 'error')" if errors else
                          "AND fused_hash=? AND status != 'error' AND reps >= ?", (fused_hash, reps))
        return Measured.of_row(rows[0]) if rows else None

    def wait_for(self, kind: str, fused_hash: str, *, reps: int = 0, poll_s: float = 0.5) -> "Measured | None":
        """The row another run is measuring, once it is written (errors included:
        the other run's verdict stands); None when that run went away without
        writing it, so the caller claims and measures it itself."""
        while True:
            m = self.find(kind, fused_hash, reps=reps, errors=True)
            if m is not None:
                return m
            conn = self._conn()
            try:
                row = conn.execute("SELECT pid, host, created FROM tune_claims WHERE key=?",
                                   (self._claim_key(kind, fused_hash),)).fetchone()
            finally:
                conn.close()
            if row is None or not _claim_alive(row["pid"], row["host"], row["created"]):
                return None
            time.sleep(poll_s)

    def add(self, kind: str, decisions: dict, decisions_key: str, predicted_us: float | None, m: Measured) -> None:
        """One row, in its own transaction."""
        w = self.where
        row = dict(created=time.strftime("%Y-%m-%dT%H:%M:%S"), search=w.search, module=w.module,
                   module_hash=w.module_hash, backend=w.backend, target=w.target, jax=self.versions["jax"],
                   jaxlib=self.versions["jaxlib"], objective=w.objective, strategy=w.strategy, kind=kind,
                   decisions=json.dumps(decisions, sort_keys=True), decisions_key=decisions_key,
                   fused_hash=m.fused_hash, predicted_us=predicted_us, kernels=m.kernels, compile_s=m.compile_s,
                   reps=m.reps, stock_us=m.stock_us, cand_us=m.cand_us, speedup=m.speedup,
                   speedup_p10=m.speedup_p10, speedup_p90=m.speedup_p90, verdict=m.verdict, status=m.status,
                   error=m.error[:2000])
        conn = self._conn()
        try:
            with conn:
                conn.execute(f"INSERT INTO tune_candidates ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                             list(row.values()))
        finally:
            conn.close()


def _claim_alive(pid: int, host: str, created: float) -> bool:
    """Whether the run behind a claim may still write its row."""
    if host != platform.node():
        return time.time() - created < CLAIM_STALE_S
    return pid == os.getpid() or process_alive(pid)
