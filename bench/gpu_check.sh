#!/usr/bin/env bash
# The GPU checks, for a machine with a GPU (at most 7.5 minutes: each step has a
# timeout; installs
# nothing), each printing a short table:
#   1. the GPU and jax, and the GPU tests;
#   2. stock XLA:GPU vs gpu-best in each mode (replace, on-top, as-written), timed
#      on the tiny modules, outputs compared;
#   3. the same on full-size Gemma-2 2B decode and prefill (random weights, bf16),
#      on top of XLA's fusions;
#   4. each kernel's device time against our GPU roofline and XLA's own model.
# Without a GPU it says "no GPU" and exits 0.  REHEARSE=1 runs every step here
# without one (XLA:CPU for the timed steps, tiny modules only, the models
# deviceless), so that the script cannot fail on a typo when a GPU is lent.
set -u -o pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
REHEARSE="${REHEARSE:-0}"
REPS="${REPS:-20}"

if [ "$REHEARSE" = 1 ]; then
  export JAX_PLATFORMS=cpu
  BACKEND=cpu; FULL_ONLY="llama3-tiny-decode-f32"; FULL_FLAGS=""; MODELS_FLAGS="--rehearse"
  echo "REHEARSAL without a GPU: XLA:CPU for the timed steps, models compiled deviceless"
else
  if ! "$PY" - <<'PYEOF' 2>/dev/null
import sys
from xla_bridge.jax_internals import backend_available
sys.exit(0 if backend_available("gpu") else 1)
PYEOF
  then
    echo "no GPU"
    exit 0
  fi
  BACKEND=gpu; FULL_ONLY="gemma2-full-*-bf16"; FULL_FLAGS="--measure-full --input-sets 1"; MODELS_FLAGS=""
  "$PY" - <<'PYEOF'
from xla_bridge.jax_internals import get_client, hook_supported, jax_versions
dev = get_client("gpu").local_devices()[0]
v = jax_versions()
print(f"GPU: {dev.device_kind}; jax {v['jax']} jaxlib {v['jaxlib']}; pipeline hook: {'yes' if hook_supported() else 'no'}")
PYEOF
fi

status=0
echo "== 1. GPU tests"
if "$PY" -c "import pytest" 2>/dev/null; then
  timeout "${TEST_TIMEOUT:-60}" "$PY" -m pytest -q -p no:cacheprovider tests/test_xla_gpu.py tests/test_xla_hook.py 2>&1 | tail -n 3 || status=1
else
  echo "pytest not installed: tests skipped"
fi

# 2. Each mode timed against stock on the tiny modules (docs/xla_gpu_modes.md).
#    (Rehearsed on XLA:CPU, rows with a kInput transpose fail to compile: XLA:CPU
#    has no transpose emitter; the GPU labels are XLA:GPU's. Expected there.)
for mode in on-top replace as-written; do
  echo "== 2. stock XLA:${BACKEND^^} vs gpu-best, $mode mode, timed (tiny modules)"
  timeout "${MODE_TIMEOUT:-60}" "$PY" bench/fusion_vs_stock.py --backend "$BACKEND" --passes gpu-best \
    --measure-mode "$mode" --only "${TINY_ONLY:-llama3-tiny-*}" --reps "$REPS" 2>&1 \
    | grep -vE "^ *@|^\*\*\*|^[WI][0-9]{4}" | tail -n 6 || status=1
done

# 3. Full-size decode and prefill, on top of XLA's fusions, one input set.
echo "== 3. stock vs gpu-best on top, full size (${FULL_ONLY})"
timeout "${FULL_TIMEOUT:-140}" "$PY" bench/fusion_vs_stock.py --backend "$BACKEND" --passes gpu-best \
  --measure-mode on-top --only "$FULL_ONLY" $FULL_FLAGS --reps "${FULL_REPS:-10}" 2>&1 \
  | grep -vE "^ *@|^\*\*\*|^[WI][0-9]{4}" | tail -n 6 || status=1

# 4. Per kernel: device time vs our GPU roofline and XLA's GpuPerformanceModel.
echo "== 4. kernels: device time vs our roofline and XLA's model"
timeout "${KERNEL_TIMEOUT:-70}" "$PY" bench/gpu_kernels_vs_models.py $MODELS_FLAGS --reps "$REPS" \
  --only "${KERNEL_ONLY:-llama3-tiny-decode-f32,llama3-tiny-train-f32}" 2>&1 \
  | grep -vE "^[WI][0-9]{4}" | tail -n 10 || status=1
exit $status
