#!/usr/bin/env bash
# Download, into .whl/, the wheels scripts/gpu_run.sh installs on the GPU machine, whose image
# (Python 3.12, torch, triton, numpy, pytest, matplotlib, pyyaml) lacks Jupyter's pieces and
# nbgrader (for `gpu_run.sh class`). .whl/ is git-ignored; the device tool carries it
# (carry: [".whl"], 64 MiB at most).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rm -rf .whl
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
  -d .whl nbclient ipykernel nbformat ipywidgets jsonschema pytest-timeout nbgrader tqdm
# Already in the image: two versions of one package would break the install there.
rm -f .whl/{attrs,packaging,psutil,pygments,pytest,pluggy,iniconfig,python_dateutil,typing_extensions,tzdata}-*.whl
# nbgrader's web front end (autograde runs without it; checked with Python 3.12): 38 MB less.
rm -f .whl/{jupyterlab,notebook,babel,jupyterlab_server,jupyterlab_widgets,widgetsnbextension,jupyter_builder}-*.whl
# The trace runs in Triton's interpreter, which Triton 3.6 (the image's) breaks under numpy >= 2.4:
# `gpu_run.sh traffic` puts this numpy first on its own path (autograder.device checks the pair).
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --no-deps \
  --platform manylinux_2_28_x86_64 -d .whl/interpreter "numpy>=2.3,<2.4"
du -sh .whl
