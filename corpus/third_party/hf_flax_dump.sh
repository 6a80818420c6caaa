#!/usr/bin/env bash
# Dumps of a Hugging Face Flax train step, as a new user makes them: transformers 4.x (the last
# line that ships Flax models) with flax, optax and jax from PyPI in its own virtualenv under a
# temporary folder (never the project's .venv), tiny random-initialized causal LMs built from a
# config only (no hub download, no weights, no dataset), synthetic int32 tokens, XLA:CPU.
# hf_flax_train_step.py, next to this script, jits init, a prefill step and a train step
# (cross-entropy under jax.checkpoint, jax.grad, optax.adamw, donated params and state).
#
#   corpus/third_party/hf_flax_dump.sh OUT_DIR [llama|gemma|mesh ...]
#
# OUT_DIR/<variant>/ gets the --xla_dump_to folder of each variant: llama (FlaxLlamaForCausalLM,
# f32), gemma (FlaxGemmaForCausalLM, bf16 activations, f32 weights), both text + proto +
# per-pass dumps, and mesh (the llama model on 8 host devices, a Mesh fsdp=4 x tensor=2, 2-D
# weights NamedSharding P('fsdp','tensor'), batch over fsdp, text only).
set -euo pipefail
OUT=$(realpath -m "${1:?usage: hf_flax_dump.sh OUT_DIR [variants]}"); shift
VARIANTS=("${@:-llama gemma mesh}"); VARIANTS=(${VARIANTS[@]})
STEP=$(realpath "$(dirname "$0")/hf_flax_train_step.py")
TRANSFORMERS=transformers==4.57.6
FLAX=flax==0.12.12
OPTAX=optax==0.2.8
JAX=0.12.0.1
PY=${PYTHON:-}
for c in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do  # a pyenv shim may exist and not run here
  [ -n "$PY" ] && break
  "$c" -c '' 2>/dev/null && PY=$c
done
[ -n "$PY" ] || { echo "needs Python 3.12 (set PYTHON=...)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hf_flax.XXXXXX")
echo "venv and run folder: $WORK"
"$PY" -m venv "$WORK/venv"
PIP="$WORK/venv/bin/pip --quiet --disable-pip-version-check"
$PIP install "$TRANSFORMERS" "$FLAX" "$OPTAX" "jax==$JAX" "jaxlib==$JAX"

DUMP="--xla_dump_hlo_as_text --xla_dump_hlo_as_proto --xla_dump_hlo_pass_re=.*"
cd "$WORK"
for v in "${VARIANTS[@]}"; do
  mkdir -p "$OUT/$v"
  case $v in
    llama|gemma) flags="$DUMP"; args=("$v") ;;
    mesh) flags="--xla_force_host_platform_device_count=8 --xla_dump_hlo_as_text"; args=(llama --mesh) ;;
    *) echo "unknown variant $v (llama, gemma, mesh)" >&2; exit 2 ;;
  esac
  echo "$v -> $OUT/$v"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 JAX_PLATFORMS=cpu XLA_FLAGS="--xla_dump_to=$OUT/$v $flags" \
    "$WORK/venv/bin/python" "$STEP" "${args[@]}" \
    > "$OUT/$v.log" 2>&1 || { echo "the $v step failed; the last lines of $OUT/$v.log:" >&2; tail -20 "$OUT/$v.log" >&2; exit 1; }
done
echo "done: $(find "$OUT" -name '*.txt' | wc -l) text files under $OUT"
