"""How the stream programs of ``LaunchConfig.ring_in_stream``'s one launch (``lead.py``) learn that
their row's ring work is done, and who moves the row's cursors.

The ring programs come ahead of the stream programs that wait for them in the launch's grid (lower
program ids, so dispatched first). Each ``(row, group)`` ring program, once its lines, ``info`` and
ring entries are stored, publishes one word for the group's stream programs: how many of them will
read it (``consumers``, the low 16 bits), whether the row flushes (bit 16) and its ring length ``c``
(from bit 17). A stream program waits until the count is not zero, takes ``c`` and the flush flag
from the word (one load before its checkpoint load, as the two-launch step's ``info`` load; where
the word is not there yet, the launch's first programs, it loads the tile on the guess that the row
does not flush and waits with it in flight) and counts itself out with a reduction that returns
nothing, so the word's count is zero again once the launch ends: the next step's programs wait for
their own ring programs.

Only the ring programs read the cursors. The row's ring programs count their arrivals after their
reads; the last one moves the cursors (``c + 1``, or ``(0, window)`` after a flush) and re-zeroes
the row's counter.

With a warp-specialised flush launch beside it (``flush_ws.cu`` compiled with ``WAIT_RING``) the
ring programs also count themselves in word 0; the flush blocks wait for all of them, count
themselves in word 1, and the last re-zeroes both.

Two int32 buffers per device, each kept by ``_arrivals.arrival_counters`` (they grow only outside
a CUDA-graph capture, and an outgrown one stays alive for the graphs captured on it); the launches
of one family never run at once. The counters (``ring_sync_counters``) are zero between launches:
``[0]`` ring programs done, ``[1]`` flush blocks that saw it, then one arrival counter per batch
row (from ``ARRIVALS_AT``). The words (``ring_sync_words``), one per ``(row, group)``, have a zero
count between launches but keep the last step's ``c`` and flush bit above it; they have a buffer
of their own because where a word stands depends on the batch and the group count, and a leftover
word read as another shape's arrival counter would never reach its count (the cursors would stop).

On the device every thread of a ring program fences its stores (``fence.acq_rel.gpu``) before the
program's barrier and word, and a waiting program fences after it sees the word: the word is one
thread's store, the lines all threads'. The interpreter runs the programs one after another, in id
order, so it needs neither.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._arrivals import arrival_counters

__all__ = ["ARRIVALS_AT", "MAX_POLLS", "ring_sync_counters", "ring_sync_words"]

ARRIVALS_AT = 2
_ARRIVALS_AT = tl.constexpr(ARRIVALS_AT)  # the same, for the jitted functions
#: Reads of a word (or of word 0, in the flush launch: ``flush_ws.cu``'s ``WAIT_RING_POLLS``) after
#: which a waiting program ends its launch with an error: a wait that would never end (a ring
#: program not started, ``lead.py``) fails the step instead of hanging the GPU.
MAX_POLLS = 1 << 22
_MAX_POLLS = tl.constexpr(MAX_POLLS)
_COUNTERS: dict[torch.device, torch.Tensor] = {}
_WORDS: dict[torch.device, torch.Tensor] = {}


def _grown(cache: dict, what: str, count: int, device: torch.device) -> torch.Tensor:
    def capture_error() -> Exception:
        return RuntimeError(
            f"LaunchConfig.ring_in_stream: the {what} of {device} must grow to {count} inside a CUDA-graph capture; "
            "run one step at this batch size before capturing")
    return arrival_counters(cache, count, device, capture_error)


def ring_sync_counters(batch: int, device: torch.device) -> torch.Tensor:
    """The device's zeroed counters: ``ARRIVALS_AT + batch`` of them at least."""
    return _grown(_COUNTERS, "sync counters", ARRIVALS_AT + batch, device)


def ring_sync_words(batch: int, groups: int, device: torch.device) -> torch.Tensor:
    """The device's words (counts zero): ``batch x groups`` of them at least."""
    return _grown(_WORDS, "sync words", batch * groups, device)


@triton.jit
def _fence_gpu(v):
    """``fence.acq_rel.gpu`` in every thread (an inline-asm no-op on the int ``v``)."""
    tl.inline_asm_elementwise("fence.acq_rel.gpu;\n\tmov.b32 $0, $1;", "=r,r", [v.to(tl.int32)], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def publish_ring(sync_ptr, words_ptr, row, g, live, c, is_flush, consumers, committed_ptr, flush_at_ptr, slot,
                 window, GROUPS: tl.constexpr, COUNT_DONE: tl.constexpr, FENCE: tl.constexpr):
    """After a ring program's stores: for a live row the ``(row, g)`` word for ``consumers``
    stream programs; with ``COUNT_DONE`` (a waiting warp-specialised flush launch) the ring
    programs' count in word 0; then, for a live row, its arrival (the row's last moves the
    cursors)."""
    if FENCE:
        _fence_gpu(g)
    tl.debug_barrier()
    if live:
        # The word first: its readers never read the cursors, so they need not wait for the move.
        word = consumers | (tl.where(is_flush, 1, 0) << 16) | (c << 17)
        tl.atomic_xchg(words_ptr + row * GROUPS + g, word, sem="release")
    if COUNT_DONE:
        tl.atomic_add(sync_ptr, 1, sem="release")
    if live:
        arrived = tl.atomic_add(sync_ptr + _ARRIVALS_AT + row, 1, sem="acq_rel")
        if arrived == GROUPS - 1:
            tl.store(committed_ptr + slot, tl.where(is_flush, 0, c + 1))
            if is_flush:
                tl.store(flush_at_ptr + slot, window)
            tl.store(sync_ptr + _ARRIVALS_AT + row, 0)


@triton.jit
def word_of(words_ptr, row, g, live, GROUPS: tl.constexpr):
    """The ``(row, g)`` word as it is now (0 for a padded row, which has none): its count is 0
    until the ring program has published it."""
    word = 0
    if live:
        word = tl.load(words_ptr + row * GROUPS + g, volatile=True)
    return word


@triton.jit
def _trap(v):
    """``trap``: ends the launch with an error (an inline-asm no-op on the int ``v`` otherwise)."""
    tl.inline_asm_elementwise("trap;\n\tmov.b32 $0, $1;", "=r,r", [v.to(tl.int32)], dtype=tl.int32, is_pure=False,
                              pack=1)


@triton.jit
def await_word(words_ptr, row, g, word, GROUPS: tl.constexpr, FENCE: tl.constexpr):
    """The ``(row, g)`` word once published (``word``: :func:`word_of`'s, of a live row), this
    program counted out of it. On the device a wait past :data:`MAX_POLLS` reads (seconds, where a
    ring program takes microseconds) ends the launch with an error rather than never."""
    at = words_ptr + row * GROUPS + g
    polls = 0
    while (word & 0xFFFF) == 0:
        word = tl.load(at, volatile=True)
        polls += 1
        if FENCE:
            if polls > _MAX_POLLS:
                _trap(polls)
    if FENCE:
        _fence_gpu(word)
    tl.atomic_add(at, -1, sem="relaxed")
    return word


@triton.jit
def word_flushes(word):
    """Whether a published word's row flushes."""
    return ((word >> 16) & 1) != 0


@triton.jit
def word_ring_length(word):
    """A published word's ring length ``c``."""
    return word >> 17
