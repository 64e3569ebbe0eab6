"""Timing helpers shared by the decode benchmarks: CUDA-graph replays with the L2 flushed
between them, and the device-to-device copy bandwidth that results are reported against.

Decode steps are a few microseconds to a few hundred; launching them from Python would time
the launch, so each step is captured once in a CUDA graph and its replays are timed with
device events. Between replays a pass over a buffer larger than L2 evicts the state, so a
small batch is timed from HBM as it is in a model (where the other layers evict it) rather
than from the 60 MB L2 of an H200. The pass zeroes the buffer by default (``L2Flusher``'s
``"write"`` mode, every table so far); that leaves the L2 full of dirty lines, which the timed
replay then writes back among its own traffic. The ``"read"`` mode sums the buffer instead and
leaves clean lines (``benchmarks/probe_l2_flush.py`` compares the two).
"""

from __future__ import annotations

import os
import statistics
from typing import Callable, Sequence

import torch
import triton
import triton.language as tl

__all__ = [
    "L2_FLUSH_MODES",
    "L2Flusher",
    "SameSizeCopy",
    "add_l2_flush_argument",
    "capture_graph",
    "copy_bandwidth_gbps",
    "copy_bandwidths_gbps",
    "device_info",
    "graph_floor_us",
    "graph_timeline",
    "graphs_for",
    "median",
    "per_step_us",
    "time_replays",
    "time_steps",
    "time_warmed",
    "warmed_median",
]


#: How :class:`L2Flusher` evicts the L2: ``"write"`` zeroes a buffer of ``factor`` times its
#: size (the benchmarks' form, as ``triton.testing.do_bench`` flushes), which leaves up to an L2 of
#: dirty lines that the timed replay after it writes back among its own traffic; ``"read"`` sums
#: the buffer, so the lines left behind are clean and cost the next kernel nothing to evict, as a
#: model's weight reads leave them (``benchmarks/probe_l2_flush.py`` times what each costs a read,
#: an in-place update and a copy).
L2_FLUSH_MODES = ("write", "read")
#: The mode an :class:`L2Flusher` takes when none is given (environment ``REPLAYSSM_L2_FLUSH``).
L2_FLUSH_ENV = "REPLAYSSM_L2_FLUSH"


def add_l2_flush_argument(parser) -> None:
    """The benchmarks' ``--l2-flush`` option: the mode of their :class:`L2Flusher`."""
    parser.add_argument("--l2-flush", default=None, choices=list(L2_FLUSH_MODES),
                        help="how the L2 is flushed before each timed replay (default $REPLAYSSM_L2_FLUSH, else "
                             "write): write zeroes a buffer 4x the L2 (every table so far; it leaves dirty lines "
                             "that the timed replay writes back), read sums it (clean lines)")


