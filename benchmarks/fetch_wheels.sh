#!/usr/bin/env bash
# Download, into ./.whl (git-ignored), the wheels a GPU machine without network needs for
# run_gpu_suite.sh: fla-core (baseline kernels) and nvidia-modelopt with the pure-Python
# packages it imports that the machine's image lacks. Versions are pinned to what was seen to
# import there (Python 3.12, torch 2.11): pulp 4.x pulls orloge/cpsat, so 3.3.2 is used.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  fla-core==0.6.0 nvidia-modelopt==0.47.0 pulp==3.3.2 omegaconf==2.4.0 pydantic==2.14.4 pydantic-core==2.50.5 \
  annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
ls .whl
