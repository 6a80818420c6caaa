"""Every ``hlo`` subcommand against bad input: a missing path, a folder, an empty
file, a binary file, a corrupt gzip, an unknown pass name (commands that take
``--passes``) and an output it cannot write (commands that write one).  Each must
end with one line on stderr, exit 1 or 2, and no Python traceback.

The commands run in-process through ``hlo_lab.cli.main`` (fast); a few run
through the console script too.  None of these inputs may reach XLA: commands
that compile must fail before compiling.
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_lab.cli import build_parser, main
from tests.test_parser_errors import GOOD

INPUTS = ("missing", "folder", "empty", "binary", "corrupt-gzip")

#: command -> its argv for each case.  ``{IN}``: the bad input; ``{GOOD}``: a
#: valid module; ``{OUT}``: a writable folder; ``{BAD}``: a path under a regular
#: file, which nobody (root included) can write into.
COMMANDS: dict[str, dict[str, list[list[str]]]] = {
    "check": {"input": [["check", "{IN}"]]},
    "fmt": {"input": [["fmt", "{IN}"]], "output": [["fmt", "{GOOD}", "-o", "{BAD}/x.hlo"]]},
    "stats": {"input": [["stats", "{IN}"], ["stats", "--json", "{IN}"]]},
    "demo": {"output": [["demo", "--report", "{BAD}/report.md"]]},
    "corpus list": {"input": [["corpus", "list", "{IN}"]]},
    "corpus generate": {"output": [["corpus", "generate", "--out", "{BAD}/corpus"]]},
    "compile": {"input": [["compile", "{IN}"]],
                "output": [["compile", "{GOOD}", "--dump-optimized", "{BAD}/o.hlo"],
                           ["compile", "{GOOD}", "--dump-dir", "{BAD}/dumps"]]},
    "run": {"input": [["run", "{IN}"]]},
    "compare": {"input": [["compare", "{IN}", "{GOOD}"], ["compare", "{GOOD}", "{IN}"]]},
    "bench": {"input": [["bench", "{IN}", "--no-record"]],
              "passes": [["bench", "{GOOD}", "--passes", "dce,nosuch", "--no-record"],
                         ["bench", "{GOOD}", "--passes", "nosuch", "--hook", "pre-scheduler", "--no-record"]]},
    "history": {"input": [["history", "--db", "{IN}"]]},
    "xla add": {},  # takes a version, not a file: its errors are in tests/test_regress.py
    "xla list": {},
    "regress": {"input": [["regress", "{IN}", "--versions", "current,current", "--backend", "cpu", "--no-measure",
                           "--no-record", "-q"]],
                "output": [["regress", "{GOOD}", "--versions", "current,current", "--backend", "cpu", "--no-record",
                            "-q", "-o", "{BAD}/r.md"],
                           ["regress", "{GOOD}", "--versions", "current,current", "--backend", "cpu", "--no-record",
                            "-q", "--html", "{BAD}/r.html"]]},
    "opt": {"input": [["opt", "{IN}"]], "passes": [["opt", "{GOOD}", "--passes", "dce,nosuch"]],
            "output": [["opt", "{GOOD}", "-o", "{BAD}/x.hlo"], ["opt", "{GOOD}", "--dump-dir", "{BAD}/dumps"],
                       ["opt", "{GOOD}", "--dump-dir", "{BAD}"]]},
    "analyze": {"input": [["analyze", "{IN}"], ["analyze", "--json", "{IN}"]]},
    "collectives": {"input": [["collectives", "{IN}"], ["collectives", "--json", "{IN}"]]},
    "profile": {"input": [["profile", "{IN}", "--reps", "1"], ["profile", "{GOOD}", "--trace", "{IN}"]]},
    "quantize": {"input": [["quantize", "{IN}", "-q"]], "output": [["quantize", "{GOOD}", "-q", "-o", "{BAD}/q.hlo"]]},
    "scan": {"input": [["scan", "{IN}", "-o", "{OUT}/scan", "-q", "-j", "1"]],
             "output": [["scan", "{GOOD}", "-o", "{BAD}/scan", "-q", "-j", "1"]]},
    "viz": {"input": [["viz", "{IN}", "-o", "{OUT}/g.dot"], ["viz", "{GOOD}", "--after", "{IN}", "-o", "{OUT}/p.html"]],
            "output": [["viz", "{GOOD}", "-o", "{BAD}/g.dot"], ["viz", "{GOOD}", "-o", "{BAD}/p.html"]]},
    "diff": {"input": [["diff", "{IN}", "{GOOD}"], ["diff", "{GOOD}", "{IN}"]]},
    "passes-dump": {"input": [["passes-dump", "{IN}"]]},
    "fusion-log": {"input": [["fusion-log", "{IN}"]]},
    "tune": {"input": [["tune", "{IN}", "-q", "-o", "{OUT}/t.json"]],
             "output": [["tune", "{GOOD}", "-q", "-o", "{BAD}/t.json"]]},
    "bisect": {"input": [["bisect", "{IN}", "--passes", "dce", "-q"], ["bisect", "{IN}", "--xla", "-q"]],
               "passes": [["bisect", "{GOOD}", "--passes", "dce,nosuch"]],
               "output": [["bisect", "{GOOD}", "--passes", "dce", "-q", "-o", "{BAD}/b"]]},
    "divergence": {"input": [["divergence", "{IN}", "{GOOD}", "-q"], ["divergence", "{GOOD}", "{IN}", "-q"]]},
    "reduce": {"input": [["reduce", "{IN}", "--until", "true", "-q"], ["reduce", "{IN}", "--until-abort", "-q"]],
               "passes": [["reduce", "{GOOD}", "--until-fires", "dce,nosuch", "-q"]],
               "output": [["reduce", "{GOOD}", "--until", "true", "-q", "-o", "{BAD}/r.hlo"]]},
    "findings": {"output": [["findings", "corpus", "-q", "-o", "{BAD}/f"]]},
    "upstream": {"input": [["upstream", "{IN}", "--passes", "dce", "-q", "-o", "{OUT}/u"]],
                 "passes": [["upstream", "{GOOD}", "--passes", "dce,nosuch", "-o", "{OUT}/u"]],
                 "output": [["upstream", "{GOOD}", "--passes", "dce", "-q", "-o", "{BAD}/u"]]},
}

#: (command, case) pairs that do not apply, and why: they are not cases of the
#: matrix (nor skipped tests), as a case a command has no argv for is not.
NOT_APPLICABLE = {
    ("corpus list", "folder"): "a folder is what corpus list reads (an empty one is a table of 0 modules)",
    ("history", "missing"): "a database that does not exist yet is 'no results yet', exit 0",
    ("fusion-log", "empty"): "an empty file is a valid, empty text-format FusionProcessDumpProto (0 steps)",
}


def _subcommands() -> set[str]:
    names: set[str] = set()

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    has_sub = any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
                    if has_sub:
                        walk(sub, f"{prefix}{name} ")
                    else:
                        names.add(prefix + name)

    walk(build_parser(), "")
    return names


def test_the_matrix_covers_every_subcommand():
    registered = _subcommands()
    missing = registered - set(COMMANDS)
    assert not missing, f"add {sorted(missing)} to COMMANDS (and NOT_APPLICABLE where a case does not apply)"
    gone = set(COMMANDS) - registered
    assert not gone, f"`hlo` no longer registers {sorted(gone)}"
    stale = [(cmd, case) for cmd, case in NOT_APPLICABLE if cmd not in COMMANDS or case not in INPUTS]
    assert not stale, f"NOT_APPLICABLE names no case of the matrix: {stale}"


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("matrix")
    (d / "good.hlo").write_text(GOOD)
    (d / "folder").mkdir()
    (d / "empty.hlo").write_bytes(b"")
    (d / "binary.hlo").write_bytes(bytes(range(256)) * 16)
    (d / "corrupt.hlo.gz").write_bytes(gzip.compress(GOOD.encode())[:40] + b"\xff" * 40)
    (d / "afile").write_text("a regular file: nothing can be created under it\n")
    (d / "out").mkdir()
    return {"missing": str(d / "missing.hlo"), "folder": str(d / "folder"), "empty": str(d / "empty.hlo"),
            "binary": str(d / "binary.hlo"), "corrupt-gzip": str(d / "corrupt.hlo.gz"), "GOOD": str(d / "good.hlo"),
            "OUT": str(d / "out"), "BAD": str(d / "afile")}


def _cases():
    """Every (command, case) that applies: the command has an argv for it (a module
    file, ``--passes``, an output) and ``NOT_APPLICABLE`` does not exclude it."""
    for cmd, kinds in COMMANDS.items():
        for case in (*INPUTS, "unknown-pass", "unwritable-output"):
            key = {"unknown-pass": "passes", "unwritable-output": "output"}.get(case, "input")
            argvs = kinds.get(key)
            if argvs is not None and (cmd, case) not in NOT_APPLICABLE:
                yield pytest.param(cmd, case, argvs, id=f"{cmd}-{case}")


def _fill(argv: list[str], paths: dict[str, str], case: str) -> list[str]:
    values = dict(paths, IN=paths.get(case, paths["GOOD"]))
    return [a.format(**values) for a in argv]


@pytest.mark.parametrize(("cmd", "case", "argvs"), list(_cases()))
def test_bad_input_gives_one_line(cmd, case, argvs, paths, capsys):
    for template in argvs:
        argv = _fill(template, paths, case)
        rc = main(argv)
        err = capsys.readouterr().err
        assert "Traceback" not in err, (argv, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, (argv, err)
        assert rc in (1, 2), (argv, rc, err)
        if case in ("missing", "folder", "empty", "binary", "corrupt-gzip") and cmd != "history":
            assert Path(paths[case]).name in lines[0], (argv, err)  # the message names the file


#: The same through the console script: nothing but one line reaches the terminal.
SUBPROCESS_CASES = [
    (["check", "{corrupt-gzip}"], 1, "corrupt gzip"),
    (["stats", "{binary}"], 1, "not UTF-8"),
    (["fmt", "{GOOD}", "-o", "{BAD}/x.hlo"], 1, "is not a folder"),
    (["opt", "{GOOD}", "--passes", "nosuch"], 2, "unknown pass 'nosuch'"),
    (["history", "--db", "{empty}"], 1, "not a results database"),
    (["compare", "{GOOD}", "{missing}"], 2, "cannot read file"),
]


@pytest.mark.parametrize(("argv", "code", "says"), SUBPROCESS_CASES, ids=[c[0][0] for c in SUBPROCESS_CASES])
def test_console_script_gives_one_line(argv, code, says, paths):
    filled = [a.format(**paths) for a in argv]
    r = subprocess.run([sys.executable, "-m", "hlo_lab.cli", *filled], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr
    assert r.returncode == code, r.stderr


def test_history_leaves_an_empty_file_alone(paths, capsys):
    assert main(["history", "--db", paths["empty"]]) == 1
    assert Path(paths["empty"]).read_bytes() == b""


HOSTILE = Path(__file__).resolve().parent / "data" / "hostile"


@pytest.mark.parametrize(("argv", "code", "says"), [
    (["viz", "{small}", "--after", "{small}", "--summary", "{tmp}/nope.json", "-o", "{tmp}/p.html"], 1, "No such file"),
    (["viz", "{small}", "--after", "{small}", "--summary", "{tmp}/obj.json", "-o", "{tmp}/p.html"], 1, "a JSON list of objects"),
    (["viz", "{small}", "--after", "{small}", "--summary", "{small}", "-o", "{tmp}/p.html"], 1, "not JSON"),
    (["compile", "{small}", "--xla-flag=--no_such_flag=1"], 2, "not an XLA debug option"),
    (["history", "--db", "{small}"], 1, "not an SQLite file"),
    (["corpus", "list", "{tmp}/nonexistent"], 1, "no such folder"),
    (["opt", "{small}", "--dump-dir", "{small}"], 1, "not a folder"),
    (["check", "{hostile}/corrupt.hlo.gz"], 1, "corrupt gzip data"),
    (["check", "{hostile}/truncgz.hlo.gz"], 1, "truncated gzip"),
], ids=["summary-missing", "summary-object", "summary-not-json", "xla-flag", "db-not-sqlite", "corpus-list-missing",
        "dump-dir-is-a-file", "corrupt-gz", "truncated-gz"])
def test_hostile_cli_reproducers(argv, code, says, tmp_path, capsys):
    """The CLI reproducers of tests/data/hostile/README.md: each one line, no traceback."""
    (tmp_path / "obj.json").write_text('{"a": 1}')
    values = {"small": str(HOSTILE / "small.hlo"), "hostile": str(HOSTILE), "tmp": str(tmp_path)}
    assert main([a.format(**values) for a in argv]) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and says in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["obj.json"]  # nothing written on failure


@pytest.mark.parametrize("argv, says", [
    (["bisect", "{small}", "--passes", "dce", "--hook", "bogus"], "invalid choice: 'bogus'"),
    (["bisect", "{small}", "--passes", "dce", "--seed", "-1"], "must be at least 0, not -1"),
    (["bisect", "{small}", "--passes", "dce", "--rtol", "nan"], "must be 0 or more, not nan"),
    (["divergence", "{small}", "{small}", "--seed", "-1"], "must be at least 0, not -1"),
    (["history", "--limit", "9223372036854775808"], "must be at most"),
    (["upstream", "{small}", "--passes", "dce", "-o", "{tmp}/u", "--reps", "0"], "must be at least 1, not 0"),
    (["upstream", "{small}", "--passes", "dce", "-o", "{tmp}/u", "--seconds", "nan"], "must be more than 0, not nan"),
    (["reduce", "{small}", "--until-abort", "--match", "("], "is not a regular expression"),
    (["regress", "{small}", "--versions", "current,current", "--target", "bogus"], "unknown GPU 'bogus'"),
    (["bench", "{small}", "--reps", "0"], "must be at least 1, not 0"),
], ids=["bisect-hook", "bisect-seed", "bisect-rtol-nan", "divergence-seed", "history-limit", "upstream-reps",
        "upstream-seconds-nan", "reduce-match", "regress-target", "bench-reps"])
def test_bad_option_values_are_usage_errors(argv, says, tmp_path, capsys):
    """Number, regex, stage and GPU options are checked by the shared argument
    types before anything runs: a usage error (exit 2) naming the rule, never a
    traceback nor a silently accepted value."""
    values = {"small": str(HOSTILE / "small.hlo"), "tmp": str(tmp_path)}
    with pytest.raises(SystemExit) as e:
        main([a.format(**values) for a in argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and says in err, err
    assert not list(tmp_path.iterdir())


def test_a_fifo_is_refused_not_waited_on(tmp_path, capsys):
    """A FIFO given as input, or inside a folder given to check: one located line
    each, at once (reading one would block forever)."""
    import os

    fifo = tmp_path / "pipe.hlo"
    os.mkfifo(fifo)
    (tmp_path / "ok.hlo").write_text((HOSTILE / "small.hlo").read_text())
    assert main(["check", str(fifo)]) == 1
    assert "not a regular file (a FIFO)" in capsys.readouterr().err
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "ok.hlo: ok" in out.out and "pipe.hlo:1:1: not a regular file (a FIFO)" in out.err
    assert main(["stats", str(fifo)]) == 1


def test_opt_verifies_before_any_pass_runs(tmp_path, capsys):
    """A module `hlo check` rejects never reaches a pass (a concatenate without
    dimensions= ended in a TypeError inside fusion legality)."""
    src = tmp_path / "concat.hlo"
    src.write_text("HloModule m\n\nENTRY main {\n  a = f32[4,8] parameter(0)\n  b = f32[4,8] parameter(1)\n"
                   "  n = f32[4,8] negate(a)\n  ROOT c = f32[4,16] concatenate(n, b)\n}\n")
    assert main(["opt", str(src), "--passes", "best", "-o", str(tmp_path / "o.hlo")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "needs attribute dimensions=" in err and ">>ROOT %c" in err
    assert not (tmp_path / "o.hlo").exists()


@pytest.mark.parametrize("name, stem", [("producer-consumer-fusion", "producer_consumer_fusion"),
                                        ("../../evil", "evil"), ("a/../../b", "a_b"), ("..", "unnamed"),
                                        ("x..y", "x_y"), ("/etc/passwd", "etc_passwd")])
def test_names_from_user_input_make_file_names_that_stay_in_their_folder(name, stem, tmp_path):
    """`hlo upstream -o DIR` names its test file after the pass: a user's pass
    named "../x" wrote outside DIR."""
    from hlo_tools.fileio import file_stem

    assert file_stem(name) == stem
    assert (tmp_path / f"{file_stem(name)}_test.hlo").resolve().parent == tmp_path.resolve()


def test_stats_verifies_first(tmp_path, capsys):
    src = tmp_path / "huge.hlo"
    src.write_text("HloModule huge\n\nENTRY main {\n  p = f32[9223372036854775807,9223372036854775807] parameter(0)\n"
                   "  ROOT n = f32[9223372036854775807,9223372036854775807] negate(p)\n}\n")
    assert main(["stats", str(src)]) == 1
    err = capsys.readouterr().err
    assert "more elements than int64 holds" in err and "Traceback" not in err


_INVALID = """HloModule concat_nodims

