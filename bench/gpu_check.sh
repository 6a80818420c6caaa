#!/usr/bin/env bash
# The GPU checks, for a machine with a GPU: the GPU tests, stock vs as-written
# timings, the fusion pipeline against stock XLA:GPU, and the cost model's kernel
# timings, each as a short table.  Installs nothing.  On a
# machine without a GPU it says "no GPU" and exits 0.
set -u -o pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PY" - <<'PYEOF' 2>/dev/null
import sys
from xla_bridge.xla import backend_available
sys.exit(0 if backend_available("gpu") else 1)
PYEOF
then
  echo "no GPU"
  exit 0
fi

"$PY" - <<'PYEOF'
from xla_bridge.xla import get_client, hook_supported, jax_versions
dev = get_client("gpu").local_devices()[0]
v = jax_versions()
print(f"GPU: {dev.device_kind}; jax {v['jax']} jaxlib {v['jaxlib']}; pipeline hook: {'yes' if hook_supported() else 'no'}")
PYEOF

status=0
if "$PY" -c "import pytest" 2>/dev/null; then
  "$PY" -m pytest -q -p no:cacheprovider tests/test_xla_gpu.py tests/test_xla_hook.py 2>&1 | tail -n 5 || status=1
else
  echo "pytest not installed: tests skipped"
fi
"$PY" bench/xla_bench.py --backend gpu --reps "${REPS:-30}" || status=1

# Fusion passes on the GPU: stock XLA:GPU vs XLA:GPU as written with the best
# Python pipeline at the post-scheduler hook, timed and outputs compared.
echo "== fusion: stock XLA:GPU vs ours (BEST), timed on this GPU"
timeout "${FUSION_TIMEOUT:-240}" "$PY" bench/fusion_vs_stock.py --backend gpu --only "${FUSION_ONLY:-llama3-tiny-*}" \
  --reps "${REPS:-30}" 2>&1 | grep -vE "^ *@|^\*\*\*" | tail -n 8 || status=1

# Cost model on this GPU: each kernel extracted, timed alone (its device time from
# the trace) against the roofline for this GPU's spec.
echo "== cost model: kernel timings vs roofline on this GPU"
timeout "${KERNEL_TIMEOUT:-240}" "$PY" bench/cost_model_accuracy.py --kernels --backend gpu \
  --only "${KERNEL_ONLY:-llama3-tiny-decode-f32,llama3-tiny-train-f32}" 2>&1 | tail -n 16 || status=1
exit $status
