"""Deterministic generator for the bundled corpus of real LLM modules.

Runs in its own environment (``.venv-corpus``, see ``requirements-generate.txt``):
keras-hub model code (``KERAS_BACKEND=jax``) is traced from abstract shapes only -
backbones are built inside ``keras.StatelessScope(initialize_variables=False)`` so no
weights are ever materialised - and lowered with jax to

* ``before_optimizations``: ``lowered.compiler_ir('hlo').as_hlo_text()`` (XLA:CPU lowering),
* ``cpu_after_optimizations``: XLA:CPU's optimized, scheduled HLO,
* ``gpu_h100_after_optimizations`` (and ``gpu_h200_...`` for some): XLA:GPU's optimized
  HLO compiled without a GPU through the CUDA PJRT plugin's compile-only topology.

Usage: ``python -m corpus.generate [--only PATTERN] [--out DIR] [--list]``.
Each module is written to ``<out>/modules/<name>/`` (gzip'd stages plus ``entry.json``)
and ``<out>/manifest.json`` is rebuilt from every ``entry.json`` present, so
``--only`` regenerates a subset and keeps the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import gzip
import hashlib
import io
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

from hlo_tools.formats import gunzip

CORPUS_DIR = Path(__file__).resolve().parent
REPO_ROOT = CORPUS_DIR.parent
GPU_SPECS = Path(os.environ.get("HLO_GPU_SPECS", str(REPO_ROOT.parent / "shared" / "gpu_specs")))
N_HOST_DEVICES = 8
MESH_SHAPE = (2, 4)  # (batch, model): data x tensor parallel
STAGES = (
    "before_optimizations",
    "cpu_after_optimizations",
    "gpu_h100_after_optimizations",
    "gpu_h200_after_optimizations",
)


def _setup_env() -> None:
    """Set the environment the generator needs; must run before jax is imported."""
    if "jax" in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if f"--xla_force_host_platform_device_count={N_HOST_DEVICES}" not in flags:
            raise RuntimeError("corpus.generate must be imported before jax (it sets XLA_FLAGS)")
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["JAX_PLATFORMS"] = "cpu"  # CUDA plugin is used compile-only
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={N_HOST_DEVICES}").strip()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# --------------------------------------------------------------------------- specs


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One architecture: keras-hub classes plus a tiny and a real ('full') config."""

    key: str
    backbone: str
    causal_lm: str
    tiny: dict[str, Any]
    full: dict[str, Any]
    full_name: str
    notes: str = ""
    full_train_layers: int | None = None  # reduce layers of the full train step if too big


_TINY_COMMON = dict(vocabulary_size=512, num_layers=2, num_query_heads=4, num_key_value_heads=2,
                    hidden_dim=64, intermediate_dim=128)