class L2Flusher:
    """Evicts L2 by a pass over a buffer of ``factor`` times its size (``mode``: one of
    :data:`L2_FLUSH_MODES`; None takes ``$REPLAYSSM_L2_FLUSH``, else ``"write"``)."""

    def __init__(self, device: torch.device | str | None = None, factor: int = 4, mode: str | None = None) -> None:
        mode = mode or os.environ.get(L2_FLUSH_ENV) or "write"
        if mode not in L2_FLUSH_MODES:
            raise ValueError(f"mode: expected one of {L2_FLUSH_MODES} (or ${L2_FLUSH_ENV}), got {mode!r}")
        device = torch.device(device or "cuda")
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20) or (64 << 20)
        self.mode = mode
        self.buffer = torch.zeros(factor * l2 // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        if self.mode == "write":
            self.buffer.zero_()
        else:
            # A reduction reads every line once and writes a few bytes of partial sums.
            self.buffer.sum()


#: Replays of a baseline's graph run and discarded before it is timed: the first baseline timing
#: of a process ran 6-8% slow on the H200 (fla 282.5 / 395.5 us against 261.3 / 379.7 us in the
#: next repeat, GDN / KDA at batch 256).
WARMUP_ROUNDS = 5


def capture_graph(fn: Callable[[], object], warmup: int = 2) -> torch.cuda.CUDAGraph:
    """Capture ``fn`` in a CUDA graph after ``warmup`` eager calls on a side stream.

    The warm-up runs compile and autotune every kernel first: neither may happen inside the
    capture. ``fn`` must be replayable (its state must come back after the sequence timed).
    The graph keeps ``fn`` alive: the tensors only its closure holds (a baseline's own state,
    an output buffer) are what the replays read and write, and once freed the allocator may
    release or reuse their memory (fla's batch-16 state, freed so, made replays fault).
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    graph.replayed_fn = fn
    return graph


def time_replays(
    graphs: Sequence[torch.cuda.CUDAGraph] | torch.cuda.CUDAGraph,
    rounds: int = 20,
    flush: L2Flusher | None = None,
    rotate: bool = False,
) -> list[list[float]]:
    """Replay ``graphs`` in order, ``rounds`` times; returns microseconds ``[rounds][len(graphs)]``.

    Each replay is timed alone between two events, with L2 flushed before it when ``flush`` is
    given; the flush is outside the timed region. ``rotate``: round ``r`` starts at graph
    ``r % len(graphs)`` (results stay indexed as ``graphs``), so that no graph keeps one place in
    the rounds.
    """
    if isinstance(graphs, torch.cuda.CUDAGraph):
        graphs = [graphs]
    n = len(graphs)
    starts = [[torch.cuda.Event(enable_timing=True) for _ in range(n)] for _ in range(rounds)]
    ends = [[torch.cuda.Event(enable_timing=True) for _ in range(n)] for _ in range(rounds)]
    for r in range(rounds):
        for k in range(n):
            i = (k + r) % n if rotate else k
            if flush is not None:
                flush()
            starts[r][i].record()
            graphs[i].replay()
            ends[r][i].record()
    torch.cuda.synchronize()
    return [[1e3 * starts[r][i].elapsed_time(ends[r][i]) for i in range(n)] for r in range(rounds)]


#: Batches up to this one capture each step in :data:`SMALL_BATCH_GRAPHS` graphs (:func:`graphs_for`).
SMALL_BATCH = 32
#: At batch 1 two graphs of the same kernel on the same memory replay up to 6% apart, steadily
#: (an A/A control: NOTES_mamba2.md, twenty-ninth and thirtieth runs), so one graph a side puts
#: that in a ratio. Four graphs a side in rotated rounds read 0.978-1.029x in the same control on
#: another H200; sixteen read 1.000-1.005x at all four batch-1 shapes.
SMALL_BATCH_GRAPHS = 16


def graphs_for(batch: int) -> int:
    """How many graphs a benchmark captures of one step at ``batch`` (several only where a step
    is a few microseconds, and a graph's own steady offset is a visible share of it)."""
    return SMALL_BATCH_GRAPHS if batch <= SMALL_BATCH else 1


def time_steps(
    graphs: Sequence[torch.cuda.CUDAGraph],
    steps: int = 1,
    rounds: int = 20,
    flush: Callable[[], None] | None = None,
) -> list[float]:
    """Microseconds of each of ``steps`` consecutive steps, every step replayed by all ``graphs``
    (captures of the same step) in turn.

    A round replays ``n`` times in a row (``n`` the smallest multiple of ``steps`` with ``n >=
    len(graphs)``): the ``k``-th replay of a round is step ``k % steps``, so a round must bring
    the state back to step 0 (a window of a ReplaySSM step, ``steps=1`` for a step whose replays
    do not move it, or ``flush`` resetting it). Rounds are rotated (:func:`time_replays`), so a
    step's replays go to every graph; its figure is :func:`per_step_us`.
    """
    n = steps * -(-len(graphs) // steps)
    sequence = [graphs[i % len(graphs)] for i in range(n)]
    times = time_replays(sequence, rounds=rounds, flush=flush, rotate=True)
    return per_step_us(times, steps, len(graphs))


def time_warmed(graphs: Sequence[torch.cuda.CUDAGraph], rounds: int, flush: Callable[[], None] | None) -> float:
    """Microseconds of one step replayed by ``graphs`` (:func:`time_steps` with ``steps=1``),
    after :data:`WARMUP_ROUNDS` untimed rounds of the same replays."""
    time_steps(graphs, rounds=WARMUP_ROUNDS, flush=flush)
    return time_steps(graphs, rounds=rounds, flush=flush)[0]


def warmed_median(graph: torch.cuda.CUDAGraph, rounds: int, flush: L2Flusher | None) -> float:
    """Median microseconds of ``graph``'s replays (:func:`time_replays`), after
    :data:`WARMUP_ROUNDS` untimed ones."""
    time_replays(graph, rounds=WARMUP_ROUNDS, flush=flush)
    return median([t[0] for t in time_replays(graph, rounds=rounds, flush=flush)])


def per_step_us(times: Sequence[Sequence[float]], steps: int, graphs: int) -> list[float]:
    """Per step, the mean over graphs of each graph's median, from ``times[r][i]``: round ``r``'s
    replay of entry ``i`` of a :func:`time_steps` sequence (entry ``i`` is graph ``i % graphs``;
    in round ``r`` it ran ``(i - r) % n``-th, i.e. as step ``((i - r) % n) % steps``). With one
    graph this is each step's median over the rounds."""
    n = len(times[0])
    samples: list[dict[int, list[float]]] = [{} for _ in range(steps)]
    for r, row in enumerate(times):
        for i, us in enumerate(row):
            samples[((i - r) % n) % steps].setdefault(i % graphs, []).append(us)
    return [statistics.fmean(median(v) for v in by_graph.values()) for by_graph in samples]


def graph_timeline(graph: torch.cuda.CUDAGraph, replays: int, flush: L2Flusher) -> list[dict]:
    """Where the device time of ``replays`` replays of ``graph`` goes, kernel by kernel.

    Each replay is timed between two events (as :func:`time_replays` does) and traced by the CUDA
    profiler; per replay the result holds ``"us"`` (the event-timed replay) and ``"kernels"``:
    ``(name, start, end)`` in microseconds from the replay's first kernel start. What the events
    see beyond the last kernel's end is the graph's own launch and its dependency edges.
    """
    from torch.profiler import ProfilerActivity, profile

    flush()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flush()
        torch.cuda.synchronize()
    flush_names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for r in range(replays):
            flush()
            starts[r].record()
            graph.replay()
            ends[r].record()
        torch.cuda.synchronize()
    kernels = sorted(((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                      if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda k: k[0])
    runs: list[list[tuple[float, float, str]]] = []
    for start, end, name in kernels:
        if name in flush_names:
            runs.append([])
        elif runs:
            runs[-1].append((start, end, name))
    out = []
    for r, run in enumerate(runs[:replays]):
        t0 = min(k[0] for k in run) if run else 0.0
        out.append({"us": 1e3 * starts[r].elapsed_time(ends[r]),
                    "kernels": [(name, start - t0, end - t0) for start, end, name in run]})
    return out


def graph_floor_us(flush: L2Flusher | None, rounds: int = 20, device: str = "cuda") -> float:
    """The least a step timed by :func:`time_replays` can measure on this machine: the median
    event-timed replay of a graph holding one kernel that writes one word (the graph's own launch
    and one kernel's start and end), with L2 flushed before each replay as the steps' are. Every
    row of the decode tables includes it; inside a model's graph a layer's step does not pay it
    alone."""
    word = torch.zeros(1, dtype=torch.int32, device=device)
    return warmed_median(capture_graph(lambda: _one_word_kernel[(1,)](word)), rounds, flush)


@triton.jit
def _one_word_kernel(ptr):
    tl.store(ptr, tl.load(ptr) + 1)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def copy_bandwidths_gbps(nbytes: int = 2 << 30, rounds: int = 20, device: str = "cuda") -> dict[str, float]:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written, of
    ``torch.Tensor.copy_`` and of a plain Triton streaming copy (16-byte accesses)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    kernels = {"torch_copy": lambda: dst.copy_(src), "triton_copy": lambda: _triton_copy(src, dst)}
    out = {}
    for name, fn in kernels.items():
        graph = capture_graph(fn)
        us = median([t[0] for t in time_replays(graph, rounds=rounds)])
        out[name] = 2 * nbytes / (us * 1e-6) / 1e9
    del src, dst
    return out


class SameSizeCopy:
    """Copy bandwidth at a step's own size: a Triton streaming copy that reads and writes as many
    bytes as the step moves in all (``step_bytes``), its graph replays timed as the steps' are,
    with L2 flushed between them; cached per MiB.

    The ``% copy`` of the tables divides by a 4 GiB copy's bandwidth, which a launch's fixed costs
    (the graph's launch, the first loads' latency, the last wave's tail) barely touch; a step of
    a few hundred MB pays them in full, and so does a copy of its size. Reported beside it, not
    instead: the issues' targets read ``% copy``."""

    def __init__(self, flush: L2Flusher | None, rounds: int = 20, device: str = "cuda") -> None:
        self.flush, self.rounds, self.device = flush, rounds, device
        self.cache: dict[int, float] = {}

    def __call__(self, step_bytes: float) -> float:
        mib = max(1, round(step_bytes / 2 / (1 << 20)))  # half read, half written
        if mib not in self.cache:
            src = torch.empty(mib << 18, dtype=torch.float32, device=self.device).uniform_()
            dst = torch.empty_like(src)
            us = warmed_median(capture_graph(lambda: _triton_copy(src, dst)), self.rounds, self.flush)
            self.cache[mib] = 2 * (mib << 20) / (us * 1e-6) / 1e9
        return self.cache[mib]


def copy_bandwidth_gbps(nbytes: int = 2 << 30, rounds: int = 20, device: str = "cuda") -> float:
    """The copy ceiling a memory-bound decode step is reported against (``% of copy``): the
    faster of the copies of :func:`copy_bandwidths_gbps`."""
    return max(copy_bandwidths_gbps(nbytes, rounds, device).values())


def _triton_copy(src: torch.Tensor, dst: torch.Tensor, block: int = 8192) -> None:
    """``dst.copy_(src)`` as a plain Triton streaming copy (16-byte accesses, 8 warps)."""
    _copy_kernel[(triton.cdiv(src.numel(), block),)](src, dst, src.numel(), BLOCK=block, num_warps=8)


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def device_info() -> dict[str, str]:
    """What a results table must state about the machine."""
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "sms": str(props.multi_processor_count),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "triton": triton.__version__,
    }
