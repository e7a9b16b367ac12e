#!/usr/bin/env bash
# Download, on a machine with PyPI, the wheels bench/gpu_check.sh installs on the GPU machine (Python 3.12, x86-64
# Linux, no network; its image has torch 2.11, transformers 5.17, peft, accelerate, rich, pandas, numpy, matplotlib,
# pyyaml, packaging, pathspec and pluggy, but not what is below). Writes .whl/ at the repository root (ignored by
# git; the device tool's `carry` takes it along): `bash bench/gpu_wheels.sh`.
#
# One version of each, as this checkout's own environment has them (sesa's pins: hydra-core < 1.4, omegaconf < 2.4):
#   hydra-core, omegaconf        sesa's configs; both need antlr4-python3-runtime 4.9.*
#   antlr4-python3-runtime 4.9.3 the one antlr every user accepts: hydra-core and omegaconf pin 4.9.*, and
#                                latex2sympy2_extended 1.11.0 (math-verify 0.9.0's parser) takes >= 4.9.3, <= 4.13.2
#                                (it ships parsers generated for 4.9.3, 4.11 and 4.13.2). PyPI has 4.9.3 as an sdist
#                                only: its wheel is built here (pure Python, py3-none-any).
#   gymnasium, farama-notifications   FrozenLake's reference dynamics (cloudpickle, numpy, typing-extensions are there)
#   math-verify, latex2sympy2_extended  task=math's grader (sympy is there)
#   hatchling, trove-classifiers, tomlkit  sesa's build backend, so `pip install --no-build-isolation .` builds sesa
#                                there (it also needs packaging >= 24.2; gpu_check.sh falls back to sesa's source
#                                tree on PYTHONPATH where the image's packaging is older)
set -euo pipefail
cd "$(dirname "$0")/.."
out=.whl
rm -rf "$out" && mkdir -p "$out"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    -d "$out" \
    hydra-core==1.3.8 omegaconf==2.3.1 \
    gymnasium==1.4.0 farama-notifications==0.0.6 \
    math-verify==0.9.0 latex2sympy2_extended==1.11.0 \
    hatchling==1.33.0 trove-classifiers==2026.9.21.13 tomlkit==0.15.2
# sdist only on PyPI: build the (pure-Python) wheel here
python3 -m pip wheel -q --no-deps -w "$out" antlr4-python3-runtime==4.9.3
ls -1 "$out"
du -sh "$out"
# what each wheel needs, for a check that nothing is missing on the GPU machine (its own list: KINDS.md)
for w in "$out"/*.whl; do
    echo "$(basename "$w"): $(unzip -p "$w" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' \
        | sed 's/^Requires-Dist: //' | paste -sd ';' -)"
done