MODELS: dict[str, ModelSpec] = {
    "llama3": ModelSpec(
        key="llama3", backbone="Llama3Backbone", causal_lm="Llama3CausalLM",
        tiny=dict(_TINY_COMMON, rope_max_wavelength=500000),
        full=dict(vocabulary_size=128256, num_layers=32, num_query_heads=32, num_key_value_heads=8,
                  hidden_dim=4096, intermediate_dim=14336, rope_max_wavelength=500000,
                  layer_norm_epsilon=1e-5),
        full_name="Llama-3-8B",
    ),
    "mistral": ModelSpec(
        key="mistral", backbone="MistralBackbone", causal_lm="MistralCausalLM",
        tiny=dict(_TINY_COMMON, sliding_window=16),
        full=dict(vocabulary_size=32000, num_layers=32, num_query_heads=32, num_key_value_heads=8,
                  hidden_dim=4096, intermediate_dim=14336, sliding_window=4096,
                  layer_norm_epsilon=1e-5),
        full_name="Mistral-7B-v0.1",
    ),
    "gemma2": ModelSpec(
        key="gemma2", backbone="GemmaBackbone", causal_lm="GemmaCausalLM",
        # 8 query / 4 kv heads (the 2B's ratio) so keras-hub's layout map splits kv heads 4-way.
        tiny=dict(_TINY_COMMON, num_query_heads=8, num_key_value_heads=4, head_dim=8,
                  query_head_dim_normalize=True, use_post_ffw_norm=True,
                  use_post_attention_norm=True, attention_logit_soft_cap=50.0,
                  final_logit_soft_cap=30.0, use_sliding_window_attention=True,
                  sliding_window_size=16),
        # keras-hub's Gemma intermediate_dim is twice the per-branch width (9216 for 2B).
        full=dict(vocabulary_size=256000, num_layers=26, num_query_heads=8, num_key_value_heads=4,
                  hidden_dim=2304, intermediate_dim=18432, head_dim=256,
                  query_head_dim_normalize=True, use_post_ffw_norm=True,
                  use_post_attention_norm=True, attention_logit_soft_cap=50.0,
                  final_logit_soft_cap=30.0, use_sliding_window_attention=True,
                  sliding_window_size=4096),
        full_name="Gemma-2-2B",
    ),
    "mixtral": ModelSpec(
        key="mixtral", backbone="MixtralBackbone", causal_lm="MixtralCausalLM",
        tiny=dict(_TINY_COMMON, num_experts=4, top_k=2, sliding_window=4096),
        full=dict(vocabulary_size=32000, num_layers=32, num_query_heads=32, num_key_value_heads=8,
                  hidden_dim=4096, intermediate_dim=14336, num_experts=8, top_k=2,
                  rope_max_wavelength=1000000, sliding_window=4096, layer_norm_epsilon=1e-5),
        full_name="Mixtral-8x7B",
        notes="keras-hub's Mixtral MoE computes every expert densely (no token dispatch); "
              "the router's top-k only weights the expert outputs.",
    ),
    "qwen3_moe": ModelSpec(
        key="qwen3_moe", backbone="Qwen3MoeBackbone", causal_lm="Qwen3MoeCausalLM",
        tiny=dict(_TINY_COMMON, moe_intermediate_dim=32, num_experts=8, top_k=2, head_dim=16,
                  norm_top_k_prob=True, rope_max_wavelength=1000000),
        full=dict(vocabulary_size=151936, num_layers=48, num_query_heads=32, num_key_value_heads=4,
                  hidden_dim=2048, intermediate_dim=6144, moe_intermediate_dim=768,
                  num_experts=128, top_k=8, head_dim=128, norm_top_k_prob=True,
                  rope_max_wavelength=1000000, layer_norm_epsilon=1e-6),
        full_name="Qwen3-30B-A3B",
        notes="keras-hub's Qwen3-MoE computes every expert densely (einsum over all experts, "
              "no token dispatch); the router's top-k only weights the expert outputs.",
    ),
}


@dataclasses.dataclass(frozen=True)
class Shapes:
    """Workload shapes for one size."""

    train_batch: int
    train_seq: int
    prefill_batch: int
    prefill_prompt: int
    decode_batch: int
    max_len: int


SHAPES = {
    "tiny": Shapes(train_batch=2, train_seq=32, prefill_batch=2, prefill_prompt=16,
                   decode_batch=2, max_len=32),
    "full": Shapes(train_batch=1, train_seq=2048, prefill_batch=1, prefill_prompt=1024,
                   decode_batch=8, max_len=2048),
}
SIZE_DTYPE = {"tiny": "float32", "full": "bfloat16"}
DTYPE_SHORT = {"float32": "f32", "bfloat16": "bf16"}


@dataclasses.dataclass(frozen=True)
class Job:
    """One module to generate."""

    model: str
    workload: str  # train | prefill | decode
    size: str  # tiny | full
    sharded: bool = False
    h200: bool = False

    @property
    def name(self) -> str:
        dt = DTYPE_SHORT[SIZE_DTYPE[self.size]]
        base = f"{self.model}-{self.size}-{self.workload}-{dt}"
        return base + (f"-dp{MESH_SHAPE[0]}tp{MESH_SHAPE[1]}" if self.sharded else "")


def all_jobs() -> list[Job]:
    """Every module of the bundled corpus, in a fixed order."""
    jobs = []
    for model in MODELS:
        for size in ("tiny", "full"):
            for workload in ("train", "prefill", "decode"):
                jobs.append(Job(model, workload, size, h200=(model == "llama3")))
    for model in ("llama3", "gemma2", "qwen3_moe"):
        jobs.append(Job(model, "train", "tiny", sharded=True))
    return jobs


# --------------------------------------------------------------------------- text utils

_PATH_RE = re.compile(r'"(/[^"\n]*)"')


