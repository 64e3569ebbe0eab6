"""The delta-rule layer the GDN / KDA benchmarks time: random gate parameters, token batches,
a ReplaySSM state, the bytes each step must move, and fla's standard step over the same state
bytes (``bench_gdn_decode.py``, ``_delta_variants.py``, ``profile_delta_step.py``)."""

from __future__ import annotations

import dataclasses
import itertools

import torch
from _timing import median

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.gdn import decode
from trtllm_replayssm.ops.gdn.decode_staged import folds_first
from trtllm_replayssm.ops.gdn.state import DeltaRuleReplayState

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class Layer:
    def __init__(self, kind, HV, H, d_k, d_v, dtype, window):
        self.kind, self.HV, self.H, self.d_k, self.d_v, self.dtype, self.window = kind, HV, H, d_k, d_v, dtype, window
        self.per_channel = kind == "kda"
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.A_log = torch.empty(HV, device="cuda").uniform_(-1.0, 0.5, generator=gen)
        self.dt_bias = 0.5 * torch.randn(HV * d_k if self.per_channel else HV, device="cuda", generator=gen)
        self.gen = gen

    def tokens(self, batch):
        def rnd(*shape):
            return torch.randn(batch, *shape, device="cuda", generator=self.gen).to(self.dtype)

        a = rnd(self.HV, self.d_k) if self.per_channel else rnd(self.HV)
        return {"q": rnd(self.H, self.d_k), "k": rnd(self.H, self.d_k), "v": rnd(self.HV, self.d_v), "a": a,
                "b": rnd(self.HV)}

    def state(self, slots):
        st = DeltaRuleReplayState.allocate(
            slots, self.HV, self.H, self.d_k, self.d_v, ReplaySSMConfig(window=self.window),
            per_channel_decay=self.per_channel, activation_dtype=self.dtype, device="cuda")
        st.checkpoint.normal_(0, 0.05, generator=self.gen)
        for name in ("ring_k", "ring_v", "ring_u"):
            getattr(st, name).normal_(0, 0.1, generator=self.gen)
        st.ring_beta.uniform_(0, 1, generator=self.gen)
        st.ring_g.uniform_(-0.5, 0, generator=self.gen)
        return st

    # -- bytes each step must move ------------------------------------------------------------
    def state_bytes(self, batch):
        return batch * self.HV * self.d_v * self.d_k * 4

    def token_bytes(self, batch):
        e = torch.finfo(self.dtype).bits // 8
        a = self.HV * (self.d_k if self.per_channel else 1)
        return batch * e * (2 * self.H * self.d_k + 2 * self.HV * self.d_v + a + self.HV)

    def ring_read_bytes(self, batch, c, fold_u):
        """Non-flush reads u, k, g of c entries; a refolding flush reads k, v, beta, g instead."""
        e = torch.finfo(self.dtype).bits // 8
        g = self.HV * (self.d_k if self.per_channel else 1) * 4
        k = self.H * self.d_k * e
        other = self.HV * self.d_v * 4 if fold_u else self.HV * (self.d_v * e + 4)
        return batch * c * (g + k + other)

    def step_bytes(self, batch, c, flush, fold_u=True):
        st = self.state_bytes(batch) * (2 if flush else 1)
        return st + self.token_bytes(batch) + self.ring_read_bytes(batch, c, fold_u or not flush)


class Cursors:
    """Called before each replay (outside the timed region): flush L2, set the slots' phases."""

    def __init__(self, state, phases, flush):
        self.state, self.flush = state, flush
        self.phases = itertools.cycle(phases)

    def __call__(self):
        self.state.committed.copy_(next(self.phases))
        self.state.flush_at.fill_(self.state.window)
        self.flush()


def steady_start(state, window: int) -> None:
    """Every slot at the start of its window with the cache's staggered placement (slot ``i``
    first flushes after ``window - i % window`` tokens, ``ReplaySSMConfig.first_flush_at``): the
    start of the steady-state staggered timing, whose replays then advance the cursors themselves
    (``bench_mamba2_decode.py``'s mixed row does the same)."""
    cfg = ReplaySSMConfig(window=window)
    slots = state.committed.shape[0]
    state.committed.zero_()
    state.flush_at.copy_(torch.tensor([cfg.first_flush_at(s) for s in range(slots)], dtype=torch.int32))


class WritePos:
    """Before each replay of the paper's GDN kernel (outside the timed region): every row's
    ``write_pos`` set to ``value`` (one ring length for all, or a tensor per row), then L2
    flushed; :class:`AdvanceWritePos` moves them instead, as consecutive steps do."""

    def __init__(self, write_pos, value, flush):
        self.write_pos, self.value, self.flush = write_pos, value, flush

    def __call__(self):
        self.write_pos.copy_(self.value)
        self.flush()


