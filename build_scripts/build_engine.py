#!/usr/bin/env python3
"""Quantize a hybrid checkpoint and write a deployable ReplaySSM directory.

The same builder as ``trtllm-replayssm build``; e.g.

    python build_scripts/build_engine.py --model DIR --quantization nvfp4 --ssm-checkpoint fp32 \
        --ssm-read nvfp4 --window 16 --target b300 --output OUT

With no ``--model`` it builds the embedded tiny hybrid model (CPU is enough).
"""

import sys
from pathlib import Path

try:
    from trtllm_replayssm.cli import main
except ImportError:  # run from a source checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from trtllm_replayssm.cli import main

if __name__ == "__main__":
    sys.exit(main(["build", *sys.argv[1:]]))