def strip_paths(text: str) -> str:
    """Make absolute source paths in metadata/file tables relative so text is byte-stable."""

    def repl(m: re.Match[str]) -> str:
        p = m.group(1)
        if "site-packages/" in p:
            p = p.split("site-packages/", 1)[1]
        elif p.startswith(str(REPO_ROOT) + "/"):
            p = p[len(str(REPO_ROOT)) + 1:]
        elif re.search(r"/lib/python3\.\d+/", p):
            p = re.split(r"/lib/(?=python3\.\d+/)", p, maxsplit=1)[1]
        else:
            return m.group(0)
        return f'"{p}"'

    return _mask_generator_lines(_PATH_RE.sub(repl, text))


def _mask_generator_lines(text: str) -> str:
    """Zero the line/column numbers of stack frames in this generator's own files.

    They only say where in ``corpus/`` a call was made; masking them keeps the stored
    optimized text unchanged when the generator is edited.
    """
    m = re.search(r"^FileNames\n((?:\d+ \"[^\"\n]*\"\n)+)", text, re.M)
    if not m:
        return text
    ids = [ln.split(" ", 1)[0] for ln in m.group(1).splitlines() if ln.split(" ", 1)[1].startswith('"corpus/')]
    if not ids:
        return text
    loc = re.compile(r"^(\d+ \{file_name_id=(?:" + "|".join(ids) + r") function_name_id=\d+) line=\d+ "
                     r"end_line=\d+ column=\d+ end_column=\d+\}", re.M)
    return loc.sub(r"\1 line=0 end_line=0 column=0 end_column=0}", text)


_INSTR_RE = re.compile(r"^\s+(?:ROOT\s+)?%?[\w.\-]+\s*=\s*\S", re.M)
_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def instruction_count(text: str) -> int:
    """Number of instruction lines in HLO text (all computations)."""
    return len(_INSTR_RE.findall(text))


def collective_counts(text: str) -> dict[str, int]:
    """Counts of collective ops (sync and async start forms) by opcode."""
    out: dict[str, int] = {}
    for op in _COLLECTIVES:
        for form in (op, op + "-start"):
            n = len(re.findall(r"\s" + re.escape(form) + r"\(", text))
            if n:
                out[form] = n
    return out


def fusion_kinds(text: str) -> dict[str, Any]:
    """Fusion kinds and library calls in XLA:GPU optimized HLO, by regex over the text."""
    kinds: dict[str, int] = {}
    for k in re.findall(r"\sfusion\([^\n]*?kind=(k\w+)", text):
        kinds[k] = kinds.get(k, 0) + 1
    backend: dict[str, int] = {}
    for line in text.splitlines():
        if " fusion(" not in line:
            continue
        m = re.search(r'"fusion_backend_config":\{"kind":"([^"]+)"', line) or re.search(
            r'"kind":"([^"]+)"', line)
        if m:
            backend[m.group(1)] = backend.get(m.group(1), 0) + 1
    targets: dict[str, int] = {}
    for t in re.findall(r'custom_call_target="([^"]+)"', text):
        targets[t] = targets.get(t, 0) + 1
    return {
        "fusion_kinds": dict(sorted(kinds.items())),
        "fusion_backend_kinds": dict(sorted(backend.items())),
        "triton_fusions": sum(v for k, v in backend.items() if "triton" in k),
        "cublas_custom_calls": sum(v for k, v in targets.items() if "cublas" in k),
        "custom_call_targets": dict(sorted(targets.items())),
    }


