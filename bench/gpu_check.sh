#!/usr/bin/env bash
# The one prepared GPU check of issue 54: `bash bench/gpu_check.sh`, on the device machine through the device tool
# (run from the repository root, carry [".whl"], timeout_s 600), or anywhere else.
#
#   1. installs the carried wheels (.whl/, made by `bash bench/gpu_wheels.sh` on a machine with PyPI) into $SITE
#      and sesa itself (--no-deps; from its source tree on PYTHONPATH where its build backend cannot run);
#   2. runs the CUDA tests (`pytest -m cuda tests/test_cuda.py`; skipped, and said so, where torch finds no GPU);
#   3. runs bench/gpu.py part by part, each under its own time limit, so that one part that hangs leaves the others
#      their time: the engine against generate, the default `sesa train device=cuda`, the train steps; then writes
#      the table (gpu.md) and docs/measurements.md's bench:gpu block from what finished. Without a GPU it runs
#      `bench/gpu.py --smoke` instead (the same code at tiny sizes on the CPU; nothing is written into the docs).
#
# Everything goes to $OUT (the device tool's folder that comes back; outputs/gpu-check elsewhere): check.log (this
# whole output), tests.log, gpu-engine.json, gpu-train.json, gpu-default.json, gpu.md and measurements.md (the page
# with the new block: copy it over docs/measurements.md). Limits, worst case about 9.5 minutes in all: tests 150 s,
# engine 110 s, default run 180 s, train steps 120 s. PYTHON picks the interpreter (default python3).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu-check}
SITE=${SITE:-$PWD/outputs/gpu-site}  # under the ignored outputs/ of this checkout
PY=${PYTHON:-python3}
mkdir -p "$OUT"
exec > >(tee "$OUT/check.log") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s)
step() { echo; echo "== [$(($(date +%s) - t0)) s] $*"; }

step "machine"
"$PY" -c "import sys, torch, transformers; print('python', sys.version.split()[0], '| torch', torch.__version__,
'| transformers', transformers.__version__, '| cuda', torch.cuda.is_available() and torch.cuda.get_device_name())"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version \
    --format=csv,noheader

step "wheels and sesa into $SITE"
rm -rf "$SITE"
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
        || { echo "installing .whl/ failed"; exit 1; }
else
    echo "no .whl/ here (bash bench/gpu_wheels.sh makes it): using the packages $PY has"
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"
if "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target "$SITE" . 2>"$SITE.build.log"
then
    echo "sesa built and installed"
else  # e.g. hatchling needs a newer packaging than the image has: run sesa from its source tree
    echo "sesa could not be built here ($(tail -1 "$SITE.build.log")): running it from src/"
    export PYTHONPATH="$PWD/src:$PYTHONPATH"
    mkdir -p "$SITE/bin" && printf '#!/bin/sh\nexec %s -m sesa_cli "$@"\n' "$PY" >"$SITE/bin/sesa"
    chmod +x "$SITE/bin/sesa"
fi
"$PY" -c "import hydra, omegaconf, gymnasium, math_verify, sesa_cli; print('imports: ok, sesa_cli from', sesa_cli.__file__)" \
    || exit 1
sesa --version || exit 1
cuda=$("$PY" -c "import torch; print(int(torch.cuda.is_available()))")

step "sesa train device=cuda on this machine: one line and exit 2 where there is no GPU"
sesa train device=cuda --cfg job >/dev/null
echo "exit $?"

if [ "$cuda" = 1 ]; then
    step "CUDA tests (150 s)"
    timeout 150 "$PY" -m pytest -m cuda -n 0 -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$OUT/tests.log"
    echo "exit ${PIPESTATUS[0]}"
    step "bench: engine against generate (110 s)"
    timeout 110 "$PY" bench/gpu.py --parts engine --out "$OUT" --repeats 2
    echo "exit $?"
    step "bench: the default sesa train device=cuda (180 s)"
    timeout 180 "$PY" bench/gpu.py --parts default --default-timeout 170 --out "$OUT"
    echo "exit $?"
    step "bench: sesa train steps (120 s)"
    timeout 120 "$PY" bench/gpu.py --parts train --out "$OUT"
    echo "exit $?"
    step "the table, and docs/measurements.md's bench:gpu block"
    "$PY" bench/gpu.py --parts "" --out "$OUT" --page docs/measurements.md && cp docs/measurements.md "$OUT/"
else
    step "no CUDA GPU here: the CUDA tests are skipped, and the bench runs --smoke on the CPU (figures meaningless)"
    timeout 90 "$PY" -m pytest -m cuda -n 0 -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$OUT/tests.log"
    timeout 300 "$PY" bench/gpu.py --smoke --out "$OUT"
    echo "exit $?"
fi
step "done"
ls -l "$OUT"
