"""Outputs (``fileio.write_output`` behind every ``-o``): links, modes, devices,
FIFOs and unwritable folders.  Every write lands under tmp_path, except the
check that ``-o /dev/null`` leaves the device node alone."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_lab.cli import main
from hlo_tools.fileio import OutputError, check_writable, write_output
from tests.test_parser_errors import GOOD

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def src(tmp_path: Path) -> Path:
    p = tmp_path / "in.hlo"
    p.write_text(GOOD)
    return p


def _canonical(src: Path, capsys) -> str:
    assert main(["fmt", str(src)]) == 0
    return capsys.readouterr().out


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_symlink_is_written_through_and_stays_a_link(src, tmp_path, capsys):
    text = _canonical(src, capsys)
    target = tmp_path / "real.hlo"
    target.write_text("old")
    link = tmp_path / "link.hlo"
    link.symlink_to(target.name)  # a relative link, as `ln -s` makes
    assert main(["fmt", str(src), "-o", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == "real.hlo"
    assert target.read_text() == text
    # a dangling link: its target is created, the link stays
    dangling = tmp_path / "dangling.hlo"
    dangling.symlink_to(tmp_path / "new" / "made.hlo")
    assert main(["fmt", str(src), "-o", str(dangling)]) == 0
    assert dangling.is_symlink() and (tmp_path / "new" / "made.hlo").read_text() == text


def test_fifo_is_refused_with_one_line(src, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main(["fmt", str(src), "-o", str(fifo)]) == 1
    err = _one_line_error(capsys)
    assert str(fifo) in err and "FIFO" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_folder_as_output_is_refused(src, tmp_path, capsys):
    assert main(["fmt", str(src), "-o", str(tmp_path)]) == 1
    assert "it is a folder" in _one_line_error(capsys)


def test_private_file_keeps_its_mode(src, tmp_path, capsys):
    out = tmp_path / "secret.hlo"
    out.write_text("old")
    out.chmod(0o600)
    assert main(["fmt", str(src), "-o", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.read_text().startswith("HloModule m")


def test_hard_links_are_kept(src, tmp_path, capsys):
    text = _canonical(src, capsys)
    out = tmp_path / "out.hlo"
    out.write_text("old")
    other = tmp_path / "other.hlo"
    os.link(out, other)
    inode = out.stat().st_ino
    assert main(["fmt", str(src), "-o", str(out)]) == 0
    assert out.stat().st_ino == inode and out.stat().st_nlink == 2
    assert other.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.hlo", "other.hlo", "out.hlo"]  # no temp files left


def test_dev_null_stays_a_character_device(src, capsys):
    assert main(["fmt", str(src), "-o", os.devnull]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_parent_that_is_a_file_gives_one_line(src, tmp_path, capsys):
    """Unwritable for root too: the folder part of the path is a regular file."""
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for argv in (["fmt", str(src), "-o", str(blocker / "out.hlo")],
                 ["opt", str(src), "--passes", "dce", "-o", str(blocker / "out.hlo")],
                 ["opt", str(src), "--passes", "dce", "--dump-dir", str(blocker / "d")],
                 ["opt", str(src), "--passes", "dce", "--dump-dir", str(blocker)]):
        assert main(argv) == 1, argv
        assert str(blocker) in _one_line_error(capsys)
    assert blocker.read_text() == "x"


@pytest.fixture
def readonly_dir(tmp_path: Path):
    """A folder nobody may write into: mode 0500 as a normal user; as root
    (where permission bits do not stop writes) a read-only tmpfs mounted for the
    test, and a skip saying so where mounting is not allowed."""
    d = tmp_path / "ro"
    d.mkdir()
    if not IS_ROOT:
        d.chmod(0o500)
        yield d
        d.chmod(0o700)
        return
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"running as root, where mode 0500 does not stop writes, and a read-only tmpfs cannot be "
                    f"mounted here ({r.stderr.strip() or r.returncode})")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=False)


def test_unwritable_folder_gives_one_line(src, readonly_dir, capsys):
    out = readonly_dir / "x.hlo"
    for argv in (["fmt", str(src), "-o", str(out)],
                 ["opt", str(src), "--passes", "dce", "-o", str(out)],
                 ["opt", str(src), "--passes", "dce", "--dump-dir", str(readonly_dir / "dumps")],
                 ["viz", str(src), "-o", str(readonly_dir / "g.dot")]):
        assert main(argv) == 1, argv
        err = _one_line_error(capsys)
        assert str(readonly_dir) in err and "not writable" in err
    assert list(readonly_dir.iterdir()) == []
    with pytest.raises(OutputError, match="cannot write"):
        write_output(out, "x")  # the check is not the only guard: the write itself fails cleanly
    assert list(readonly_dir.iterdir()) == []


def test_dump_dir_gets_every_pass(src, tmp_path, capsys):
    d = tmp_path / "dumps" / "nested"
    assert main(["opt", str(src), "--passes", "dce,cse", "--dump-dir", str(d), "-o", str(tmp_path / "o.hlo")]) == 0
    assert sorted(p.name for p in d.iterdir()) == ["00.input.hlo", "01.dce.hlo", "02.cse.hlo"]


def test_check_writable_reports_before_work(tmp_path):
    assert check_writable(tmp_path / "new" / "deeper" / "x.txt") == tmp_path / "new" / "deeper" / "x.txt"
    assert not (tmp_path / "new").exists()  # a check creates nothing
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        check_writable(tmp_path / "f", directory=True)
    with pytest.raises(OutputError, match="is not a folder"):
        check_writable(tmp_path / "f" / "x.txt")


LIBRARY = ("hlo_lab", "hlo_tools", "xla_bridge", "hlo_analysis", "passes", "visualize", "corpus")
MOVES = ("os.replace(", "os.rename(", "shutil.move(")  # (Path.rename would catch IR renames too)


def _second_writers(sources: dict[str, str]) -> list[str]:
    """``path: call`` for each module but fileio that moves a file into place itself."""
    return [f"{rel}: {move}" for rel, text in sources.items() if rel != "hlo_tools/fileio.py" for move in MOVES if move in text]


def test_every_writer_goes_through_write_output():
    """One atomic writer: no library module but ``fileio`` replaces or renames a
    file, and the modules that write user-named outputs import write_output."""
    root = Path(__file__).resolve().parent.parent
    sources = {str(f.relative_to(root)): f.read_text() for pkg in LIBRARY for f in sorted((root / pkg).rglob("*.py"))
               if "modules" not in f.relative_to(root).parts}
    assert "os.replace(" in sources["hlo_tools/fileio.py"] and len(sources) > 50  # the walk found the tree
    assert _second_writers(sources) == []
    writers = ["hlo_lab/cli/__init__.py", "hlo_lab/cli/passes.py", "hlo_lab/cli/visualize.py", "hlo_lab/cli/xla.py", "hlo_lab/demo.py",
               "passes/manager.py", "visualize/render.py", "hlo_analysis/devices.py",
               "hlo_lab/scan.py", "xla_bridge/targets.py"]
    for rel in writers:
        assert "write_output" in sources[rel], rel


def test_a_second_atomic_writer_is_caught():
    bad = "import os\n\ndef save(p, data):\n    open(p + '.tmp', 'w').write(data)\n    os.replace(p + '.tmp', p)\n"
    assert _second_writers({"hlo_tools/fileio.py": "os.replace(tmp, target)", "passes/x.py": bad}) == ["passes/x.py: os.replace("]


def test_broken_pipe_is_quiet(tmp_path):
    """`hlo fmt BIG | head -c 100`: no BrokenPipeError traceback."""
    body = "\n".join(f"  a{i} = f32[8]{{0}} add(p, p)" for i in range(4000))
    big = tmp_path / "big.hlo"
    big.write_text(f"HloModule big\n\nENTRY e {{\n  p = f32[8]{{0}} parameter(0)\n{body}\n  ROOT r = f32[8]{{0}} add(p, p)\n}}\n")
    for cmd in (["fmt", str(big)],):
        proc = subprocess.Popen([sys.executable, "-m", "hlo_lab.cli", *cmd], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdout.read(10)
        proc.stdout.close()  # the reader goes away, as `head` does
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
        assert "Traceback" not in err and "BrokenPipe" not in err, err