def write_gz(path: Path, text: str) -> bytes:
    """Write text gzip-compressed with a fixed header (mtime 0, no name); return the bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as f:
        f.write(text.encode())
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


# --------------------------------------------------------------------------- generation


class Generator:
    """Holds jax/keras state (imported lazily) and the GPU topologies."""

    def __init__(self) -> None:
        _setup_env()
        import jax
        import keras
        import keras_hub
        import optax

        self.jax, self.keras, self.keras_hub, self.optax = jax, keras, keras_hub, optax
        self._topos: dict[tuple[str, str], Any] = {}

    def topology(self, gpu: str, topology: str) -> Any:
        """Compile-only XLA:GPU topology for a target config file in gpu_specs."""
        key = (gpu, topology)
        if key not in self._topos:
            from jax.experimental import topologies

            cfg = (GPU_SPECS / f"{gpu}.txtpb").read_text()
            self._topos[key] = topologies.get_topology_desc(
                "", platform="cuda", target_config=cfg, topology=topology)
        return self._topos[key]

    def build(self, job: Job) -> tuple[Any, dict[str, Any]]:
        """Build the keras-hub CausalLM with shape-only variables."""
        spec = MODELS[job.model]
        cfg = dict(spec.tiny if job.size == "tiny" else spec.full)
        if job.size == "full" and job.workload == "train" and spec.full_train_layers:
            cfg["num_layers"] = spec.full_train_layers
        cfg["dtype"] = SIZE_DTYPE[job.size]
        keras = self.keras
        # Reset keras' per-process layer-name counters: op names in the optimized HLO's
        # metadata (e.g. ".../llama_rotary_embedding/cos") must not depend on what was built before.
        keras.utils.clear_session()
        with keras.StatelessScope(initialize_variables=False):
            backbone = getattr(self.keras_hub.models, spec.backbone)(**cfg)
        lm = getattr(self.keras_hub.models, spec.causal_lm)(backbone=backbone, preprocessor=None)
        return lm, cfg

    def workload_fn(self, lm: Any, job: Job) -> tuple[Callable[..., Any], list[Any], tuple[int, ...], dict[str, Any]]:
        """The jitted function, its abstract args (no shardings), donated argnums, shapes."""
        jax, keras, optax = self.jax, self.keras, self.optax
        jnp = jax.numpy
        tv, ntv = list(lm.trainable_variables), list(lm.non_trainable_variables)
        params = [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in tv]
        nt = [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in ntv]
        sh = SHAPES[job.size]

        def scope(p: list[Any], n: list[Any]) -> Any:
            return keras.StatelessScope(state_mapping=list(zip(tv, p)) + list(zip(ntv, n)))

        info: dict[str, Any] = {
            "num_param_arrays": len(params),
            "num_params": int(sum(int(__import__("math").prod(p.shape)) for p in params)),
        }
        if job.workload == "train":
            opt = optax.adamw(learning_rate=1e-4, b1=0.9, b2=0.95, weight_decay=0.1)
            tokens = jax.ShapeDtypeStruct((sh.train_batch, sh.train_seq), jnp.int32)
            opt_state = jax.eval_shape(opt.init, params)

            def train_step(params, nt, opt_state, tokens):
                def loss_fn(p):
                    with scope(p, nt):
                        logits = lm({"token_ids": tokens, "padding_mask": jnp.ones_like(tokens)},
                                    training=True)
                    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
                    tgt = tokens[:, 1:]
                    return -jnp.mean(jnp.take_along_axis(logp, tgt[..., None], axis=-1))

                loss, grads = jax.value_and_grad(loss_fn)(params)
                updates, opt_state = opt.update(grads, opt_state, params)
                return optax.apply_updates(params, updates), opt_state, loss

            info.update(tokens=list(tokens.shape), optimizer="optax.adamw(lr=1e-4, b1=0.9, b2=0.95, wd=0.1)")
            self._opt = opt
            return train_step, [params, nt, opt_state, tokens], (0, 2), info

        def cache_shape(batch: int) -> Any:
            def f(p, n, t):
                with scope(p, n):
                    return lm._build_cache(t)[1]

            return jax.eval_shape(f, params, nt, jax.ShapeDtypeStruct((batch, sh.max_len), jnp.int32))

        if job.workload == "prefill":
            tokens = jax.ShapeDtypeStruct((sh.prefill_batch, sh.prefill_prompt), jnp.int32)
            cs = cache_shape(sh.prefill_batch)

            def prefill(params, nt, tokens):
                with scope(params, nt):
                    cache = jnp.zeros(cs.shape, cs.dtype)
                    logits, _, cache = lm.call_with_cache(tokens, cache, 0)
                return logits[:, -1, :], cache

            info.update(tokens=list(tokens.shape), kv_cache=[str(cs.dtype), list(cs.shape)])
            return prefill, [params, nt, tokens], (), info

        tokens = jax.ShapeDtypeStruct((sh.decode_batch, 1), jnp.int32)
        cs = cache_shape(sh.decode_batch)
        index = jax.ShapeDtypeStruct((), jnp.int32)

        def decode(params, nt, token, cache, index):
            with scope(params, nt):
                logits, _, cache = lm.call_with_cache(token, cache, index)
            return logits[:, 0, :], cache

        info.update(tokens=list(tokens.shape), kv_cache=[str(cs.dtype), list(cs.shape)],
                    cache_update_index="int32 scalar (runtime argument)")
        return decode, [params, nt, tokens, cs, index], (3,), info

    def shardings(self, lm: Any, job: Job, args: list[Any], mesh: Any) -> list[Any]:
        """Per-argument shardings: keras-hub's layout map for weights, batch axis for data."""
        jax, keras = self.jax, self.keras
        from jax.sharding import NamedSharding, PartitionSpec as P

        spec = MODELS[job.model]
        kmesh = keras.distribution.DeviceMesh(shape=MESH_SHAPE, axis_names=("batch", "model"),
                                              devices=list(mesh.devices.flat))
        layout = getattr(self.keras_hub.models, spec.backbone).get_layout_map(kmesh)
        repl = NamedSharding(mesh, P())

        def for_var(v: Any) -> Any:
            lay = layout[v.path]
            if lay is None:
                return repl
            return NamedSharding(mesh, P(*lay.axes))

        pshard = [for_var(v) for v in lm.trainable_variables]
        ntshard = [for_var(v) for v in lm.non_trainable_variables]
        params, nt, opt_state, tokens = args
        opt_shard = self.optax.tree_utils.tree_map_params(
            self._opt, lambda _, s: s, opt_state, pshard,
            transform_non_params=lambda _: repl,
            is_leaf=lambda x: isinstance(x, NamedSharding))
        tok_shard = NamedSharding(mesh, P("batch", None))
        return [pshard, ntshard, opt_shard, tok_shard]

    def with_shardings(self, args: list[Any], shards: list[Any] | None, device: Any) -> list[Any]:
        """Attach shardings (a tree matching args, or one device) to abstract args."""
        jax = self.jax
        from jax.sharding import SingleDeviceSharding

        if shards is None:
            s = SingleDeviceSharding(device)
            return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), args)
        return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                            args, shards)

    def random_inputs(self, args: list[Any], vocab: int, job: Job) -> list[Any]:
        """Deterministic random inputs: floats uniform in [0, 0.02) (non-negative so AdamW's
        second moment is valid), tokens in [0, vocab), integer scalars = prompt length."""
        import numpy as np

        rng = np.random.default_rng(0)
        jnp = self.jax.numpy
        sh = SHAPES[job.size]

        def make(a: Any) -> Any:
            if a.shape == () and jnp.issubdtype(a.dtype, jnp.integer):
                return np.asarray(sh.prefill_prompt, a.dtype)
            if jnp.issubdtype(a.dtype, jnp.integer):
                return rng.integers(0, vocab, size=a.shape).astype(a.dtype)
            return rng.uniform(0.0, 0.02, size=a.shape).astype(a.dtype)

        return self.jax.tree.map(make, args)

    def run(self, job: Job, out: Path) -> dict[str, Any]:
        """Generate one module: lower, compile for CPU and GPU(s), run if tiny; write files."""
        jax = self.jax
        import numpy as np
        from jax.sharding import Mesh

        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        lm, cfg = self.build(job)
        fn, args, donate, info = self.workload_fn(lm, job)
        cpu_devs = jax.devices("cpu")
        if job.sharded:
            mesh = Mesh(np.array(cpu_devs[:N_HOST_DEVICES]).reshape(MESH_SHAPE), ("batch", "model"))
            cpu_args = self.with_shardings(args, self.shardings(lm, job, args, mesh), None)
        else:
            cpu_args = args
        jitted = jax.jit(fn, donate_argnums=donate)
        lowered = jitted.lower(*cpu_args)
        texts: dict[str, str] = {"before_optimizations": strip_paths(lowered.compiler_ir("hlo").as_hlo_text())}
        timings["lower_s"] = time.perf_counter() - t0
        t = time.perf_counter()
        compiled = lowered.compile()
        texts["cpu_after_optimizations"] = strip_paths(compiled.as_text())
        timings["cpu_compile_s"] = time.perf_counter() - t

        runnable = False
        run_note = "real-shape module: compiled only, never run"
        if job.size == "tiny":
            inputs = self.random_inputs(args, cfg["vocabulary_size"], job)
            if job.sharded:
                inputs = jax.tree.map(lambda x, a: jax.device_put(x, a.sharding), inputs, cpu_args)
            t = time.perf_counter()
            outs = compiled(*inputs)
            jax.block_until_ready(outs)
            timings["cpu_run_s"] = time.perf_counter() - t
            finite = all(bool(np.isfinite(np.asarray(o, np.float32)).all())
                         for o in jax.tree.leaves(outs) if jnp_is_float(o))
            runnable = finite
            run_note = ("ran on XLA:CPU with random inputs, outputs finite" if finite
                        else "ran on XLA:CPU but produced non-finite outputs")
            if job.sharded:
                run_note += f" ({N_HOST_DEVICES} host devices)"
        del compiled

        gpus = ["h100_sxm"] + (["h200_sxm"] if job.h200 else [])
        for gpu in gpus:
            t = time.perf_counter()
            topo = self.topology(gpu, "1x1x8" if job.sharded else "1x1x1")
            if job.sharded:
                gmesh = Mesh(np.array(topo.devices[:N_HOST_DEVICES]).reshape(MESH_SHAPE), ("batch", "model"))
                gargs = self.with_shardings(args, self.shardings(lm, job, args, gmesh), None)
            else:
                gargs = self.with_shardings(args, None, topo.devices[0])
            gtext = jax.jit(fn, donate_argnums=donate).lower(*gargs).compile().as_text()
            stage = f"gpu_{gpu.split('_')[0]}_after_optimizations"
            texts[stage] = strip_paths(gtext)
            timings[f"{stage}_compile_s"] = time.perf_counter() - t

        spec = MODELS[job.model]
        entry: dict[str, Any] = {
            "name": job.name,
            "model": spec.full_name if job.size == "full" else f"{spec.full_name} architecture, tiny config",
            "architecture": job.model,
            "source_package": "keras-hub",
            "source_package_version": _version("keras-hub"),
            "source_classes": [f"keras_hub.models.{spec.backbone}", f"keras_hub.models.{spec.causal_lm}"],
            "config": cfg,
            "workload": job.workload,
            "size": job.size,
            "sharded": job.sharded,
            "mesh": {"shape": list(MESH_SHAPE), "axes": ["batch", "model"],
                     "weights": "keras-hub get_layout_map", "devices": N_HOST_DEVICES} if job.sharded else None,
            "dtype": SIZE_DTYPE[job.size],
            "shapes": info,
            "jax_function": fn.__name__,
            "donate_argnums": list(donate),
            "jax": jax.__version__,
            "jaxlib": _version("jaxlib"),
            "runnable": runnable,
            "run_note": run_note,
            "notes": spec.notes,
            "files": {},
            "sha256": {},
            "text_sha256": {},
            "text_bytes": {},
            "gz_bytes": {},
            "instructions": {},
            "collectives": {},
        }
        if job.size == "full" and cfg["num_layers"] != spec.full["num_layers"]:
            entry["notes"] = (entry["notes"] + " " if entry["notes"] else "") + (
                f"Reduced to {cfg['num_layers']} of {spec.full['num_layers']} layers (real widths) "
                "to fit compile time on the generating machine.")
        mdir = out / "modules" / job.name
        for stage in STAGES:
            if stage in texts:
                rel = f"modules/{job.name}/{stage}.hlo.txt.gz"
                write_gz(out / rel, texts[stage])
                entry["files"][stage] = rel
        describe_stages(entry, out)
        (mdir / "entry.json").write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
        timings["total_s"] = time.perf_counter() - t0
        return {"name": job.name, **{k: round(v, 2) for k, v in timings.items()}}


