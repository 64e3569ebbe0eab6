"""Kimi Delta Attention decode: ReplaySSM vs the standard step vs fla's ``fused_recurrent_kda``.

The same benchmark as bench_gdn_decode.py (see its docstring) with KDA's per-channel decay and
Kimi-Linear's dims by default (32 heads, no key-head sharing, d_k = d_v = 128).

    python benchmarks/bench_kda_decode.py --json kda.json
    python benchmarks/bench_kda_decode.py --variants --json kda_variants.json
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_gdn_decode import main  # noqa: E402

if __name__ == "__main__":
    main("kda")
