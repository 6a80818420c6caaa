"""Named GPU targets (``h100``, ``h200``, ``a100``, ``b200``) as XLA
GpuTargetConfigProto texts, for compiling XLA:GPU without a GPU.

Texts are looked up in ``$HLO_GPU_SPECS``, then ``../shared/gpu_specs`` beside the
repository, then extracted from the CUDA plugin's ``xla_cuda_plugin.so`` (which
embeds XLA's own configs, each naming its ``device_description_str``) and cached
under ``~/.cache/hlo-pass-lab/gpu_specs``.
"""

from __future__ import annotations

import mmap
import os
import re
from functools import lru_cache
from pathlib import Path

from hlo_tools.errors import HloError
from hlo_tools.fileio import OutputError, write_output

from .jax_internals import cuda_plugin_library

#: name -> (file name in gpu_specs/, XLA's device_description_str)
GPU_TARGETS: dict[str, tuple[str, str]] = {
    "h100": ("h100_sxm.txtpb", "NVIDIA H100 80GB HBM3"),
    "h200": ("h200_sxm.txtpb", "NVIDIA H200 141GB HBM3e"),
    "a100": ("a100_sxm_80gb.txtpb", "NVIDIA A100-SXM4-80GB"),
    "b200": ("b200.txtpb", "NVIDIA B200"),
}

_HEADER = b"# proto-message: stream_executor.GpuTargetConfigProto"
_DESC_RE = re.compile(r'device_description_str:\s*"([^"]*)"')


class UnknownTargetError(HloError):
    """A GPU target name with no config text available."""


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hlo-pass-lab" / "gpu_specs"


def _spec_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("HLO_GPU_SPECS"):
        dirs.append(Path(os.environ["HLO_GPU_SPECS"]))
    repo = Path(__file__).resolve().parent.parent
    dirs += [repo.parent / "shared" / "gpu_specs", repo / "shared" / "gpu_specs", _cache_dir()]
    return dirs


@lru_cache(maxsize=1)
def plugin_target_configs() -> dict[str, str]:
    """``{device_description_str: proto text}`` embedded in the CUDA plugin ({} without it)."""
    lib = cuda_plugin_library()
    if lib is None:
        return {}
    out: dict[str, str] = {}
    with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        pos = mm.find(_HEADER)
        while pos != -1:
            end = mm.find(b"\0", pos)
            text = mm[pos:end].decode("utf-8", "replace")
            m = _DESC_RE.search(text)
            if m:
                out.setdefault(m.group(1), text)
            pos = mm.find(_HEADER, end)
    return out


def target_names() -> list[str]:
    return sorted(GPU_TARGETS)


@lru_cache(maxsize=16)
def target_config(name: str) -> str:
    """The GpuTargetConfigProto text of a named target (or of a path to one)."""
    if os.path.sep in name or name.endswith(".txtpb"):
        return Path(name).read_text()
    key = name.lower()
    if key not in GPU_TARGETS:
        raise UnknownTargetError(f"unknown GPU target {name!r}; known: {', '.join(target_names())} (or a .txtpb path)")
    fname, desc = GPU_TARGETS[key]
    for d in _spec_dirs():
        p = d / fname
        if p.is_file():
            return p.read_text()
    text = plugin_target_configs().get(desc)
    if text is None:
        raise UnknownTargetError(
            f"no target config for {name!r}: not in {', '.join(str(d) for d in _spec_dirs()[:-1])}, and the CUDA "
            "plugin (jax-cuda12-plugin) is missing or does not embed it")
    try:  # cache it: reading the 500 MB plugin takes a second
        write_output(_cache_dir() / fname, text)
    except OutputError:
        pass  # no cache: read from the plugin again next time
    return text


def device_description(config_text: str) -> str:
    m = _DESC_RE.search(config_text)
    return m.group(1) if m else "?"
