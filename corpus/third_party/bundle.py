"""Keeps a few small modules of third-party frameworks as a corpus root of their own
(``corpus/third_party``: ``manifest.json`` plus gzip'd stages under ``modules/``, the
format of the bundled corpus), so ``corpus.load(root=...)``, ``hlo regress
corpus/third_party`` and the tests read them like the rest.

    python corpus/third_party/bundle.py DUMPS_ROOT [--out corpus/third_party]

``DUMPS_ROOT`` holds the dump folders the framework scripts write
(``maxtext_dump.sh DUMPS_ROOT/mt threefry mesh``, ``hf_flax_dump.sh DUMPS_ROOT/hf
llama gemma mesh``); ``SOURCES`` below says which module of which folder becomes
which entry, with its framework and version. Absolute paths in the modules' file
tables become relative (``generate.strip_paths``), so no machine's paths are kept.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from corpus.generate import describe_stages, strip_paths  # noqa: E402

#: entry name -> (dump folder under DUMPS_ROOT, module name in it, record fields)
SOURCES: dict[str, tuple[str, str, dict]] = {
    "maxtext-llama-tiny-train-f32": ("mt/threefry", "jit_train_step", dict(
        model="llama2-style decoder (MaxText decoupled_base_test.yml, 2 layers, emb 64)", source_package="maxtext",
        source_package_version="0.2.5", framework="MaxText (flax.linen)", workload="train", sharded=False,
        dtype="float32", notes="2 scanned layers in a while loop, full remat, bf16 activations with f32 weights, "
                               "AdamW, synthetic data; corpus/third_party/maxtext_dump.sh threefry")),
    "maxtext-llama-tiny-train-fsdp4tp2": ("mt/mesh", "jit_train_step", dict(
        model="llama2-style decoder (MaxText decoupled_base_test.yml, 2 layers, emb 64)", source_package="maxtext",
        source_package_version="0.2.5", framework="MaxText (flax.linen)", workload="train", sharded=True,
        dtype="float32", mesh={"axes": ["fsdp", "tensor"], "shape": [4, 2]},
        notes="8 host devices, ici_fsdp=4 x ici_tensor=2 (Shardy; MaxText's mesh names 12 axes, the other 10 of "
              "size 1); corpus/third_party/maxtext_dump.sh mesh")),
    "hf-flax-llama-tiny-train-f32": ("hf/llama", "jit_train_step", dict(
        model="FlaxLlamaForCausalLM (LlamaConfig: 2 layers, hidden 64, 2 heads, 1 kv head, vocab 256)",
        source_package="transformers", source_package_version="4.57.6", framework="Hugging Face transformers (Flax)",
        workload="train", sharded=False, dtype="float32",
        notes="jax.checkpoint on the loss, optax.adamw, donated params; corpus/third_party/hf_flax_dump.sh llama")),
    "hf-flax-gemma-tiny-prefill-bf16": ("hf/gemma", "jit_prefill_step", dict(
        model="FlaxGemmaForCausalLM (GemmaConfig: 2 layers, hidden 64, head_dim 32, vocab 256)",
        source_package="transformers", source_package_version="4.57.6", framework="Hugging Face transformers (Flax)",
        workload="prefill", sharded=False, dtype="bfloat16",
        notes="bf16 activations, f32 weights; fills the KV cache; corpus/third_party/hf_flax_dump.sh gemma")),
    "hf-flax-llama-tiny-train-fsdp4tp2": ("hf/mesh", "jit_train_step", dict(
        model="FlaxLlamaForCausalLM (LlamaConfig: 2 layers, hidden 64, 2 heads, 1 kv head, vocab 256)",
        source_package="transformers", source_package_version="4.57.6", framework="Hugging Face transformers (Flax)",
        workload="train", sharded=True, dtype="float32", mesh={"axes": ["fsdp", "tensor"], "shape": [4, 2]},
        notes="8 host devices, NamedSharding P('fsdp','tensor') on 2-D weights (Shardy); "
              "corpus/third_party/hf_flax_dump.sh mesh")),
}
STAGES = ("before_optimizations", "cpu_after_optimizations")


def _gzip(text: str) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as f:
        f.write(text.encode())
    return buf.getvalue()


def _module_file(folder: Path, module: str, stage: str) -> Path:
    hits = sorted(folder.glob(f"module_*.{module}.{stage}.txt"))
    if not hits:
        raise SystemExit(f"{folder}: no module_*.{module}.{stage}.txt (run the framework's dump script first)")
    return hits[-1]  # the last one compiled: the step itself, not a warm-up of the same name


def bundle(dumps: Path, out: Path) -> dict:
    records = []
    for name, (folder, module, fields) in SOURCES.items():
        mdir = out / "modules" / name
        mdir.mkdir(parents=True, exist_ok=True)
        files = {}
        for stage in STAGES:
            src = _module_file(dumps / folder, module, stage)
            rel = f"modules/{name}/{stage}.hlo.txt.gz"
            (out / rel).write_bytes(_gzip(strip_paths(src.read_text())))
            files[stage] = rel
        rec = dict(name=name, size="tiny", config={}, runnable=not fields["sharded"], files=files,
                   jax_function=module, **fields)
        describe_stages(rec, out)
        records.append(rec)
        print(f"{name}: {', '.join(f'{s} {rec['instructions'][s]} instructions' for s in STAGES)}")
    manifest = {"format": 1, "generator": "corpus/third_party/bundle.py", "stages": list(STAGES),
                "modules": sorted(records, key=lambda r: r["name"])}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dumps", type=Path, help="the folder holding mt/ and hf/ (the dump scripts' output)")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    bundle(args.dumps, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