ENTRY main {
  a = f32[4,8] parameter(0)
  b = f32[4,8] parameter(1)
  n = f32[4,8] negate(a)
  ROOT c = f32[4,16] concatenate(n, b)
}
"""


@pytest.mark.parametrize("argv", [
    ["analyze", "{f}"], ["viz", "{f}", "-o", "{tmp}/v.svg"], ["diff", "{f}", "{f}"], ["collectives", "{f}"],
    ["compile", "{f}"], ["run", "{f}"], ["compare", "{f}", "{f}"], ["bench", "{f}", "--reps", "2", "--no-record"],
    ["divergence", "{f}", "{f}"], ["reduce", "{f}", "--until", "true", "--max-tests", "2"],
    ["upstream", "{f}", "--passes", "best", "-o", "{tmp}/u"], ["tune", "{f}", "--budget", "2", "--no-baseline"],
    ["bisect", "{f}", "--passes", "best"], ["opt", "{f}", "--passes", "best"], ["stats", "{f}"], ["check", "{f}"],
    ["profile", "{f}", "--reps", "1"], ["quantize", "{f}"],
], ids=lambda a: a[0])
def test_every_command_verifies_its_input_first(argv, tmp_path, capsys):
    """hostile2's concatenate_no_dimensions: XLA's parser rejects it; every command
    says what the verifier says, naming the file and the instruction, before any
    analysis, pass or compile (analyze raised a TypeError; XLA-backed commands gave
    XLA's parse error; viz drew it)."""
    f = tmp_path / "concat.hlo"
    f.write_text(_INVALID)
    code = main([a.format(f=f, tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code in (1, 2) and "Traceback" not in err
    assert "%c (concatenate): needs attribute dimensions=" in err and str(f) in err, err
    assert not (tmp_path / "v.svg").exists() and not (tmp_path / "u").exists()
