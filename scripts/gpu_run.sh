#!/usr/bin/env bash
# On the GPU machine (device tool): GPU tests, every notebook, the benchmark; results to $OUT.
# Wheels for what that image lacks (nbclient, ipykernel, ...) travel in .whl (see README).
set -uo pipefail
out=${OUT:-results/gpu}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > "$out/nvidia-smi.csv"
python3 -m autograder.bench --out "$out" 2>&1 | tee "$out/bench.log"
# Everything but what needs nbgrader, a browser or a CPU-only install.
python3 -m pytest tests -q -p no:cacheprovider -p no:warnings --ignore=tests/test_nbgrader_pipeline.py \
  --ignore=tests/test_browser.py --ignore=tests/test_colab_like.py --ignore=tests/test_environment.py \
  --ignore=tests/test_triton_floor.py 2>&1 | tee "$out/pytest.log"