def xla_parse_check(text: str) -> bool | str:
    """True if XLA's own text parser accepts the text, else the error's first line."""
    from jax._src.lib import xla_client as xc

    try:
        xc.hlo.hlo_module_from_text(text)
        return True
    except Exception as e:  # noqa: BLE001 - record XLA's message
        msg = str(e).splitlines()
        return next((ln.strip() for ln in msg if "error:" in ln), msg[0] if msg else repr(e))


def describe_stages(entry: dict[str, Any], out: Path) -> None:
    """Fill the per-stage metadata of an entry from its stored files (all measured on the text)."""
    for key in ("sha256", "text_sha256", "text_bytes", "gz_bytes", "instructions", "collectives",
                "xla_parses"):
        entry[key] = {}
    entry.pop("gpu_fusions", None)
    for stage, rel in entry["files"].items():
        data = (out / rel).read_bytes()
        text = gunzip(data, str(out / rel)).decode()  # the one bounded decompressor
        entry["sha256"][stage] = hashlib.sha256(data).hexdigest()
        entry["text_sha256"][stage] = hashlib.sha256(text.encode()).hexdigest()
        entry["text_bytes"][stage] = len(text.encode())
        entry["gz_bytes"][stage] = len(data)
        entry["instructions"][stage] = instruction_count(text)
        entry["collectives"][stage] = collective_counts(text)
        entry["xla_parses"][stage] = xla_parse_check(text)
        if stage.startswith("gpu_"):
            entry.setdefault("gpu_fusions", {})[stage] = fusion_kinds(text)
    bad = sorted(s for s, ok in entry["xla_parses"].items() if ok is not True)
    if bad:
        entry["xla_parse_note"] = (
            f"XLA's own parser (jaxlib {_version('jaxlib')}) rejects {', '.join(bad)} as printed by XLA: "
            "async collective '-start' ops carry output_to_operand_aliasing, which the parser does not "
            "allow on them; the text is stored unmodified (dropping that attribute makes it parse).")
    else:
        entry.pop("xla_parse_note", None)


