#!/usr/bin/env bash
# One call on a GPU machine: GPU tests, then the decode benchmarks, each under its own time limit,
# logs and JSON under $OUT (or ./gpu-out). Wheels for packages the machine lacks (fla-core,
# nvidia-modelopt and its pure-Python needs) are installed from ./.whl when that folder exists.
#
#   bash benchmarks/run_gpu_suite.sh [tests|bench|all]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
what=${1:-all}
python3 - <<'PY' | tee "$OUT/versions.txt"
import torch, triton
print(f"gpu={torch.cuda.get_device_name()} torch={torch.__version__} cuda={torch.version.cuda} triton={triton.__version__}")
PY
status=0
step() {  # step NAME SECONDS CMD...: run CMD under a time limit, log to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s): $*"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name rc=$rc"
  [ "$rc" = 0 ] || status=1
}
if [ "$what" = tests ] || [ "$what" = all ]; then
  step gpu_tests "${GPU_TESTS_LIMIT:-200}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
    --deselect tests/test_cli.py::test_default_build_on_the_gpu tests
  # The format device functions run compiled (not interpreted) where CUDA is present.
  step gpu_formats "${FORMATS_LIMIT:-60}" python3 -m pytest -q -p no:cacheprovider \
    tests/test_formats_triton.py tests/test_formats_stochastic.py
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  step bench_mamba2 "${BENCH_LIMIT:-150}" python3 benchmarks/bench_mamba2_decode.py ${MAMBA2_BENCH_ARGS:-} --json "$OUT/mamba2.json"
  step bench_gdn "${BENCH_LIMIT:-150}" python3 benchmarks/bench_gdn_decode.py ${GDN_BENCH_ARGS:-} --json "$OUT/gdn.json"
  step bench_kda "${BENCH_LIMIT:-150}" python3 benchmarks/bench_kda_decode.py ${KDA_BENCH_ARGS:-} --json "$OUT/kda.json"
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
  step gpu_builder "${BUILDER_LIMIT:-120}" python3 -m pytest -q -p no:cacheprovider tests/test_cli.py::test_default_build_on_the_gpu
fi
exit $status
