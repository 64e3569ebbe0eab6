"""Harness of the delta-rule kernel tests (test_gdn_kernels.py, test_gdn_staged_kernels.py,
test_kda_kernels.py): a random GDN / KDA layer, :func:`drive` (a kernel and the float64
reference side by side over many steps), fla's naive recurrence, and the GPU grids' helpers."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.gdn import decode
from trtllm_replayssm.ops.gdn import reference as gdn_ref
from trtllm_replayssm.ops.gdn.decode_chunked import ChunkedVariant
from trtllm_replayssm.ops.gdn.decode_staged import folds_first
from trtllm_replayssm.ops.gdn.state import DeltaRuleReplayState
from trtllm_replayssm.ops.kda import reference as kda_ref


F64 = torch.float64
CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


class Layer:
    """Random gate parameters and token generator of one GDN (``per_channel=False``) or KDA layer."""

    def __init__(self, per_channel, HV, H, d_k, d_v, dtype=torch.float32, seed=0, device=DEV):
        self.per_channel, self.HV, self.H, self.d_k, self.d_v, self.dtype = per_channel, HV, H, d_k, d_v, dtype
        self.device = device
        self.gen = torch.Generator().manual_seed(seed)
        self.A_log = torch.empty(HV).uniform_(-1.0, 0.5, generator=self.gen).to(device)
        self.dt_bias = (0.5 * torch.randn(HV * d_k if per_channel else HV, generator=self.gen)).to(device)
        self.ref = kda_ref if per_channel else gdn_ref
        self.name = "kda" if per_channel else "gdn"

    def tokens(self, batch, T=None):
        pre = (batch,) if T is None else (batch, T)
        a_shape = (self.HV, self.d_k) if self.per_channel else (self.HV,)

        def rnd(*shape, s=1.0):
            return (s * torch.randn(*pre, *shape, generator=self.gen)).to(self.dtype).to(self.device)

        return {"q": rnd(self.H, self.d_k), "k": rnd(self.H, self.d_k), "v": rnd(self.HV, self.d_v),
                "a": rnd(*a_shape), "b": rnd(self.HV)}

    def state(self, slots, config, checkpoint_dtype=torch.float32, device=None):
        return DeltaRuleReplayState.allocate(
            slots, self.HV, self.H, self.d_k, self.d_v, config, per_channel_decay=self.per_channel,
            activation_dtype=self.dtype, checkpoint_dtype=checkpoint_dtype, device=device or self.device,
        )

    def params(self, device):
        return {"A_log": self.A_log.to(device), "dt_bias": self.dt_bias.to(device)}


def _on(inputs, device):
    return {k: v.to(device) for k, v in inputs.items()}


def _cpu(inputs):
    return _on(inputs, "cpu")


def rel_err(actual, expected):
    """Max error relative to the largest reference entry, computed where ``expected`` lives."""
    expected = expected.to(F64)
    actual = actual.to(expected.device, F64)
    return ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


def drive(layer, batch, slots, steps, window=4, refold=True, pads=True, use_wrapper=False, seed=0,
          oracle_device="cpu", drafts=0, stagger=True, **launch):
    """Run the kernel and the float64 reference side by side for ``steps`` decode steps.

    Rows address a shuffled subset of ``slots`` (so slots sit at staggered flush phases) with a
    padded row when ``pads``. After every step: outputs, cursors, and the checkpoints of every
    slot (they move only at flushes); at the end the materialised states (which read every ring
    field the kernel wrote). Returns ``(worst output error, worst checkpoint error, flushes)``.
    ``oracle_device``: where the float64 reference runs (the GPU for large batches: the CPU
    reference at batch 64 and model dims dominates the test time). ``drafts`` widens the ring
    (capacity ``window + drafts``) without using it. ``stagger=False``: every slot flushes at the
    same steps (``flush_stagger``), so a flush step has several flush rows. Where the launch is
    the write-through step (named, or the default at small batches) the reference flushes every
    live slot at every step.
    """
    config = ReplaySSMConfig(window=window, max_draft_tokens=drafts, flush_stagger=stagger)
    state = layer.state(slots, config)
    # The oracle: same ring dtypes (so both see identically rounded k, v), float64 checkpoint.
    ref_dev = torch.device(oracle_device)
    oracle = layer.state(slots, config, checkpoint_dtype=F64, device=ref_dev)
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(slots, generator=gen)[:batch].tolist()
    if pads and batch > 1:
        perm[batch // 2] = -1
    idx = torch.tensor(perm, dtype=torch.int32)
    out_tol = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}[layer.dtype]
    worst_o = worst_c = 0.0
    flushes = 0
    variant = launch.get("variant", decode.REPLAY_VARIANT)
    if variant is None and not {"block_v", "split"} & launch.keys():
        variant = decode.default_variant(batch, layer.per_channel, refold, layer.d_v)
    live_slots = idx[idx != -1].long().to(ref_dev)
    fold_first = folds_first(variant, refold, window)
    for t in range(steps):
        inputs = layer.tokens(batch)
        if variant == "write_through":
            # A flush at every token: the reference's live slots flush at this step too.
            oracle.flush_at[live_slots] = oracle.committed[live_slots] + 1
        if fold_first:
            # The token that would fill the window starts the next one: the reference flushes
            # those slots first, then steps them from ring position 0.
            due = gdn_ref.slots_due_to_flush(oracle, live_slots)
            layer.ref.__dict__[f"{layer.name}_replay_flush"](oracle, due.to(torch.int32), refold=refold)
            flushes += due.numel()
        if use_wrapper:
            op = getattr(__import__(f"trtllm_replayssm.ops.{layer.name}", fromlist=["x"]), f"{layer.name}_replay_step")
            got = op(state, **inputs, **layer.params(layer.device), state_indices=idx.to(layer.device), refold=refold)
        else:
            got = decode.delta_replay_step(
                state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
                state.committed, state.flush_at, state.window, **inputs, **layer.params(layer.device),
                state_indices=idx.to(layer.device), pad_slot_id=-1, scale=None, refold=refold, **launch,
            )
        want = layer.ref.__dict__[f"{layer.name}_replay_step"](
            oracle, **_on(inputs, ref_dev), **layer.params(ref_dev), state_indices=idx.to(ref_dev), refold=refold)
        live = idx != -1
        assert torch.count_nonzero(got[~live]) == 0, "padded rows must get zero outputs"
        err = rel_err(got[live], want[live.to(ref_dev)])
        worst_o = max(worst_o, err)
        assert err < out_tol, f"step {t}: output error {err:.2e}"
        assert torch.equal(state.committed.cpu(), oracle.committed.cpu()), f"step {t}: committed"
        assert torch.equal(state.flush_at.cpu(), oracle.flush_at.cpu()), f"step {t}: flush_at"
        # Every step moves a live slot's cursor forward, unless it flushed back to 0.
        if not fold_first:
            flushes += int((oracle.committed.cpu()[idx[live].long()] == 0).sum())
        if bool((oracle.checkpoint != 0).any()):
            worst_c = max(worst_c, rel_err(state.checkpoint, oracle.checkpoint))
    untouched = [s for s in range(slots) if s not in perm]
    if untouched:
        assert torch.count_nonzero(state.checkpoint[untouched]) == 0
    # Every ring field the kernel wrote, through the reference's materialisation of both states.
    cpu_state = DeltaRuleReplayState(**{f: getattr(state, f).to(ref_dev) if isinstance(getattr(state, f), torch.Tensor)
                                        else getattr(state, f) for f in state.__dataclass_fields__})
    every = torch.arange(slots, dtype=torch.int32, device=ref_dev)
    materialize = layer.ref.__dict__[f"{layer.name}_replay_materialize"]
    for fold in (True, False):
        m_err = rel_err(materialize(cpu_state, every, refold=fold), materialize(oracle, every, refold=fold))
        assert m_err < max(out_tol, 1e-5), f"materialised state (refold={fold}) error {m_err:.2e}"
    return worst_o, worst_c, flushes


def fla_naive_check(layer, batch=2, T=9):
    """Standard and ReplaySSM kernels against fla's naive recurrent reference from a random state."""
    if layer.per_channel:
        from fla.ops.kda.naive import naive_recurrent_kda as fla_recurrent
    else:
        from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule as fla_recurrent
    seq = layer.tokens(batch, T)
    initial = 0.3 * torch.randn(batch, layer.HV, layer.d_v, layer.d_k, generator=layer.gen)
    share = layer.HV // layer.H
    q = seq["q"].float().cpu()
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
    k = seq["k"].float().cpu()
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    a = seq["a"].float().cpu()
    A = layer.A_log.cpu().exp()
    if layer.per_channel:
        g = -A[:, None] * F.softplus(a + layer.dt_bias.cpu().view(layer.HV, layer.d_k))
    else:
        g = -A * F.softplus(a + layer.dt_bias.cpu())
    beta = seq["b"].float().cpu().sigmoid()
    q, k = q.repeat_interleave(share, 2), k.repeat_interleave(share, 2)
    h0 = initial.transpose(-1, -2).contiguous()
    if layer.per_channel:
        o_fla, S_fla = fla_recurrent(q, k, seq["v"].float().cpu(), g, beta, initial_state=h0, output_final_state=True)
    else:
        o_fla, S_fla = fla_recurrent(q, k, seq["v"].float().cpu(), beta, g, initial_state=h0, output_final_state=True)
    plain = initial.to(layer.device).contiguous()
    state = layer.state(batch, ReplaySSMConfig(window=4, flush_stagger=False))
    state.checkpoint.copy_(initial)
    rows = torch.arange(batch, dtype=torch.int32, device=layer.device)
    for t in range(T):
        token = {name: x[:, t].contiguous() for name, x in seq.items()}
        o_std = decode.delta_standard_step(plain, **token, **layer.params(layer.device), state_indices=rows,
                                           pad_slot_id=-1, scale=None)
        o_rep = decode.delta_replay_step(
            state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
            state.committed, state.flush_at, state.window, **token, **layer.params(layer.device),
            state_indices=rows, pad_slot_id=-1, scale=None, refold=True)
        torch.testing.assert_close(o_std.cpu(), o_fla[:, t], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(o_rep.cpu(), o_fla[:, t], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(plain.cpu(), S_fla.transpose(-1, -2), rtol=1e-4, atol=1e-4)


def standard_check(layer, batch, slots):
    ssm = 0.3 * torch.randn(slots, layer.HV, layer.d_v, layer.d_k, generator=layer.gen)
    mine, oracle = ssm.to(layer.device), ssm.to(F64)
    idx = torch.randperm(slots, generator=layer.gen)[:batch].to(torch.int32)
    if batch > 1:
        idx[0] = -1
    tol = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}[layer.dtype]
    for t in range(3):
        inputs = layer.tokens(batch)
        got = decode.delta_standard_step(mine, **inputs, **layer.params(layer.device),
                                         state_indices=idx.to(layer.device), pad_slot_id=-1, scale=None)
        want = layer.ref.__dict__[f"{layer.name}_standard_step"](oracle, **_cpu(inputs), **layer.params("cpu"),
                                                                  state_indices=idx)
        assert torch.count_nonzero(got[idx == -1]) == 0
        assert rel_err(got, want) < tol
        assert rel_err(mine, oracle) < 1e-5


def check_variant_cpu(per_channel, HV, H, d_k, d_v, window, refold, variant, drafts=0):
    """A replay ``variant`` against the float64 reference in the interpreter: 3+ windows per
    live slot, staggered flush phases, a padded row; the fp32 checkpoint within 1e-5."""
    layer = Layer(per_channel, HV, H, d_k, d_v, seed=window + 10 * HV + d_v)
    batch = 3 if window < 16 else 2
    slots = batch + 1
    _, worst_c, flushes = drive(layer, batch, slots=slots, steps=3 * window + 4, window=window, refold=refold,
                                drafts=drafts, variant=variant)
    assert flushes >= 3 * (batch - 1), f"expected 3+ windows per live slot, saw {flushes} flushes"
    assert worst_c < 1e-5, f"checkpoint error {worst_c:.2e}"


def check_write_through(per_channel, dims, dtype, batch, after, steps, window, refold=True):
    """``after`` steps of the row-wise replay (slots at staggered phases, ring entries), then
    ``variant="write_through"`` steps against the float64 reference with every live row's
    ``flush_at`` lowered to ``committed + 1`` (a flush at every token): outputs, cursors and
    checkpoints each step (worst checkpoint error returned). Row ``batch // 2`` is padded."""
    layer = Layer(per_channel, *dims, dtype=dtype, seed=17)
    config = ReplaySSMConfig(window=window, flush_stagger=True)
    slots = batch + 2
    state = layer.state(slots, config)
    ref_dev = "cuda" if CUDA and batch > 3 else "cpu"
    oracle = layer.state(slots, config, checkpoint_dtype=F64, device=ref_dev)
    perm = torch.randperm(slots, generator=torch.Generator().manual_seed(3))[:batch].tolist()
    if batch > 1:
        perm[batch // 2] = -1
    idx = torch.tensor(perm, dtype=torch.int32)
    live = idx[idx >= 0].long()
    out_tol = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}[dtype]
    step_ref = layer.ref.__dict__[f"{layer.name}_replay_step"]
    worst_c = 0.0
    for t in range(after + steps):
        inputs = layer.tokens(batch)
        through = t >= after
        if through:
            oracle.flush_at[live.to(ref_dev)] = oracle.committed[live.to(ref_dev)] + 1
        got = decode.delta_replay_step(
            state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
            state.committed, state.flush_at, state.window, **inputs, **layer.params(layer.device),
            state_indices=idx.to(layer.device), pad_slot_id=-1, scale=None, refold=refold,
            variant="write_through" if through else "rowwise")
        want = step_ref(oracle, **_on(inputs, ref_dev), **layer.params(ref_dev), state_indices=idx.to(ref_dev),
                        refold=refold)
        ok = idx != -1
        assert torch.count_nonzero(got[~ok]) == 0
        assert rel_err(got[ok], want[ok.to(ref_dev)]) < out_tol, f"step {t}: output"
        assert torch.equal(state.committed.cpu(), oracle.committed.cpu()), f"step {t}: committed"
        assert torch.equal(state.flush_at.cpu(), oracle.flush_at.cpu()), f"step {t}: flush_at"
        worst_c = max(worst_c, rel_err(state.checkpoint, oracle.checkpoint))
    assert torch.all(state.committed[live] == 0)
    return worst_c


# -- shared by the GPU tests ---------------------------------------------------------------------
GPU_DIMS = [(32, 16, 128, 128), (8, 2, 64, 256), (4, 4, 256, 64)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def dims_id(dims):
    return "x".join(map(str, dims))


# The chunked kernel through the public op (REPLAY_VARIANT switched), a small grid: it is
# checked against the float64 reference like the row-wise kernel above.
CHUNKED_GPU = [
    pytest.param("bf16", ChunkedVariant(), id="bf16-default"),
    pytest.param("fp32", ChunkedVariant(), id="fp32-default"),
    pytest.param("fp32", ChunkedVariant(precision="ieee", stages=2), id="fp32-ieee-stages2"),
    pytest.param("fp32", ChunkedVariant(loads_ahead=False, k_chunk=None), id="fp32-late-loads-tiles"),
    pytest.param("fp32", ChunkedVariant(max_registers=96), id="fp32-max96"),
]


def check_variant_gpu(per_channel, dims, dtype, batch, variant, monkeypatch, refold=True):
    """A replay ``variant`` through the public op (``REPLAY_VARIANT`` switched) against the
    float64 reference: 52 steps at L=16, a padded row; the checkpoint within 1e-5 (fp32)."""
    monkeypatch.setattr(decode, "REPLAY_VARIANT", variant)
    layer = Layer(per_channel, *dims, dtype=DTYPES[dtype], seed=batch + 40)
    _, worst_c, flushes = drive(layer, batch, slots=batch + 2, steps=52, window=16, refold=refold, use_wrapper=True,
                                oracle_device="cuda" if batch > 3 else "cpu")
    assert flushes >= 3 * (batch - (batch > 1))
    assert worst_c < (1e-5 if dtype == "fp32" else 5e-3), f"checkpoint error {worst_c:.2e}"


def checkpoints_after_three_windows(per_channel, variants):
    """Checkpoints of ``variants`` (``refold=False``) after 3 windows at L=16 from the same bf16
    inputs and initial checkpoint, batch 64, every row flushing at the same steps."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    layer = Layer(per_channel, *dims, dtype=torch.bfloat16, seed=3)
    config = ReplaySSMConfig(window=16, flush_stagger=False)
    states = [layer.state(66, config) for _ in variants]
    for st in states:
        st.checkpoint.copy_(torch.randn(st.checkpoint.shape, generator=torch.Generator().manual_seed(4)) * 0.1)
    idx = torch.arange(64, dtype=torch.int32, device="cuda")
    for _ in range(3 * 16 + 2):
        inputs = layer.tokens(64)
        for st, variant in zip(states, variants):
            decode.delta_replay_step(
                st.checkpoint, st.ring_k, st.ring_v, st.ring_beta, st.ring_g, st.ring_u, st.committed, st.flush_at,
                st.window, **inputs, **layer.params("cuda"), state_indices=idx, pad_slot_id=-1, scale=None,
                refold=False, variant=variant)
    for st, variant in zip(states, variants):  # three flushes behind every row
        c = 0
        for _ in range(3 * 16 + 2):
            c = (1 if folds_first(variant, False, 16) else 0) if c + 1 >= 16 else c + 1
        assert int(st.committed[0]) == c, (int(st.committed[0]), c)
    return [st.checkpoint for st in states]


def assert_decode_matches_fla(layer, seq, o_fla, S_fla):
    """Token by token through our ReplaySSM and standard kernels (fp32, batch of ``seq``):
    outputs equal fla's ``o_fla [batch, T, HV, d_v]``, the standard state fla's final
    ``S_fla [batch, HV, d_v, d_k]`` (``state_v_first``)."""
    batch, T = seq["q"].shape[:2]
    state = layer.state(batch, ReplaySSMConfig(window=16))
    plain = torch.zeros_like(S_fla)
    for t in range(T):
        token = {n: x[:, t] for n, x in seq.items()}
        o_rep = decode.delta_replay_step(
            state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
            state.committed, state.flush_at, state.window, **token, **layer.params(DEV),
            state_indices=None, pad_slot_id=-1, scale=None, refold=True)
        o_std = decode.delta_standard_step(plain, **token, **layer.params(DEV), state_indices=None,
                                           pad_slot_id=-1, scale=None)
        torch.testing.assert_close(o_rep, o_fla[:, t], rtol=2e-4, atol=2e-4)
        torch.testing.assert_close(o_std, o_fla[:, t], rtol=2e-4, atol=2e-4)
    torch.testing.assert_close(plain, S_fla, rtol=2e-4, atol=2e-4)
