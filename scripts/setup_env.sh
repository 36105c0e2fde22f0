#!/usr/bin/env bash
# Builds (or checks) the course environment in .venv; `make lab` and `make test` call it.
#   PYTHON           base interpreter for a new .venv (default: python3)
#   TORCH_INDEX_URL  index for the CPU torch wheel, e.g. https://download.pytorch.org/whl/cpu
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
PY=$VENV/bin/python
STAMP=$VENV/.setup-stamp
CPU_TORCH=torch==2.13.0   # the CPU build CI tests against
say() { echo "setup_env: $*"; }
quiet() { local out; out=$("$@" 2>&1) || { echo "$out" >&2; return 1; }; }
pip_install() { "$PY" -m pip install --quiet --disable-pip-version-check "$@"; }

# What the env was built from: a rerun with an unchanged stamp costs one cksum.
stamp=$(cksum pyproject.toml scripts/setup_env.sh | awk '{print $1}' | paste -sd-)
if [[ -x $PY && -f $STAMP && $(<"$STAMP") == "$stamp" ]]; then
    say ".venv is up to date ('make clean-env' rebuilds it)"
    exit 0
fi
rm -f "$STAMP"   # a run that stops half-way must not look finished

shared=0
if [[ ! -x $PY ]]; then
    if "$PYTHON" -c 'import torch' 2>/dev/null; then
        # A GPU box or Colab-like image: keep its torch (and the CUDA stack it was built with).
        say "creating .venv from $PYTHON, sharing its torch (--system-site-packages)"
        "$PYTHON" -m venv --system-site-packages "$VENV"
    else
        say "creating .venv from $PYTHON"
        "$PYTHON" -m venv "$VENV"
    fi
fi
grep -q '^include-system-site-packages = true' "$VENV/pyvenv.cfg" && shared=1

if "$PY" -c 'import torch' 2>/dev/null; then
    say "torch $("$PY" -c 'import torch; print(torch.__version__)') already there, left alone"
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    say "NVIDIA GPU found: installing torch from PyPI (CUDA build, a few GB)"
    pip_install torch
else
    say "no GPU: installing the CPU build $CPU_TORCH${TORCH_INDEX_URL:+ from $TORCH_INDEX_URL}"
    pip_install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$CPU_TORCH"
fi

say "installing the course package and its [course,test] extras (editable)"
pip_install -e ".[course,test]"

# Jupyter looks for its commands, lab assets and extension configs inside the venv only, so
# a JupyterLab that pip found in the shared base Python would be half-visible: the front end
# (and its deps, never torch) goes into .venv itself.
if (( shared )); then
    say "installing JupyterLab and nbgrader into .venv itself (the base Python's stay unused)"
    front_end=()   # (a read loop, not mapfile: macOS still ships bash 3.2)
    while IFS= read -r req; do front_end+=("$req"); done < <("$PY" - <<'PYEOF'
from importlib.metadata import requires
from packaging.requirements import Requirement
for line in requires("triton-course"):
    req = Requirement(line)
    if 'extra == "course"' in str(req.marker) or req.name == "ipywidgets":
        print(f"{req.name}{req.specifier}")
PYEOF
    )
    pip_install --ignore-installed "${front_end[@]}"
fi

# nbgrader 0.9 enables its lab and server extensions when pip installs it; this only
# repairs an env where someone disabled them.
J=$VENV/bin/jupyter
# (Listings are read whole first: grep -q closing a pipe early would fail the lister.)
lab_list=$("$J" labextension list 2>&1)
if ! grep -q '@jupyter/nbgrader .*enabled' <<<"$lab_list"; then
    say "enabling nbgrader's JupyterLab extension"
    quiet "$J" labextension enable --level=sys_prefix @jupyter/nbgrader
fi
server_list=$("$J" server extension list 2>&1)
for ext in formgrader assignment_list course_list validate_assignment; do
    if ! grep -q "nbgrader.server_extensions.$ext .*enabled" <<<"$server_list"; then
        say "enabling nbgrader's $ext server extension"
        quiet "$J" server extension enable --sys-prefix "nbgrader.server_extensions.$ext"
    fi
done

echo "$stamp" >"$STAMP"
say "done: $("$PY" -c 'import torch, triton; print(f"torch {torch.__version__}, triton {triton.__version__}")')"
