"""The steady-state staggered timing of the delta-rule benchmarks (``benchmarks/_delta_layer.py``):
the cache's staggered start, the paper kernel's ring positions advanced between replays, and
the mean of per-position medians. The replays themselves need a GPU."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from _delta_layer import AdvanceWritePos, WritePos, steady_mean, steady_start  # noqa: E402

from trtllm_replayssm.config import ReplaySSMConfig  # noqa: E402
from trtllm_replayssm.ops.gdn import reference as gdn_ref  # noqa: E402
from trtllm_replayssm.ops.gdn.state import DeltaRuleReplayState  # noqa: E402


def test_steady_start_is_the_caches_staggered_placement():
    """Every ring empty, slot ``i`` flushing after ``window - i % window`` tokens: over a window
    of steps each slot flushes once, 1/window of the slots per step."""
    state = DeltaRuleReplayState.allocate(20, 2, 1, 8, 8, ReplaySSMConfig(window=4), activation_dtype=torch.float32,
                                          device="cpu")
    state.committed.fill_(3)
    steady_start(state, 4)
    assert state.committed.tolist() == [0] * 20
    assert state.flush_at.tolist() == [4 - s % 4 for s in range(20)]
    slots = torch.arange(20, dtype=torch.int32)
    flushing = []
    for _ in range(4):
        due = gdn_ref.slots_due_to_flush(state, slots)
        flushing.append(sorted(due.tolist()))
        state.committed += 1
        state.committed[due] = 0
        state.flush_at[due] = 4
    assert sorted(sum(flushing, [])) == list(range(20))
    assert [len(f) for f in flushing] == [5, 5, 5, 5]


def test_paper_ring_positions_advance_and_wrap():
    calls = []
    write_pos = torch.tensor([0, 14, 15, 7], dtype=torch.int32)
    advance = AdvanceWritePos(write_pos, 16, lambda: calls.append(1))
    advance()
    assert write_pos.tolist() == [1, 15, 0, 8] and calls == [1]
    for _ in range(15):
        advance()
    assert write_pos.tolist() == [0, 14, 15, 7] and len(calls) == 16


def test_paper_ring_positions_set_per_replay():
    """One offset: every replay starts from the same positions (a ring length, or one per row)."""
    calls = []
    write_pos = torch.tensor([3, 9, 0], dtype=torch.int32)
    set_all = WritePos(write_pos, 15, lambda: calls.append(1))
    set_all()
    set_all()
    assert write_pos.tolist() == [15, 15, 15] and calls == [1, 1]
    WritePos(write_pos, torch.tensor([0, 5, 10], dtype=torch.int32), lambda: calls.append(1))()
    assert write_pos.tolist() == [0, 5, 10] and len(calls) == 3


def test_steady_mean_is_the_mean_of_position_medians():
    times = [[1.0, 10.0, 5.0], [3.0, 30.0, 5.0], [2.0, 20.0, 8.0]]
    assert steady_mean(times) == (2.0 + 20.0 + 5.0) / 3
