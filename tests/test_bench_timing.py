"""The benchmarks' replay timing over several graphs of one step (``benchmarks/_timing.py``):
which step each replay of a rotated round is, and what figure a step gets when its graphs carry
steady offsets. The device's events are replaced by a clock that the replays advance, so the
real ``time_replays`` / ``time_steps`` loop runs on the CPU."""

from __future__ import annotations

import os
import random
import statistics
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import _timing  # noqa: E402


class Clock:
    """Microseconds since the start; the fake events read it."""

    now = 0.0


class FakeEvent:
    def __init__(self, enable_timing=True):
        self.at = None

    def record(self):
        self.at = Clock.now

    def elapsed_time(self, end):  # milliseconds, as torch.cuda.Event's
        return (end.at - self.at) / 1e3


class Step:
    """A window of ``steps`` positions shared by its graphs: each replay runs the current
    position and moves on, as a ReplaySSM step moves its cursors."""

    def __init__(self, steps):
        self.steps, self.position, self.log = steps, 0, []


class FakeGraph:
    def __init__(self, step, graph_id, offset_us, cost_us, noise=0.0, rng=None):
        self.step, self.graph_id, self.offset, self.cost = step, graph_id, offset_us, cost_us
        self.noise, self.rng = noise, rng

    def replay(self):
        p = self.step.position
        self.step.log.append((self.graph_id, p))
        Clock.now += self.cost[p] + self.offset + (self.rng.gauss(0, self.noise) if self.noise else 0.0)
        self.step.position = (p + 1) % self.step.steps


@pytest.fixture
def fake_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    Clock.now = 0.0


@pytest.mark.parametrize("steps, graphs", [(1, 4), (16, 4), (15, 4), (3, 5), (16, 1), (1, 1)])
def test_time_steps_gives_each_step_its_cost_plus_the_graphs_mean_offset(fake_device, steps, graphs):
    cost = [10.0 + 0.5 * p for p in range(steps)]
    offsets = [0.6 * g - 0.4 * (g % 2) for g in range(graphs)]
    step = Step(steps)
    captured = [FakeGraph(step, g, offsets[g], cost) for g in range(graphs)]
    out = _timing.time_steps(captured, steps, rounds=24)
    assert len(out) == steps
    for p in range(steps):
        assert out[p] == pytest.approx(cost[p] + statistics.fmean(offsets), abs=1e-9)
    # Every round started at position 0 and ended there, and every graph ran every position.
    assert step.position == 0
    assert set(step.log) == {(g, p) for g in range(graphs) for p in range(steps)}


def test_one_graph_is_the_median_over_rounds(fake_device):
    """With one graph a step's figure is its plain median over rounds, as the benchmarks timed
    before several graphs were captured."""
    rng = random.Random(3)
    step = Step(4)
    graph = FakeGraph(step, 0, 0.0, [5.0, 6.0, 7.0, 20.0], noise=0.3, rng=rng)
    out = _timing.time_steps([graph], 4, rounds=31)
    rng2 = random.Random(3)  # the noise again, drawn in replay order: round by round, step by step
    expected = [[] for _ in range(4)]
    for r in range(31):
        for p in range(4):
            expected[p].append([5.0, 6.0, 7.0, 20.0][p] + rng2.gauss(0, 0.3))
    assert out == pytest.approx([statistics.median(e) for e in expected], abs=1e-9)


def test_per_step_us_undoes_the_rotation():
    """``times[r][i]``: entry ``i`` of round ``r`` ran ``(i - r) % n``-th."""
    n, steps, graphs = 8, 4, 2
    cost, offsets = [1.0, 2.0, 3.0, 4.0], [0.0, 1.0]
    times = [[cost[((i - r) % n) % steps] + offsets[i % graphs] for i in range(n)] for r in range(10)]
    assert _timing.per_step_us(times, steps, graphs) == pytest.approx([c + 0.5 for c in cost])
    # Read as if unrotated, the steps would mix.
    assert [statistics.median(t[i] for t in times) for i in range(steps)] != pytest.approx([c + 0.5 for c in cost])


def test_graphs_for_small_batches_only():
    assert _timing.graphs_for(1) == _timing.SMALL_BATCH_GRAPHS > 1
    assert _timing.graphs_for(_timing.SMALL_BATCH) == _timing.SMALL_BATCH_GRAPHS
    assert _timing.graphs_for(_timing.SMALL_BATCH + 1) == 1
    assert _timing.graphs_for(256) == 1