class AdvanceWritePos:
    """Before each replay of a kernel whose caller keeps the ring positions (the paper's GDN
    kernel: ``write_pos`` per row, a flush at ``window - 1``): every row one token on, as its
    caller would between steps, then L2 flushed. Outside the timed region."""

    def __init__(self, write_pos, window, flush):
        self.write_pos, self.window, self.flush = write_pos, window, flush

    def __call__(self):
        self.write_pos.add_(1).remainder_(self.window)
        self.flush()


def steady_mean(times) -> float:
    """The mean over a window's positions of each position's median (``times``: ``[rounds][n]``
    microseconds of ``n`` consecutive replays per round)."""
    n = len(times[0])
    return sum(median([t[i] for t in times]) for i in range(n)) / n


def window_cycle(variant, refold: bool, L: int) -> list[int]:
    """The ring lengths a slot steps through per fold of ``variant`` called with ``refold``, the
    last one flushing: ``0..L-1``, or ``1..L-1`` for a fold-first flush (the token that would fill
    the window starts the next one)."""
    return list(range(1 if folds_first(variant, refold, L) else 0, L))


def standard_fn(layer, ssm, x, idx, block_v=None, num_warps=None):
    """One in-project standard step over ``ssm`` ``[slots, HV, d_v, d_k]`` (its launch's tiles by
    default, or ``block_v`` rows with ``num_warps`` warps)."""
    return lambda: decode.delta_standard_step(ssm, **x, A_log=layer.A_log, dt_bias=layer.dt_bias, state_indices=idx,
                                              pad_slot_id=-1, scale=None, block_v=block_v, num_warps=num_warps)


def replay_fn(layer, state, x, idx, refold=True, block_v=None, variant=None):
    """One replay step of the ops' default launch (``variant=None``), or of ``variant``."""
    return lambda: decode.delta_replay_step(
        state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
        state.committed, state.flush_at, state.window, **x, A_log=layer.A_log, dt_bias=layer.dt_bias,
        state_indices=idx, pad_slot_id=-1, scale=None, refold=refold, block_v=block_v, variant=variant)


def default_with(layer, batch: int, refold: bool, fields: dict, capacity: int | None = None, kind=None):
    """The ops' default launch at ``batch`` (``decode.default_variant`` for a ring of ``capacity``
    entries, the layer's window by default) with ``fields`` replaced, or ``None`` where that
    default is not a dataclass with those fields (the write-through step, the row-wise kernel,
    another launch kind) or not a ``kind`` instance when ``kind`` is given."""
    variant = decode.default_variant(batch, layer.per_channel, refold, layer.d_v, capacity or layer.window)
    if kind is not None and not isinstance(variant, kind):
        return None
    if not dataclasses.is_dataclass(variant) or not set(fields) <= {f.name for f in dataclasses.fields(variant)}:
        return None
    return dataclasses.replace(variant, **fields)


def staged_with(layer, batch: int, fields: dict):
    """The staged step the ops would launch at ``batch`` (refold=False) if the one-launch step
    did not serve there, with ``fields`` replaced: :func:`default_with` for a ring wider than 16
    entries, which the one-launch step does not take (``None`` where that default is not a staged
    step, e.g. the write-through step at small batches)."""
    from trtllm_replayssm.ops.gdn.decode_staged import StagedVariant

    return default_with(layer, batch, False, fields, capacity=layer.window + 1, kind=StagedVariant)


def fla_fn(layer, batch, x):
    """fla's standard decode step over the same state bytes (its own buffers, same layout)."""
    h0 = torch.randn(batch, layer.HV, layer.d_v, layer.d_k, device="cuda") * 0.05
    seq = {n: t[:, None].contiguous() for n, t in x.items()}
    if layer.per_channel:
        from fla.ops.kda import fused_recurrent_kda

        return lambda: fused_recurrent_kda(
            seq["q"], seq["k"], seq["v"], seq["a"], seq["b"], A_log=layer.A_log, dt_bias=layer.dt_bias,
            initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
            use_beta_sigmoid_in_kernel=True, state_v_first=True)
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    return lambda: fused_recurrent_gated_delta_rule(
        seq["q"], seq["k"], seq["v"], g=seq["a"], beta=seq["b"], A_log=layer.A_log, dt_bias=layer.dt_bias,
        use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
        initial_state=h0, output_final_state=True, state_v_first=True)

