#!/usr/bin/env bash
# On the GPU machine (device tool), results to $OUT. One stage per call, since each call may
# run for 10 minutes at most:
#   bash scripts/gpu_run.sh bench [--only NAME,...]   the benchmark (autograder.bench)
#   bash scripts/gpu_run.sh tests [PYTEST ARGS]       the GPU tests and notebooks (default: all)
#   bash scripts/gpu_run.sh class [PYTEST ARGS]       classes graded by grade_class (tests/test_class_on_gpu.py)
#   bash scripts/gpu_run.sh traffic                   the trace's byte counts against the card's times
#   bash scripts/gpu_run.sh profile NAME...           one student's grading, step by step (scripts/profile_grading.py)
#   bash scripts/gpu_run.sh tilings                   PS4's and PS5's candidate tilings, each alone (scripts/time_tilings.py)
#   bash scripts/gpu_run.sh attention                 lesson 8's attention and a descriptor-fed variant (scripts/time_attention_variants.py)
#   bash scripts/gpu_run.sh fp8                       ways to add lesson 11's FP8 partial sums into float32 (scripts/time_fp8_accumulation.py)
#   bash scripts/gpu_run.sh epilogue                  lesson 11's matmul with its output tile stored in halves (scripts/time_epilogue_subtile.py)
# Wheels for what that image lacks (nbclient, ipykernel, ...) travel in .whl (see README).
set -uo pipefail
stage=${1:?"usage: gpu_run.sh bench|tests|class|traffic|profile|tilings|attention|fp8|epilogue [args]"}; shift
out=${OUT:-results/gpu}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then  # once per machine: later stages reuse /tmp/site
  [ -e /tmp/site/.installed ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.installed; } || exit 1
  export PYTHONPATH=/tmp/site PATH="/tmp/site/bin:$PATH"  # nbgrader runs `alembic`
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Compiled kernels persist between calls while the machine stays warm (the folder is ignored).
# The lessons' outputs and figures (autograder.figures) go to one file; absolute, since a
# notebook's kernel runs in the notebook's folder.
export TRITON_CACHE_DIR="$PWD/.cache/triton" TRITON_COURSE_NOTEBOOK_OUTPUTS="$(realpath "$out")/notebook-outputs.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > "$out/nvidia-smi.csv"
case $stage in
  bench) python3 -m autograder.bench --out "$out" "$@" 2>&1 | tee "$out/bench.log" ;;
  # Everything but what needs nbgrader, a browser or a CPU-only install; -v names each test
  # as it ends, so a run cut short still says which passed.
  # The per-test limit (pytest-timeout, in the device image) keeps one slow test from eating
  # the call: the rest still run and report.
  tests) python3 -m pytest -v -rfE --tb=short -p no:cacheprovider -p no:warnings --timeout=300 \
           --ignore=tests/test_nbgrader_pipeline.py --ignore=tests/test_browser.py \
           --ignore=tests/test_colab_like.py --ignore=tests/test_environment.py \
           --ignore=tests/test_triton_floor.py --ignore=tests/test_class_robustness.py \
           --ignore=tests/test_class_workers.py --ignore=tests/test_class_on_gpu.py \
           --ignore=tests/test_traffic_on_gpu.py \
           "${@:-tests}" 2>&1 | tee "$out/pytest.log" | grep -v " PASSED" ;;
  # One worker per GPU; -k picks problem sets (a call lasts 10 minutes at most).
  class) COURSE_CLASS_RESULTS="$out/class-grading.md" python3 -m pytest -v -rfE --tb=short -p no:cacheprovider \
           -p no:warnings tests/test_class_on_gpu.py "$@" 2>&1 | tee "$out/pytest-class.log" ;;
  traffic) if compgen -G ".whl/interpreter/*.whl" >/dev/null; then  # a numpy Triton 3.6's interpreter runs under
             [ -e /tmp/site-interpreter/.installed ] || { python3 -m pip install -q --no-index --no-deps --no-compile \
               --target /tmp/site-interpreter .whl/interpreter/*.whl && touch /tmp/site-interpreter/.installed; } || exit 1
             export PYTHONPATH="/tmp/site-interpreter:$PYTHONPATH"
           fi
           COURSE_TRAFFIC_RESULTS="$out/traffic-vs-time.md" python3 -m pytest -v -rfE --tb=short -p no:cacheprovider \
           -p no:warnings tests/test_traffic_on_gpu.py "$@" 2>&1 | tee "$out/pytest-traffic.log" ;;
  profile) for name in "$@"; do python3 scripts/profile_grading.py "$name"; done 2>&1 | tee "$out/profile.log" ;;
  tilings) python3 scripts/time_tilings.py 2>&1 | tee "$out/tilings.log" ;;
  attention) python3 scripts/time_attention_variants.py 2>"$out/attention-compiler.log" | tee "$out/attention.log" ;;
  fp8) python3 scripts/time_fp8_accumulation.py 2>&1 | tee "$out/fp8-accumulation.log" ;;
  epilogue) python3 scripts/time_epilogue_subtile.py 2>&1 | tee "$out/epilogue-subtile.log" ;;
  *) echo "unknown stage $stage: use bench, tests, class, traffic, profile, tilings, attention, fp8 or epilogue" >&2; exit 2 ;;
esac
