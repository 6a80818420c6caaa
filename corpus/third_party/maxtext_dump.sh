#!/usr/bin/env bash
# Dumps of a MaxText train step, as a new user makes them: MaxText from PyPI in its own
# virtualenv under a temporary folder (never the project's .venv), a tiny llama-style
# decoder (2 layers as a scanned while loop, full remat, bf16 activations, f32 weights,
# AdamW), synthetic data, XLA:CPU, text + proto + per-pass dumps.  docs/third_party.md
# says what the lab found on them.
#
#   corpus/third_party/maxtext_dump.sh OUT_DIR [threefry|rbg|mesh ...]
#
# OUT_DIR/<variant>/ gets the --xla_dump_to folder of each variant: threefry (jax's
# default PRNG), rbg (jax_default_prng_impl=rbg: rng-bit-generator with bitcast-converts
# across widths) and mesh (8 host devices, ici_fsdp=4 x ici_tensor=2, text only).
set -euo pipefail
OUT=$(realpath -m "${1:?usage: maxtext_dump.sh OUT_DIR [variants]}"); shift
VARIANTS=("${@:-threefry rbg mesh}"); VARIANTS=(${VARIANTS[@]})
MAXTEXT=maxtext==0.2.5
JAX=0.12.0.1
PY=${PYTHON:-}
for c in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do  # a pyenv shim may exist and not run here
  [ -n "$PY" ] && break
  "$c" -c '' 2>/dev/null && PY=$c
done
[ -n "$PY" ] || { echo "needs Python 3.12 (set PYTHON=...)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/maxtext.XXXXXX")
echo "venv and run folder: $WORK"
"$PY" -m venv "$WORK/venv"
PIP="$WORK/venv/bin/pip --quiet --disable-pip-version-check"
$PIP install "$MAXTEXT" "jax==$JAX" "jaxlib==$JAX"
# MaxText's own decoupled (no Google Cloud) requirement list, without the GPU/TPU wheels
SITE=$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
grep -v -i -E '^(nvidia|tensorflow|torch|libtpu|jax|jaxlib|triton|apache-tvm|cuda)' \
  "$SITE/dependencies/requirements/generated_requirements/decoupled-requirements.txt" > "$WORK/req.txt"
$PIP install -r "$WORK/req.txt" "jax==$JAX" "jaxlib==$JAX"

CFG="$SITE/maxtext/configs/decoupled_base_test.yml"
TINY=(dataset_type=synthetic hardware=cpu steps=2 per_device_batch_size=1 max_target_length=64
      base_emb_dim=64 base_num_query_heads=2 base_num_kv_heads=2 base_mlp_dim=128
      base_num_decoder_layers=2 head_dim=32 vocab_size=256 enable_checkpointing=false
      enable_tensorboard=false skip_jax_distributed_system=true base_output_directory="$WORK/out")
DUMP="--xla_dump_hlo_as_text --xla_dump_hlo_as_proto --xla_dump_hlo_pass_re=.*"
cd "$WORK"
for v in "${VARIANTS[@]}"; do
  mkdir -p "$OUT/$v"
  case $v in
    threefry) env=(); flags="$DUMP"; extra=() ;;
    rbg) env=(JAX_DEFAULT_PRNG_IMPL=rbg); flags="$DUMP"; extra=() ;;
    mesh) env=(); flags="--xla_force_host_platform_device_count=8 --xla_dump_hlo_as_text"
          extra=(ici_fsdp_parallelism=4 ici_tensor_parallelism=2) ;;
    *) echo "unknown variant $v (threefry, rbg, mesh)" >&2; exit 2 ;;
  esac
  echo "$v -> $OUT/$v"
  env "${env[@]}" DECOUPLE_GCLOUD=TRUE JAX_PLATFORMS=cpu XLA_FLAGS="--xla_dump_to=$OUT/$v $flags" \
    "$WORK/venv/bin/python" -m maxtext.trainers.pre_train.train "$CFG" run_name="$v" "${TINY[@]}" "${extra[@]}" \
    > "$OUT/$v.log" 2>&1 || { echo "MaxText failed; the last lines of $OUT/$v.log:" >&2; tail -20 "$OUT/$v.log" >&2; exit 1; }
done
echo "done: $(find "$OUT" -name '*.txt' | wc -l) text files under $OUT"