def refresh_entries(out: Path) -> None:
    """Recompute every entry.json's per-stage metadata from the stored files."""
    for p in sorted((out / "modules").glob("*/entry.json")):
        entry = json.loads(p.read_text())
        describe_stages(entry, out)
        p.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")


def jnp_is_float(x: Any) -> bool:
    """True for floating-point arrays."""
    import numpy as np

    return np.issubdtype(np.dtype(x.dtype), np.floating) or str(x.dtype) == "bfloat16"


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg)


GENERATOR_PACKAGES = ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "keras", "keras-hub",
                      "optax", "numpy", "ml_dtypes")


def write_manifest(out: Path) -> dict[str, Any]:
    """Rebuild ``manifest.json`` from every ``modules/*/entry.json`` under out."""
    entries = [json.loads(p.read_text()) for p in sorted((out / "modules").glob("*/entry.json"))]
    entries.sort(key=lambda e: e["name"])
    versions = {}
    for p in GENERATOR_PACKAGES:
        try:
            versions[p] = _version(p)
        except Exception:  # noqa: BLE001 - package absent in this env
            versions[p] = None
    manifest = {
        "format": 1,
        "generator": "corpus/generate.py",
        "jax": versions["jax"],
        "jaxlib": versions["jaxlib"],
        "packages": versions,
        "gpu_targets": {"gpu_h100_after_optimizations": "gpu_specs/h100_sxm.txtpb (NVIDIA H100 80GB HBM3)",
                        "gpu_h200_after_optimizations": "gpu_specs/h200_sxm.txtpb"},
        "stages": list(STAGES),
        "modules": entries,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    """CLI: generate the corpus (or a subset) deterministically."""
    ap = argparse.ArgumentParser(prog="python -m corpus.generate", description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="fnmatch pattern(s) over module names, comma-separated, "
                    "e.g. 'llama3-tiny-*,gemma2-*'")
    ap.add_argument("--out", default=str(CORPUS_DIR), help="corpus root to write (default: corpus/)")
    ap.add_argument("--list", action="store_true", help="list module names and exit")
    ap.add_argument("--timings", help="append per-module timings (JSON lines) to this file")
    ap.add_argument("--manifest-only", action="store_true",
                    help="only rebuild manifest.json from the entry.json files under --out")
    ap.add_argument("--refresh", action="store_true",
                    help="recompute per-stage metadata (hashes, counts, parse checks) from the stored "
                         "files, then rebuild manifest.json")
    ns = ap.parse_args(argv)
    pats = [p for p in (ns.only or "").split(",") if p]
    jobs = [j for j in all_jobs() if not pats or any(fnmatch.fnmatch(j.name, p) for p in pats)]
    out = Path(ns.out)
    if ns.manifest_only or ns.refresh:
        if ns.refresh:
            refresh_entries(out)
        write_manifest(out)
        return 0
    if ns.list:
        print("\n".join(j.name for j in jobs))
        return 0
    if not jobs:
        print(f"no module matches {ns.only!r}", file=sys.stderr)
        return 2
    gen = Generator()
    for job in jobs:
        rec = gen.run(job, out)
        print(json.dumps(rec), flush=True)
        if ns.timings:
            with open(ns.timings, "a") as f:
                f.write(json.dumps(rec) + "\n")
    write_manifest(out)
    return 0


if __name__ == "__main__":
    _setup_env()
    sys.exit(main())
