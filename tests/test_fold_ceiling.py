"""``benchmarks/bench_fold_ceiling.py``'s plain kernel under the Triton interpreter (fp32 operands:
the interpreter's bf16 is not the GPU's): the fold ``a S + X^T Y`` and the no-fold reference
``a S`` it is timed against, both checked with the output ``y = S C`` against float64. The GPU
run times them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                                reason="needs the Triton interpreter (TRITON_INTERPRET=1) or a CUDA GPU")


@pytest.mark.parametrize("fold", ["none", "ieee", "fma"])
def test_plain_fold_and_scale_only(fold):
    import bench_fold_ceiling as bfc

    device = "cuda" if torch.cuda.is_available() else "cpu"
    heads, head_dim, d_state, hpg, window, block_p = 4, 32, 16, 2, 16, 16
    rows = heads * head_dim
    gen = torch.Generator().manual_seed(5)
    S0 = torch.randn(rows, d_state, generator=gen)
    X = torch.randn(heads, window, head_dim, generator=gen) * 0.1
    Y = torch.randn(heads // hpg, window, d_state, generator=gen)
    a = torch.rand(heads, generator=gen) * 0.5 + 0.5
    C = torch.randn(heads // hpg, d_state, generator=gen)
    S, out = S0.clone().to(device), torch.empty(rows, device=device)
    bfc._fold_plain[(rows // block_p,)](S, X.to(device), Y.to(device), a.to(device), C.to(device), out, HPG=hpg,
                                        P=head_dim, N=d_state, J=window, BLOCK_P=block_p, FOLD=fold, num_warps=2)
    want = a.double()[:, None, None] * S0.double().view(heads, head_dim, d_state)
    if fold != "none":
        want = want + torch.einsum("hjp,hjn->hpn", X.double(), Y.double().repeat_interleave(hpg, dim=0))
    want = want.view(rows, d_state)
    y = (want.view(heads, head_dim, d_state) * C.double().repeat_interleave(hpg, dim=0)[:, None, :]).sum(-1)
    assert torch.allclose(S.cpu().double(), want, rtol=1e-5, atol=1e-5)
    assert torch.allclose(out.cpu().double(), y.view(rows), rtol=1e-4, atol=1e-4)
