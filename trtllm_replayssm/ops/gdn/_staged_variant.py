"""Launch choices of the staged delta-rule step (``decode_staged.py``): :class:`StagedVariant`
and the tile, warp and scratch sizes each launch takes from it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import triton

from .._flush_heads import flush_heads_per_program
from .._flush_list import LIST_MAX_BATCH


_FOLDS = ("refold", "wy", "u")
_DOT_PRECISIONS = ("tf32x3", "tf32x2", "bf16x3")


@dataclass(frozen=True)
class StagedVariant:
    """Launch choices of the two-launch step; ``None`` fields take :func:`staged_config`'s.

    ``block_v``: rows of ``S`` per streaming program; ``num_warps`` / ``max_registers``: the
    streaming kernel's warps and ptxas ``.maxnreg``; ``ring_warps`` / ``ring_max_registers``: the
    ring kernel's (one-warp ring programs hold ``[CAP, d_k]`` fp32 tiles: 80 registers for GDN,
    whose tile dies after the key head's products, 96 for KDA with ``ring_halves``, so 25 or 21
    of them per SM and a batch-256 launch in 1.2-3 waves; the cap trades spills for fewer
    waves). ``flush_max_registers``: the flush launch's ``.maxnreg``.
    ``fold``: how a flush folds the window when ``refold=True`` (``refold=False`` always folds
    the cached ``u``): "refold", ``c + 1`` dependent exact updates of the tile from the raw ring;
    "wy", the same refold in the chunked form (``decode_chunked.py``): launch 1 solves the
    window's ``(I + M)^{-1}`` per (row, value head) (fp32 FMA, no tensor cores), the tile then
    takes ``c + 1`` independent reductions ``S_c Kg_j`` and ``c + 1`` rank-1 updates with no
    reduction between them; or "u", fold the cached ``u`` even when ``refold=True`` (exact only
    while the outputs read the recurrence checkpoint itself, as this state's do; it measures
    the refold's cost). ``stages``: software-pipelining depth of the flush's loops over the
    window (``tl.range(num_stages=...)``). ``unroll``: "wy" only, the two loops unrolled over
    the ring's capacity (entries past ``c`` masked) so that the independent reductions of the
    window's entries can overlap.

    ``flush_launch``: flush rows go to a third launch, ``_flush_kernel`` (one program per row,
    ``flush_heads`` value heads and ``1 / flush_split`` of their ``d_v`` rows, in
    ``flush_block_v``-row tiles with ``flush_warps`` warps; defaults: whole heads, the stream
    launch's ``BV`` and warps); the stream launch then serves only non-flush rows and compiles
    without any fold. The refold of a tile is a chain of ``c + 1`` dependent updates, so the
    tiles a program walks add up in latency: ``flush_split`` spreads a head over programs (capped
    at one tile each). ``flush_heads`` that does not divide the value heads takes its largest
    divisor below it (``ops/_flush_heads.py``, as Mamba-2's flush launch).
    ``raw_qk`` (Gated DeltaNet; KDA's decay is a ``d_k``-vector per value head, so it keeps the
    fp32 vectors): the stream programs read the key head's raw ``q`` (activation dtype) and the
    ring's ``k`` at ``c`` instead of two fp32 ``[d_k]`` vectors per value head, and scale them by
    scalars of the coefficient line.

    ``flush_dot``: a flush that folds the cached ``u`` (``fold="u"`` or ``refold=False``) does it as
    one tf32x3 product per tile, ``S Diag(e^{G_c}) + U^T Kd``, instead of ``c + 1`` dependent
    rank-1 updates (the tile is then at least 16 rows); ``flush_precision="tf32x2"``: that
    product in two TF32 passes instead of three where the ring's keys are 16-bit and the decay
    is a scalar (Gated DeltaNet): the decay moves onto ``U`` and the raw keys are exact in TF32
    (``ops/_tf32.py``); elsewhere tf32x3; ``"bf16x3"``: three bf16 passes where the keys are bf16,
    "tf32x2"'s choice elsewhere. ``flush_persistent``: the flush launch as
    that many programs per SM walking a list of the flush rows' tiles (numbered from the ring
    launch's flags) instead of a program per (row, ``flush_heads``, ``flush_split``); non-flush
    steps then cost one wave of empty programs instead of ``batch x heads`` early exits.
    ``flush_item_tiles``: a list item is that many
    consecutive ``flush_block_v``-row tiles of one value head (capped at the head), the dot
    fold's key side formed once for them: KDA's decayed keys ``Kd`` ``[CAP, d_k]`` (an exponent
    per element) and their TF32 split, Gated DeltaNet's raw keys and decays. ``flush_stream``: the flush launch is issued first
    on a high-priority side stream and runs under the stream launch (disjoint rows;
    ``ops/_side_stream.py``), joined before returning.

    ``ring_split``: programs of the ring launch per (row, key head), each doing the coefficient
    work of ``G / ring_split`` of its ``G`` value heads (capped at one each: ``gcd(ring_split,
    G)``). That work is a chain of dependent latency per value head, so shorter programs finish
    sooner; each reads the key head's ring ``k`` (an L2 hit for all but the first), the first
    appends the token's ``k``. Per value head the arithmetic is unchanged (bit-for-bit). Key heads
    that serve one value head each (KDA) have nothing to spread. ``ring_prefetch``: the ring
    launch loads every ring entry's ``k`` and log-decay together with the cursors rather than
    after them (one memory latency less per program, up to twice those bytes; entries from
    ``c`` on are zeroed in registers), the per-channel decays of KDA being the largest.
    ``ring_halves`` (KDA; no effect on Gated DeltaNet's scalar decays or with ``fold="wy"``):
    the ring launch forms the decayed keys over two ``[CAP / 2, d_k]`` halves of the ring, the
    later one only when the window reaches it, instead of one ``[CAP, d_k]`` tile (fewer
    registers per program, no exponentials for empty entries; the same terms to fp32 rounding).

    ``refold_prefetch`` (a refolding flush, ``fold="refold"``): 1 loads the next ring entry's
    ``k, v, g, beta`` before the current update runs, so that their latency (L2 hits) overlaps an
    update instead of opening the next one (Nsight Compute, KDA refolding flush on an H200: 29% of
    the stall samples on the loop's first use of ``g_j``); the last prefetch is the token's entry,
    whose update follows the loop; 0 loads each entry at the start of its update. It holds one
    more entry in registers (sm_90, 16-row one-warp tiles: 168 uncapped, 128 without spills under
    ``flush_max_registers=128``, which the defaults set so that 16 programs fit an SM); under that
    cap ptxas issues the prefetch late in the update, where registers free up. (Only the next
    entry's ``k`` and ``g`` ahead, with ``v`` and ``beta`` at each update's start, timed within
    noise of 1 on an H200 and was removed: NOTES_delta.md, twelfth run.)

    ``fold_first`` (a flush that folds the cached ``u`` as one product, ``flush_dot``): the row
    whose token would fill the window folds the ring's ``c`` entries without the token, stores
    that checkpoint and starts the next window with the token as its entry 0 (its ``u`` and
    output from the folded tile, as a non-flush step at ``c = 0``), where the default folds the
    token too. The stored tile then does not wait for the token's ``u``, whose ``S k_t`` row
    reduction sits between the tile's load and its fold otherwise (H200, GDN dims, the fold
    alone: 455 -> 349 us for 16-row one-warp tiles, ``bench_fold_ceiling.py``). The state is the
    same recurrence, flushed one token earlier (the reference's ``replay_flush`` then
    ``replay_step``): after a flush the ring holds one entry, so in steady state a window folds
    ``L - 1`` entries every ``L - 1`` tokens. The ring launch moves the ring's entry-0 key and
    decay into the scratch line before it writes the token there. Ignored for a refold and for
    ``window < 2``.

    ``flush_reread`` (Gated DeltaNet's scalar decay, with ``flush_dot``, not ``fold_first``): the
    fold reads the flush tile again, in chunks of that many ``d_k`` columns (L2 hits: the tile
    was read for ``u_t`` just before), instead of holding it in registers across the
    reduction ``u_t`` needs; ignored for KDA and fold-first.

    ``pdl``: the stream launch is a programmatic dependent launch of the ring launch
    (``ops/_pdl.py``; sm_90+ compiled kernels, otherwise ignored): its programs are dispatched
    while the ring launch finishes and wait for it before their first load.
    ``read_stages`` (with ``flush_launch``: the stream launch then reads and never folds): 0
    loads a stream program's ``[block_v, d_k]`` tile whole; ``n >= 1`` walks it in 32-column
    chunks through an ``n``-stage software pipeline after the ring's loads are issued, the
    products summed in-thread (the one-launch step's chunk loop, ``decode_fused.py``), so that
    taller tiles (64 rows) keep their loads in flight without holding the tile in registers.
    KDA's cached-``u`` default from ``launch.KDA_READ_STAGES_FROM`` (32 rows, 2 stages, one warp;
    on an H200 two warps, 64 rows and 3 stages were slower, and GDN's staged step at batch 64
    slower with it).

    ``ring_fast_exp`` (KDA): the ring launch's decayed keys take their exponentials as
    ``ex2.approx.ftz.f32`` (``ops/_fast_exp.py``: two instructions instead of five; ``e^x`` below
    ``2^-126`` returns 0); off the GPU ``tl.exp``. ``ring_token_first``: a ring program loads the
    token's ``q``, ``k`` and gate inputs beside the slot and normalises them while the cursor
    load is in flight, so that its chain before the ring's loads is the slot and the cursor
    (the same arithmetic, bit for bit).
    """

    block_v: int | None = None
    num_warps: int | None = None
    ring_warps: int | None = None
    max_registers: int | None = None
    ring_max_registers: int | None = None
    flush_max_registers: int | None = None
    fold: str = "refold"
    stages: int = 1
    unroll: bool = False
    flush_launch: bool = False
    flush_heads: int = 1
    flush_split: int = 1
    flush_block_v: int | None = None
    flush_warps: int | None = None
    raw_qk: bool = False
    ring_split: int = 1
    ring_prefetch: bool = False
    ring_halves: bool = False
    flush_dot: bool = False
    flush_persistent: int = 0
    flush_stream: bool = False
    flush_precision: str = "tf32x3"
    flush_item_tiles: int = 1
    refold_prefetch: int = 0
    fold_first: bool = False
    flush_reread: int = 0
    pdl: bool = False
    read_stages: int = 0
    ring_fast_exp: bool = False
    ring_token_first: bool = False

    def __post_init__(self):
        if self.flush_precision not in _DOT_PRECISIONS:
            raise ValueError(f"flush_precision: expected one of {_DOT_PRECISIONS}, got {self.flush_precision!r}")
        if self.flush_precision != "tf32x3" and not self.flush_dot:
            raise ValueError("flush_precision: only with flush_dot=True (the one-product fold)")
        if self.fold not in _FOLDS:
            raise ValueError(f"fold: expected one of {_FOLDS}, got {self.fold!r}")
        for name in ("block_v", "flush_block_v"):
            bv = getattr(self, name)
            if bv is not None and (bv < 1 or bv & (bv - 1)):
                raise ValueError(f"{name}: expected None or a power of two, got {bv}")
        if self.ring_split < 1 or self.ring_split & (self.ring_split - 1):
            raise ValueError(f"ring_split: expected a power of two, got {self.ring_split}")
        if self.flush_heads < 1:
            raise ValueError(f"flush_heads: expected >= 1, got {self.flush_heads}")
        if self.flush_split < 1 or self.flush_split & (self.flush_split - 1):
            raise ValueError(f"flush_split: expected a power of two, got {self.flush_split}")
        if not self.flush_launch and (self.flush_heads != 1 or self.flush_split != 1 or self.flush_block_v
                                      or self.flush_warps or self.flush_dot or self.flush_persistent
                                      or self.flush_stream):
            raise ValueError("flush_heads, flush_split, flush_block_v, flush_warps, flush_dot, flush_persistent, "
                             "flush_stream: only with flush_launch=True")
        if self.flush_item_tiles < 1 or self.flush_item_tiles & (self.flush_item_tiles - 1):
            raise ValueError(f"flush_item_tiles: expected a power of two, got {self.flush_item_tiles}")
        if self.flush_item_tiles != 1 and not (self.flush_dot and self.flush_persistent):
            raise ValueError("flush_item_tiles: only with flush_dot=True and flush_persistent > 0 (the list launch's "
                             "one-product fold)")
        if self.flush_reread and (self.flush_reread < 16 or self.flush_reread & (self.flush_reread - 1)
                                  or not self.flush_dot):
            raise ValueError(f"flush_reread: expected 0, or a power of two >= 16 with flush_dot=True, got "
                             f"{self.flush_reread!r}")
        if self.fold_first and not self.flush_dot:
            raise ValueError("fold_first: only with flush_dot=True (the one-product fold of the cached u)")
        if self.refold_prefetch not in (0, 1):
            raise ValueError(f"refold_prefetch: expected 0 or 1, got {self.refold_prefetch!r}")
        if self.ring_halves and self.ring_prefetch:
            raise ValueError("ring_halves: not with ring_prefetch (which loads every ring entry at once)")
        if self.flush_persistent < 0:
            raise ValueError(f"flush_persistent: expected >= 0, got {self.flush_persistent}")
        if self.flush_dot and self.flush_block_v is not None and self.flush_block_v < 16:
            raise ValueError(f"flush_block_v: flush_dot (tl.dot) needs >= 16, got {self.flush_block_v}")
        if self.unroll and self.fold != "wy":
            raise ValueError(f"unroll: only with fold='wy', got fold={self.fold!r}")
        if self.stages < 1:
            raise ValueError(f"stages: expected >= 1, got {self.stages}")
        for name in ("ring_fast_exp", "ring_token_first"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected a bool, got {getattr(self, name)!r}")
        if not isinstance(self.read_stages, int) or self.read_stages < 0:
            raise ValueError(f"read_stages: expected an int >= 0, got {self.read_stages!r}")
        if self.read_stages and not self.flush_launch:
            raise ValueError("read_stages: only with flush_launch=True (the stream launch then folds nothing)")
        for name in ("max_registers", "ring_max_registers", "flush_max_registers"):
            r = getattr(self, name)
            if r is not None and not 24 <= r <= 255:
                raise ValueError(f"{name}: expected None or 24..255 (ptxas .maxnreg), got {r}")
        if self.flush_max_registers and not self.flush_launch:
            raise ValueError("flush_max_registers: only with flush_launch=True")
        for name in ("num_warps", "ring_warps", "flush_warps"):
            w = getattr(self, name)
            if w is not None and w not in (1, 2, 4, 8, 16):
                raise ValueError(f"{name}: expected None or one of 1, 2, 4, 8, 16, got {w}")


def ring_split(v_heads: int, k_heads: int, variant: StagedVariant) -> int:
    """Programs of the ring launch per (row, key head): ``ring_split`` capped to divide the
    value heads each key head serves."""
    return math.gcd(variant.ring_split, v_heads // k_heads)


def staged_config(rows: int, v_heads: int, d_k: int, d_v: int, variant: StagedVariant) -> tuple[int, int, int]:
    """``(BV, num_warps, ring_warps)``: unless ``variant`` names them, the streaming kernel's
    tiles are 8-32 rows of ``S`` by the number of (row, head) pairs (the standard step's tiles
    before it moved to one warp; the defaults of ``decode.default_variant`` name theirs); the
    ring kernel's tile is ``[CAP, d_k]``."""
    heads = rows * v_heads
    bv = 32 if heads >= 2048 else 16 if heads >= 256 else 8
    bv = min(variant.block_v or (min(bv, 16) if d_k >= 256 else bv), d_v)
    warps = variant.num_warps or (4 if bv * d_k >= 4096 else 2)
    return bv, warps, variant.ring_warps or (4 if d_k >= 128 else 2)


def uses_flush_dot(variant: StagedVariant, refold: bool) -> bool:
    """Whether a flush of ``variant`` folds the cached ``u`` as one product (``flush_dot``, and
    the flush folds the cached ``u``: ``refold=False`` or ``fold="u"``)."""
    return variant.flush_launch and variant.flush_dot and not (refold and variant.fold != "u")


def folds_first(variant, refold: bool, window: int) -> bool:
    """Whether a step of ``variant`` (any ``variant`` argument of ``delta_replay_step``) called
    with ``refold`` flushes fold-first (``StagedVariant.fold_first``): its steady-state cycle is
    then ``window - 1`` tokens, ring lengths ``1 .. window - 1`` (the last one flushes)."""
    return (isinstance(variant, StagedVariant) and variant.fold_first and uses_flush_dot(variant, refold)
            and window >= 2)


def flush_config(rows: int, v_heads: int, d_k: int, d_v: int, variant: StagedVariant,
                 dot: bool = False) -> tuple[int, int, int, int]:
    """``(BV, num_warps, heads per program, programs per head)`` of the flush launch
    (``flush_launch=True``); ``dot`` (:func:`uses_flush_dot`): ``BV`` at least 16 rows, the
    ``tl.dot`` minimum, before a head's rows are split over programs."""
    bv, warps, _ = staged_config(rows, v_heads, d_k, d_v, variant)
    bv = min(variant.flush_block_v or bv, d_v)
    if dot:
        bv = max(bv, 16)
    heads = flush_heads_per_program(v_heads, variant.flush_heads)
    return bv, variant.flush_warps or warps, heads, min(variant.flush_split, d_v // bv)


def item_tiles(d_v: int, block_v: int, variant: StagedVariant, dot: bool) -> int:
    """``BV``-row tiles per list-flush item: ``flush_item_tiles`` capped at the head's ``d_v``
    (1 unless the flush folds by one product)."""
    return min(variant.flush_item_tiles, d_v // block_v) if dot else 1


def scratch_width(d_k: int, capacity: int, fold: str, dot: bool = False,
                  fold_first: bool = False) -> tuple[int, int]:
    """``(BC, W)``: the ring's padded capacity and the fp32 scratch line per (row, value head): 2
    vectors ``[d_k]``, 2 coefficient vectors ``[BC]``, ``beta``, ``k . q`` and the ``raw_qk``
    scalars, and for "wy" the window's ``[BC, BC]`` inverse; ``fold_first``: the ring's entry-0
    key and (per-channel) log-decay, ``[d_k]`` each, after the scalars."""
    wy = fold == "wy"
    # tl.dot (the window's k_i . k_j in launch 1, the flush_dot fold) takes 16-row tiles.
    bc = max(triton.next_power_of_2(capacity), 16 if wy or dot else 2)
    return bc, 2 * d_k + 2 * bc + 4 + (bc * bc if wy else 0) + (2 * d_k if fold_first else 0)


@dataclass(frozen=True)
class StagedLaunch:
    """What one staged step launches: tiles, warps and each kernel's constexprs. The launcher
    (``decode_staged.delta_replay_staged_step``) and ``benchmarks/registers_gdn_staged.py`` build
    their launches from it, so that what is compiled for the register report is what runs."""

    block_v: int
    warps: int
    ring_warps: int
    ring_programs: int  # per (row, key head)
    width: int  # fp32 scratch line per (row, value head)
    ring: dict  # ``_ring_kernel``
    common: dict  # shared by ``_stream_kernel`` and the flush kernels
    stream: dict  # ``_stream_kernel``'s own
    flush: dict  # the flush kernel's own (empty without ``flush_launch``)
    flush_list: bool  # ``_flush_list_kernel`` rather than ``_flush_kernel``
    flush_block_v: int
    flush_warps: int
    flush_heads: int
    flush_split: int
    flush_tiles: int


def staged_launch(variant: StagedVariant, rows: int, v_heads: int, k_heads: int, d_k: int, d_v: int, capacity: int,
                  *, per_channel: bool, refold: bool, has_bias: bool, has_indices: bool, pdl: bool,
                  window: int | None = None) -> StagedLaunch:
    """The :class:`StagedLaunch` of ``variant`` for ``rows`` batch rows called with ``refold``;
    ``pdl``: the programmatic dependent launch is on (``variant.pdl`` on a device that has it);
    ``window``: the state's (``None``: the ring's capacity)."""
    do_refold = refold and variant.fold != "u"
    dot = uses_flush_dot(variant, refold)
    wy = variant.fold == "wy" and do_refold
    raw_qk = variant.raw_qk and not per_channel
    fold_first = folds_first(variant, refold, capacity if window is None else window)
    bc, width = scratch_width(d_k, capacity, variant.fold, dot, fold_first)
    bv, warps, ring_warps = staged_config(rows, v_heads, d_k, d_v, variant)
    programs = ring_split(v_heads, k_heads, variant)
    ring = dict(HV=v_heads, H=k_heads, K=d_k, CAP=capacity, BC=bc, W=width, PER_CHANNEL=per_channel, REFOLD=do_refold,
                WY=wy, RAW_QK=raw_qk, HAS_BIAS=has_bias, HAS_INDICES=has_indices, SPLIT=programs,
                RING_PREFETCH=variant.ring_prefetch, PDL=pdl, RING_HALVES=variant.ring_halves and per_channel and not wy,
                FOLD_FIRST=fold_first, FAST_EXP=variant.ring_fast_exp and per_channel,
                TOKEN_FIRST=variant.ring_token_first)
    common = dict(HV=v_heads, H=k_heads, K=d_k, V=d_v, CAP=capacity, BC=bc, W=width, PER_CHANNEL=per_channel,
                  REFOLD=do_refold, WY=wy, RAW_QK=raw_qk, STAGES=variant.stages, UNROLL=variant.unroll,
                  HAS_INDICES=has_indices, FOLD_FIRST=fold_first)
    flush_bv, flush_warps, heads, split = flush_config(rows, v_heads, d_k, d_v, variant, dot)
    tiles = item_tiles(d_v, flush_bv, variant, dot)
    flush_list = bool(variant.flush_launch and variant.flush_persistent and rows <= LIST_MAX_BATCH)
    own = dict(BV=flush_bv, DOT=dot, FOLD_PRECISION=variant.flush_precision if dot else "tf32x3",
               PREFETCH=variant.refold_prefetch if do_refold and not wy else 0,
               REREAD=min(variant.flush_reread, d_k) if dot and not per_channel and not fold_first else 0)
    if not variant.flush_launch:
        flush = {}
    elif flush_list:
        flush = dict(own, BLOCK_B=triton.next_power_of_2(rows), TILES=tiles)
    else:
        flush = dict(own, HEADS_PER_PROGRAM=heads, SPLIT=split)
    return StagedLaunch(
        block_v=bv, warps=warps, ring_warps=ring_warps, ring_programs=programs, width=width, ring=ring, common=common,
        stream=dict(BV=bv, FLUSH_HERE=not variant.flush_launch, PDL=pdl, READ_STAGES=variant.read_stages,
                    KC=min(32, d_k)),
        flush=flush, flush_list=flush_list,
        flush_block_v=flush_bv, flush_warps=flush_warps, flush_heads=heads, flush_split=split, flush_tiles=tiles)
