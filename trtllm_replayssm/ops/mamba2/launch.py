"""Launch choices of the Mamba-2 decode kernels: :class:`LaunchConfig` (tiles, warps, the
replay kernel and its flush launch) and :func:`launch_config`, the measured default per
``(head_dim, d_state, batch)`` and GPU (``benchmarks/NOTES_mamba2.md`` has the runs behind each
choice; :func:`gpu_name` names a tensor's GPU as the defaults key it).
The kernels are in ``decode.py``, ``decode_v4.py`` and ``decode_staged.py``."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton

from .._prefetch import PREFETCH_MODES

__all__ = ["DOT_FOLDS", "FLUSH_IMPLS", "FOLDS", "KERNELS", "L2_AHEAD_GPUS", "PIPELINES", "WS_CONSUMERS",
           "WS_CONSUMER_CHOICES", "WS_ORDERS", "LaunchConfig", "gpu_name", "launch_config", "ws_consumers_allowed"]

#: Where the warp-specialised flush's L2 prefetch of its next item (``flush_ws_l2_ahead=1``) is the
#: default, with the fiftieth run's takes of 2 and taper 2 at every batch it serves: GPU name (as
#: ``torch.cuda.get_device_name`` gives it) -> the head_dims it was timed faster at
#: (benchmarks/NOTES_mamba2.md, fifty-third and fifty-fourth runs). On an H200 it lost at
#: Nemotron-H's head_dim 64 and gained at Nemotron-3-Nano's 80. Elsewhere (other head_dims, GPUs not
#: timed) the default leaves it out.
L2_AHEAD_GPUS: dict[str, tuple[int, ...]] = {
    "NVIDIA H100 80GB HBM3": (64, 80),
    "NVIDIA H200": (80,),
}

#: Flush fold of the "v4" and "staged" kernels: unrolled rank-1 FMAs, a rolled loop, or an fp32
#: ``tl.dot`` at this precision; "staged" also has the loop software-pipelined ("pipe").
FOLDS = ("fma", "loop", "ieee", "tf32x3", "tf32x2", "bf16x3", "pipe")
#: The folds that are one ``tl.dot`` (16-row tiles at least); "tf32x2" is tf32x3 in two TF32
#: passes where the ring's ``B`` is 16-bit (exact in TF32), "bf16x3" three bf16 passes where it
#: is bf16 (``ops/_tf32.py``).
DOT_FOLDS = ("ieee", "tf32x3", "tf32x2", "bf16x3")
#: Replay kernels: one program per tile (v3), per head part (v4), ring launch + tiles (staged),
#: every token folded into the checkpoint at once (write_through: latency-bound batches).
KERNELS = ("v3", "v4", "staged", "write_through")
#: Tile pipelining of the "v4" kernel (decode_v4.py); "cols": one tile per program walked in
#: 32-column chunks (the delta rules' one-launch step's form).
PIPELINES = ("regs", "range", "cols")
#: Flush launches of the "staged" kernel with flush_launch: Triton's, the CUDA C++ kernel, or its
#: warp-specialised form.
FLUSH_IMPLS = ("triton", "cuda", "cuda_ws")
#: How the warp-specialised flush's blocks take their items: striding by the grid, from a counter,
#: or, step by step, from the counter when at least half of the batch's rows flush.
WS_ORDERS = ("stride", "counter", "auto")
#: ``flush_impl="cuda_ws"``: the consumer warps of a block (a producer warp beside them) by default,
#: and the counts ``LaunchConfig.flush_ws_consumers`` may ask for.
WS_CONSUMERS, WS_CONSUMER_CHOICES = 16, (4, 8, 16)


def ws_consumers_allowed(consumers) -> bool:
    """Whether ``consumers`` is one of :data:`WS_CONSUMER_CHOICES` as an ``int`` (8.0 and ``True``
    are not: the count becomes a ``#define`` and a launch's thread count)."""
    return type(consumers) is int and consumers in WS_CONSUMER_CHOICES


@dataclass(frozen=True)
class LaunchConfig:
    """Tile and warp choice of one kernel launch (tuned in ``benchmarks/bench_mamba2_decode.py``)."""

    block_p: int = 16
    num_warps: int = 4
    fold_dot: bool = False
    ring_prefetch: bool = False
    max_registers: int | None = None  # ptxas .maxnreg: trades spills for programs per SM
    cursor_kernel: bool = False  # move the cursors in a second launch instead of arrival counters
    rows_fastest: bool = False  # grid order: rows first (programs in flight span many slots)
    # Replay kernel: "v3" one program per checkpoint tile (this module), "v4" one program per
    # head part streaming its tiles (decode_v4.py), "staged" a per-row ring launch then one
    # program per checkpoint tile (decode_staged.py), "write_through" the standard step's
    # tiles folding each token into the checkpoint (_standard_step_kernel; block_p, num_warps,
    # max_registers). The fields below apply to "v4" ("fold" also to "staged").
    kernel: str = "v3"
    p_split: int = 1  # programs per head (each streams head_dim / p_split rows)
    fold: str = "fma"  # flush fold: FMAs unrolled ("fma") or rolled ("loop"), or tl.dot (DOT_FOLDS)
    # "regs": unrolled, next tiles loaded ahead; "range": tl.range staging; "cols": one block_p-row
    # tile per program (p_split ignored) walked in 32-column chunks through a num_stages pipeline
    pipeline: str = "regs"
    ahead: int = 1  # tiles loaded ahead of the one being computed ("regs"; 1 or 2)
    num_stages: int = 2  # software-pipeline stages ("range")
    split_flush: bool = False  # non-flush and flush rows in two launches (needs cursor_kernel)
    ring_warps: int = 4  # "staged": warps of the ring launch
    # "staged": flush rows in a third launch (whole heads, `flush_heads` of a group per program,
    # `flush_block_p`-row tiles), so that the stream launch compiles without the fold.
    flush_launch: bool = False
    flush_block_p: int = 32
    flush_warps: int = 4
    flush_heads: int = 4
    flush_stages: int = 1  # > 1: the flush launch's (head, tile) loop as a software-pipelined tl.range
    # > 0: the flush launch as this many programs per SM walking the flush rows' tiles (a list
    # numbered from the ring launch's flags) instead of a program per (row, group, flush_heads).
    flush_persistent: int = 0
    # What a list item of flush_persistent is: "tiles" (one flush_block_p-row tile of a flush row)
    # or "heads" (flush_heads heads of a group of a flush row, as a per-row flush program walks them).
    flush_list_items: str = "tiles"
    # ptxas .maxnreg of the flush launch; a tuple: the one of these caps whose residency fills
    # the per-row flush launch's waves best on the device (_flush_heads.fullest_last_wave_cap).
    flush_max_registers: int | tuple[int, ...] | None = None
    # True: the flush launch is issued first on a high-priority side stream and runs under the
    # stream launch (they touch disjoint rows); the step joins the streams before returning.
    flush_stream: bool = False
    # The per-row flush launch (and its list form, flush_list_items="heads") asks the L2 for the tile
    # flush_l2_ahead tiles on before each tile's load: "none", "lines" or "bulk" (ops/_prefetch.py;
    # CUDA only).
    flush_l2_prefetch: str = "none"
    flush_l2_ahead: int = 1
    # "cuda": the flush launch as the CUDA C++ kernel of decode_flush_cuda.py (NVRTC-compiled; a
    # wave of blocks walking (flush row, flush_heads heads) items, each warp its own rows), where
    # it supports the step, else the Triton launch above; the other flush_* fields are Triton's.
    # "cuda_ws": its warp-specialised form (flush_ws.cu: one block per SM, a producer thread keeping
    # head tiles and their operands in flight by bulk copies; sm_90+, d_state 128), else "cuda"
    # where that serves, else Triton's; the default from batch 128 at d_state 128 (launch_config).
    flush_impl: str = "triton"
    flush_cuda_blocks: int = 4  # "cuda": blocks per SM its registers are bounded for (__launch_bounds__)
    flush_cuda_rows: int | None = None  # "cuda": rows of a warp item (None: decode_flush_cuda.warp_rows)
    # "cuda_ws": head tiles in flight per block (2 to 5; 0: the most that fit the device's shared
    # memory, at most 5). Fewer leave shared memory beside it for the stream launch's programs.
    flush_ws_stages: int = 0
    # "cuda_ws" with flush_ws_stages=0: take at most this many stages (2 to 5; 0: no cap), fewer
    # where fewer fit (a cap, where flush_ws_stages asks for an exact count and refuses one that
    # does not fit the device).
    flush_ws_max_stages: int = 0
    # "cuda_ws": how a block takes its (row, head) items: "stride" (block b: b, b + blocks, ...),
    # "counter" (the next from a counter the ring launch zeroes: the tiles in flight stay contiguous)
    # or "auto" (each step: the counter when at least half of the batch's rows flush, else the
    # stride; launch_config's choice wherever it picks "cuda_ws").
    flush_ws_order: str = "stride"
    flush_ws_chunk: int = 4  # "counter" / "auto": consecutive items a block takes at once from the counter
    # kernel="staged" with flush_launch: the ring launch, not the stream launch, stores the
    # token's ring x entry (the stream launch then writes only y beside its checkpoint reads).
    ring_x_in_ring: bool = False
    # kernel="staged" with flush_launch: the ring launch writes a non-flush row's terms as the
    # group's scores and 4 floats per head, not as lines of weights times scores (ring.py), and
    # the stream programs form the weights from the ring's dt: 0.6 MB written a step at
    # Nemotron-H 256 instead of 2.4 MB. An option: on an H200 it gained nothing (forty-first run,
    # one call, Nemotron-H 256 / 512 amortized 292.0 -> 293.8 / 566.1 -> 568.1 us).
    compact_coef: bool = False
    # kernel="staged" with flush_launch: > 1 (a power of two): each stream program walks this many
    # checkpoint tiles, strided by the grid, and stores their y rows after the last one's reads
    # (stream.py); 1: one program per tile. An option: on an H200 it lost (forty-first run, one
    # call, Nemotron-H 256 non-flush 271.7 us one tile a program, 301.5 / 348.0 walking 32 / 64,
    # 328.3 with 64 in 4 warps; not profiled: fewer programs may keep fewer loads in flight).
    stream_tiles: int = 1
    # kernel="staged": the ring launch stores the token's dt entry as the 32-byte sector around it
    # (the entries below it rewritten as they are, zeros after it: uncommitted entries), not as one
    # 4-byte word per head, which leaves the sector partly written (ring.py). An option: on an H200
    # it gained nothing (forty-fifth run, two pairs: Nemotron-H 256 / 512 non-flush within 0.3 us).
    ring_dt_sector: bool = False
    # "cuda_ws" with the counter ("counter" / "auto"): > 0, a block takes one item at a time once,
    # by the last take it saw, fewer than this many chunks a block remain; 0: flush_ws_chunk items
    # to the end. The last chunks otherwise leave some blocks folding up to flush_ws_chunk items
    # while the rest have finished (all-flush step at Nemotron-H 256, chunks of 2 / 4 / 8: 562-564 /
    # 565-567 / 576-577 us, thirty-ninth run). On an H100 (forty-fourth run, one sample each), under
    # the 3-stage cap of batch 128-160, taper 2 shortened the flush step 393.0 -> 389.9 us (128) and
    # 486.6 -> 484.8 (160); without the cap, taper 1 / 2 lengthened it by 1-3 us. On an H200
    # (forty-fifth run, three pairs in one call), taper 2 under the cap: Nemotron-H 128 292.9-293.5
    # against 295.5-296.2 us, 160 362.5-363.0 against 364.4-365.8, Nemotron-3-Nano 128 274.0-275.0
    # against 277.8 (amortized and staggered steps within 0.3 us; taper 1: 296.9 / 366.5).
    # launch_config's default wherever the warp-specialised flush serves (with the L2 prefetch below).
    flush_ws_taper: int = 0
    # "cuda_ws": 0, or the producer asks the L2 for each item's checkpoint tile and ring x this many
    # loads (1 or 2) before its own (cp.async.bulk.prefetch.L2), while every stage is busy, so that
    # the bulk load issued when a stage frees finds them there: reads more in flight per SM without
    # their shared memory (a fifth stage shortened the all-flush step by ~5 us but cost the
    # non-flush step 23 us, thirty-fourth run). The Triton flush launch gained 12 us from its L2
    # prefetch (flush_l2_prefetch, seventeenth run). With the order "auto" it asks only in the
    # steps that take their items from the counter (in-phase ones). 1 shortened the all-flush
    # step on H100s (fiftieth and fifty-fourth runs) but lengthened it on an H200 (fifty-third
    # run) at Nemotron-H dims, so launch_config asks it where L2_AHEAD_GPUS lists it (figures there); 2
    # lengthened it by 30-160 us on an H100.
    flush_ws_l2_ahead: int = 0
    # "cuda_ws": the block's consumer warps (4, 8 or 16; each folds head_dim / this rows of a
    # head, at most 32). Per ring entry a warp widens its lanes' four 16-bit B values (4 integer
    # instructions in the sm_90 SASS) and reads its rows' weights beside the rows x 4 FMAs: ~22
    # instructions for 16 FMAs with 4 rows a warp (Nemotron-H's head_dim 64 over 16 warps); with 8
    # warps the item loop's SASS holds ~20% fewer instructions an item. An option: the H200 holds
    # its 700 W cap through back-to-back steps by lowering the SM clock, which the fold's
    # instructions then pay for. There (sixtieth run, two calls) 8 warps read Nemotron-H 256's
    # all-flush step at 559.0-560.3 us against 561.9-564.9 for 16 in most rows, but within the
    # calls' drift (587 and 622 in two rows); 4 warps lost. On an H100 that stays below its cap
    # in that step (sixty-second run: 651-692 W at 512, SM 1980 MHz) 8 warps drew 15-28 W less and took
    # up to 1.4 us longer (256: 753.8-754.0 against 753.6-753.8 us; 512: 1498.4-1498.8 against
    # 1497.3-1497.7).
    flush_ws_consumers: int = WS_CONSUMERS

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"LaunchConfig.kernel: expected one of {KERNELS}, got {self.kernel!r}")
        if self.fold == "pipe" and self.kernel != "staged":
            raise ValueError(f"LaunchConfig.fold: {self.fold!r} is a fold of kernel='staged' only")
        if self.fold not in FOLDS:
            raise ValueError(f"LaunchConfig.fold: expected one of {FOLDS}, got {self.fold!r}")
        if self.pipeline not in PIPELINES:
            raise ValueError(f"LaunchConfig.pipeline: expected one of {PIPELINES}, got {self.pipeline!r}")
        if self.pipeline == "cols" and (self.kernel != "v4" or self.fold not in DOT_FOLDS or self.split_flush):
            raise ValueError("LaunchConfig.pipeline: 'cols' needs kernel='v4', a tl.dot fold (DOT_FOLDS) and no "
                             f"split_flush, got kernel={self.kernel!r}, fold={self.fold!r}, "
                             f"split_flush={self.split_flush}")
        if self.ahead not in (1, 2):
            raise ValueError(f"LaunchConfig.ahead: expected 1 or 2, got {self.ahead}")
        if self.split_flush and not (self.kernel == "v4" and self.cursor_kernel):
            raise ValueError("LaunchConfig.split_flush: needs kernel='v4' and cursor_kernel=True")
        if self.flush_persistent < 0:
            raise ValueError(f"LaunchConfig.flush_persistent: expected >= 0, got {self.flush_persistent}")
        if self.flush_stages < 1:
            raise ValueError(f"LaunchConfig.flush_stages: expected >= 1, got {self.flush_stages}")
        if self.flush_list_items not in ("tiles", "heads"):
            raise ValueError(f"LaunchConfig.flush_list_items: expected 'tiles' or 'heads', got {self.flush_list_items!r}")
        if self.flush_list_items != "tiles" and not self.flush_persistent:
            raise ValueError("LaunchConfig.flush_list_items: only with flush_persistent > 0 (a list flush launch)")
        if self.flush_l2_prefetch not in PREFETCH_MODES:
            raise ValueError(f"LaunchConfig.flush_l2_prefetch: expected one of {tuple(PREFETCH_MODES)}, "
                             f"got {self.flush_l2_prefetch!r}")
        if self.flush_l2_ahead < 1:
            raise ValueError(f"LaunchConfig.flush_l2_ahead: expected >= 1, got {self.flush_l2_ahead}")
        if self.flush_impl not in FLUSH_IMPLS:
            raise ValueError(f"LaunchConfig.flush_impl: expected one of {FLUSH_IMPLS}, got {self.flush_impl!r}")
        if self.flush_impl != "triton" and not self.flush_launch:
            raise ValueError(f"LaunchConfig.flush_impl: {self.flush_impl!r} needs flush_launch=True")
        if not 1 <= self.flush_cuda_blocks <= 8:
            raise ValueError(f"LaunchConfig.flush_cuda_blocks: expected 1 to 8, got {self.flush_cuda_blocks}")
        for name in ("flush_ws_stages", "flush_ws_max_stages"):
            if getattr(self, name) not in (0, 2, 3, 4, 5):
                raise ValueError(f"LaunchConfig.{name}: expected 0 or 2 to 5, got {getattr(self, name)}")
        if self.flush_ws_order not in WS_ORDERS:
            raise ValueError(f"LaunchConfig.flush_ws_order: expected one of {WS_ORDERS}, got {self.flush_ws_order!r}")
        if not 1 <= self.flush_ws_chunk <= 64:
            raise ValueError(f"LaunchConfig.flush_ws_chunk: expected 1 to 64, got {self.flush_ws_chunk}")
        if isinstance(self.flush_ws_taper, bool) or not isinstance(self.flush_ws_taper, int) or not (
                0 <= self.flush_ws_taper <= 16):
            raise ValueError(f"LaunchConfig.flush_ws_taper: expected an int in [0, 16], got {self.flush_ws_taper!r}")
        if type(self.flush_ws_l2_ahead) is not int or self.flush_ws_l2_ahead not in (0, 1, 2):
            raise ValueError(f"LaunchConfig.flush_ws_l2_ahead: expected 0, 1 or 2, got {self.flush_ws_l2_ahead!r}")
        if self.flush_ws_l2_ahead and self.flush_impl != "cuda_ws":
            raise ValueError(f"LaunchConfig.flush_ws_l2_ahead: needs flush_impl='cuda_ws', got {self.flush_impl!r}")
        if not ws_consumers_allowed(self.flush_ws_consumers):
            raise ValueError(f"LaunchConfig.flush_ws_consumers: expected one of {WS_CONSUMER_CHOICES}, "
                             f"got {self.flush_ws_consumers!r}")
        if self.flush_ws_consumers != WS_CONSUMERS and self.flush_impl != "cuda_ws":
            raise ValueError(f"LaunchConfig.flush_ws_consumers: {self.flush_ws_consumers} needs flush_impl='cuda_ws', "
                             f"got {self.flush_impl!r}")
        if self.flush_ws_taper and self.flush_ws_order == "stride":
            raise ValueError("LaunchConfig.flush_ws_taper: > 0 needs flush_ws_order 'counter' or 'auto' "
                             "(the counter's takes)")
        if self.flush_cuda_rows is not None and self.flush_cuda_rows < 1:
            raise ValueError(f"LaunchConfig.flush_cuda_rows: expected None or >= 1, got {self.flush_cuda_rows}")
        if self.flush_heads < 1:
            raise ValueError(f"LaunchConfig.flush_heads: expected >= 1, got {self.flush_heads}")
        caps = self.flush_max_registers if isinstance(self.flush_max_registers, tuple) else (
            () if self.flush_max_registers is None else (self.flush_max_registers,))
        if (isinstance(self.flush_max_registers, tuple) and not caps) or any(
                not isinstance(c, int) or isinstance(c, bool) or not 24 <= c <= 255 for c in caps):
            raise ValueError("LaunchConfig.flush_max_registers: expected None, an int in [24, 255] or a non-empty "
                             f"tuple of them, got {self.flush_max_registers!r}")
        if self.flush_stream and not self.flush_launch:
            raise ValueError("LaunchConfig.flush_stream: needs flush_launch=True")
        for name in ("ring_dt_sector", "ring_x_in_ring", "compact_coef"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"LaunchConfig.{name}: expected a bool, got {getattr(self, name)!r}")
        if self.ring_dt_sector and self.kernel != "staged":
            raise ValueError(f"LaunchConfig.ring_dt_sector: needs kernel='staged' (its ring launch), got {self.kernel!r}")
        for name in ("ring_x_in_ring", "compact_coef"):
            if getattr(self, name) and not self.flush_launch:
                # Without the flush launch the stream launch's flush rows fold the ring themselves,
                # from the token's ring x entry and the lines' weights.
                raise ValueError(f"LaunchConfig.{name}: needs flush_launch=True")
        if isinstance(self.stream_tiles, bool) or not isinstance(self.stream_tiles, int) or not (
                1 <= self.stream_tiles <= 256 and self.stream_tiles & (self.stream_tiles - 1) == 0):
            raise ValueError(f"LaunchConfig.stream_tiles: expected a power of two in [1, 256], got {self.stream_tiles!r}")
        if self.stream_tiles > 1 and (not self.flush_launch or self.rows_fastest):
            # The walk leaves flush rows to the flush launch and numbers tiles in the grid's default order.
            raise ValueError("LaunchConfig.stream_tiles: > 1 needs flush_launch=True and rows_fastest=False")
        if self.flush_launch and self.kernel != "staged":
            raise ValueError("LaunchConfig.flush_launch: needs kernel='staged'")
        if self.flush_launch and self.fold in DOT_FOLDS and self.flush_block_p < 16:
            raise ValueError(f"LaunchConfig.flush_block_p: a tl.dot fold needs >= 16, got {self.flush_block_p}")
        if self.p_split < 1 or self.num_stages < 1:
            raise ValueError(f"LaunchConfig: expected p_split >= 1 and num_stages >= 1, got {self.p_split}, {self.num_stages}")
        if self.block_p < 1 or self.block_p & (self.block_p - 1):
            raise ValueError(f"LaunchConfig.block_p: expected a power of two, got {self.block_p}")
        if (self.kernel == "v4" or (self.kernel == "staged" and not self.flush_launch)) and \
                self.fold in DOT_FOLDS and self.block_p < 16:
            raise ValueError(f"LaunchConfig.block_p: a tl.dot fold needs block_p >= 16, got {self.block_p}")


@functools.lru_cache(maxsize=None)
def _cuda_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def gpu_name(device: torch.device | str) -> str | None:
    """The name ``launch_config`` keys its per-GPU defaults by: ``torch.cuda.get_device_name`` of
    a CUDA ``device`` (cached: a host query, so it is safe inside a CUDA-graph capture), else
    ``None`` (another device, or ``"cuda"`` where no GPU is present)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return _cuda_name(torch.cuda.current_device() if device.index is None else device.index)


def launch_config(kind: str, head_dim: int, d_state: int, batch: int, gpu: str | None = None) -> LaunchConfig:
    """The default launch configuration for ``kind`` in ``{"standard", "replay"}``.

    Chosen from ``benchmarks/bench_mamba2_decode.py --variants`` on an H200 (Nemotron-H dims;
    table and command in ``benchmarks/RESULTS.md``) rather than autotuned at run time, so that
    the first call inside a CUDA-graph capture launches exactly what eager calls launched.
    ``gpu``: the device's name (:func:`gpu_name`; ``None``: none known), for the one field that
    differs by GPU and head_dim (the flush's L2 prefetch, :data:`L2_AHEAD_GPUS`).
    """
    if gpu is not None and not isinstance(gpu, str):
        raise TypeError(f"launch_config: gpu: expected a device name (str) or None, got {type(gpu).__name__}")
    block_n = triton.next_power_of_2(d_state)
    if kind == "standard":
        # Small tiles, many programs: the most loads in flight for a pure stream (518 us at
        # batch 256, 4.2 TB/s; 7.7 us at batch 1). A lone row takes 4-row tiles: twice the
        # programs for one slot's 4 MiB (probe_batch1_paired.py, four graphs a side, Nemotron-H:
        # 3% shorter than 8-row tiles, Nemotron-3-Nano even; at batch 2-8 neither leads).
        return LaunchConfig(block_p=8 if block_n <= 128 and batch > 1 else 4, num_warps=2)
    if batch < (12 if block_n <= 128 else 16):
        # Latency-bound: the replay saves no bandwidth here, only adds dependent work, so every
        # step folds its token into the checkpoint (the standard step's kernel and tiles,
        # WRITE_THROUGH). Nemotron-H: batch 1 8.2 us against 8.8 us for the v4 replay (four programs per
        # head, arrival counters; standard 7.8 us), batch 15 36.4 against 43.7 us (36.0); at batch
        # 8 it still leads the staged step below (22.5 against 22.7 us, staggered 23.4).
        return LaunchConfig(block_p=8 if block_n <= 128 else 4, num_warps=1, kernel="write_through")
    if block_n <= 128:
        # Bandwidth-bound from here: the ring launch, small checkpoint tiles for the non-flush rows
        # (compiled without the fold: 56 registers), and the flush rows in a launch of their own
        # (batch 256: non-flush 290 us = 95% of copy against 336 us with the fold in the stream
        # launch), issued first on a side stream so that it runs under the stream launch
        # (`--variants`, batch 256: amortized 1.81x / staggered 1.86x the standard against 1.79x /
        # 1.77x in order). The fold in two TF32 passes (the ring's 16-bit B is exact in TF32;
        # ops/_tf32.py; fp32 rings take tf32x3), capped at 96 registers (5 programs per SM): flush
        # 827 -> 731 us, amortized 1.79x -> 1.83x, staggered 1.83x -> 1.89x in one `--variants` run
        # (then with 4 heads per program). Then 112 or 96 registers (4 or 5 programs per SM), the
        # one that fills the flush launch's waves best on the device: from batch 64 that launch
        # has 2048 programs (4096 at 512), on an H200's 132 SMs 3.1 waves at 5 per SM and 3.9 at 4,
        # and the almost empty fourth wave of long programs cost more than the fifth program per
        # SM gained; on 148 or 160 SMs 5 per SM fills better (not measured: no such GPU here).
        # H200 plain runs, one call, 96 -> 112: Nemotron-H flush 697.6 -> 660.3 us at 256
        # (amortized 305.6 -> 303.6, mixed 297.7 -> 296.7), 358.2 -> 334.6 at 128, 1469 -> 1360 at
        # 512; Nemotron-3-Nano flush 734.8 -> 681.6 at 256, mixed 94.2 -> 82.5 us at 64; batch 32
        # within 0.3 us. The cap pair is now (128, 96): with the group's ring B loaded once per
        # flush program (not per tile) ptxas takes 114 registers under a 128 cap (4 per SM, as at
        # 112) and spills none, where a 112 cap spills 8 B (compiled as the launch specialises the
        # strides; Nemotron-3-Nano: 122 registers, 16 B at 112).
        # Below batch 64 a flush program takes one head instead of four: in staggered phases only
        # batch / 16 rows flush per step, and four heads per program serialise them (Nemotron-H
        # batch 32: staggered 1.16x -> 1.36x the standard, in phase 1.35x -> 1.31x; the v4 kernel
        # that served 16-127 before: 1.13x / 1.08x; Nemotron-3-Nano batch 32 1.27x / 1.32x
        # against v4's 0.92x / 0.86x, whose 32-row tiles do not divide head_dim 80). More heads
        # per flush program as the batch grows (whole groups from 256; the largest divisor of the
        # group's heads, flush_heads_per_program): fewer of the flush launch's early exits in
        # non-flush steps and a shorter flush. Plain runs, one call, 4 / 8 / 16 heads, Nemotron-H:
        # batch 256 amortized 309.7 / 306.3 / 305.7 us, mixed 301.5 / 299.6 / 297.9; 512 amortized
        # 606.0 / 599.7 / 594.6, mixed 616.4 / 616.2 / 625.4 (585-616 us for 4 heads across runs);
        # Nemotron-3-Nano (12 per group: 4 / 6 / 12) 256 amortized 296.9 / 295.3 / 294.9, mixed
        # 286.9 / 284.9 / 283.2; 512 mixed 578.8 / 597.3 / 598.1 (long flush programs tail a
        # staggered step once 32 rows flush in it). `--variants` at 128: 4 and 8 within 0.5 us; at
        # 64 eight heads lose the mixed step (111.4 against 87 us).
        # From batch 128 each flush program asks the L2 for its next tile before each tile's load
        # (flush_l2_prefetch, one prefetch per 128-byte line; head_dim a multiple of 32): a program
        # walks its tiles one after the other, so the next one's DRAM latency overlaps this one's
        # fold. `--variants`, one call each, flush us none -> lines: 128 331.4 -> 326.2, 256
        # 650.1 -> 638.1, 512 1341.6 -> 1318.0 (amortized -0.4 / -0.8 / -1.8 us); a one-instruction
        # bulk prefetch (sm_90+) 324.9 / 636.8 / 1331.4; two tiles ahead 671.1 at 256.
        # A head_dim that 32-row flush tiles do not divide (Nemotron-3-Nano's 80: tiles of 32, 32
        # and 16 rows) takes 16-row tiles in 2 warps from batch 128: `--variants`, one call each,
        # Nano dims, amortized 152.4 -> 150.0 / 287.7 -> 283.3 / 560.7 -> 551.4 us at 128 / 256 /
        # 512 (flush 339 -> 308, 668 -> 600, 1352 -> 1213), mixed within 1 us; at 64 the mixed
        # step lost (82.1 -> 91.4), and Nemotron-H's 64-row heads lost mixed steps with them.
        # Where 32-row tiles divide head_dim, from batch 128 the flush launch's (row, head chunk)
        # programs become the items of a list walked by 4 programs per SM (flush_list_items="heads"):
        # a non-flush step then runs one wave of programs that find no item instead of batch x
        # chunks early exits. `--variants`, one call, Nemotron-H, non-flush / flush / amortized us:
        # 256 279.6 / 640.2 / 302.1 -> 278.9 / 636.6 / 301.3; 512 542.8 / 1317.5 / 591.2 -> 540.8 /
        # 1305.6 / 588.6; 128 148.7 / 325.2 / 159.8 -> 148.1 / 326.3 / 159.2; mixed within 0.5 us;
        # 3 programs per SM: flush 726 us at 256.
        heads = 1 if batch < 64 else 4 if batch < 128 else 8 if batch < 256 else 16
        large = batch >= 128
        rows16 = large and head_dim % 32 != 0
        listed = large and not rows16
        # The fold in three bf16 passes (ops/_tf32.py; the ring's B is bf16 in these models, and a
        # 16-bit operand halves what the operands' layout changes move; tf32x2 for fp16 rings):
        # plain runs, one call, tf32x2 -> bf16x3 flush us, Nemotron-H 64 / 128 / 256 / 512 172.4 /
        # 326.3 / 638.4 / 1313.8 -> 168.0 / 313.7 / 613.9 / 1282.9 (amortized 301.4 -> 299.9 at
        # 256); Nemotron-3-Nano 176.7 / 306.4 / 597.6 / 1219.0 -> 166.7 / 306.2 / 595.9 / 1191.3.
        # From batch 128 at d_state 128 the flush launch is the warp-specialised CUDA kernel
        # (flush_impl="cuda_ws": one block per SM whose producer thread bulk-copies each (row, head)
        # item's tile and operands into one of 3-5 stages while 16 warps fold). Where it does not
        # serve, the CUDA launch of flush_cuda.cu (a GPU before sm_90; within 1-2% of the Triton
        # launch on an H200), and off CUDA the Triton launch.
        # `--variants`, H200, one call per line, default -> cuda_ws, non-flush / flush / amortized /
        # mixed us: Nemotron-H 128 148.1 / 313.2 / 158.4 / 156.4 -> 147.9 / 312.9 / 158.2 / 158.6
        # (3 stages: 147.7 / 305.4 / 157.6 / 157.2); 256 279.0 / 614.4 / 300.0 / 296.8 -> 278.7 /
        # 592.0 / 298.3 / 296.5; 512 534.4 / 1275.4 / 580.7 / 571.9 -> 533.6 / 1188.0 / 574.5 /
        # 568.9; Nemotron-3-Nano 256 265.1 / 601.0 / 286.1 / 280.2 -> 263.4 / 555.5 / 281.7 /
        # 280.4, 512 508.0 / 1197.9 / 551.1 / 543.4 -> 504.5 / 1100.4 / 541.8 / 538.7. At 128 it
        # gained 0.2 us amortized and lost 2.2 us in the mixed step (the serving case: slots in
        # staggered phases); at 32 and 64 its amortized step led too but its mixed one trailed by
        # 1.6-1.7 us (few rows flush per staggered step, and a block walks its items one after
        # another). So it served from 256 only, until the "auto" order below.
        # Its blocks choose their order step by step (flush_ws_order="auto"): from a counter, in
        # chunks of 4, when at least half of the rows flush, else striding over the items. The
        # counter shortened the all-flush step in every capture of the thirty-ninth run (Nemotron-H
        # 256 565-567 us against 591-596, 512 1113-1122 against 1173-1180), but its staggered step,
        # a server's, at 512 read 608.7 / 611.0 us in two captures of four against 567.5-569.2
        # (NOTES_mamba2.md, thirty-eighth and thirty-ninth runs). "auto" keeps the stride's
        # staggered step. Forty-first run, H200, one call, stride -> auto: `--variants` non-flush /
        # flush / amortized / mixed us, Nemotron-H 256 271.5 / 595.7 / 291.8 / 289.2 -> 272.4 /
        # 568.5 / 290.9 / 290.0, 512 525.2 / 1179.9 / 566.1 / 561.2 -> 525.3 / 1118.9 / 562.4 /
        # 564.5; Nemotron-3-Nano 256 256.4 / 557.4 / 275.2 / 274.0 -> 255.9 / 541.8 / 273.7 /
        # 273.4; probe_flush_captures.py at 512, 2 states x 2 graphs, flush 1177.1-1181.9 ->
        # 1118.6-1119.4, staggered steps in turn 560.7-562.6 -> 561.0-562.3.
        # Forty-first run, the same call, Triton launch -> cuda_ws with "auto", flush / amortized /
        # mixed us: Nemotron-H 192 472.8 / 225.9 / 223.9 -> 430.2 / 222.4 / 222.1; 128 315.1 /
        # 155.9 / 155.5 -> 324.1 / 157.2 / 156.5 with the most stages that fit, 297.1 / 154.8 /
        # 154.9 with 3 (at 192 3 stages: 439.0); Nemotron-3-Nano 128 306.9 / 148.9 / 148.5 ->
        # 279.6 / 146.0 / 146.5 with 3. So from batch 128, with at most 3 stages below 192 (a cap:
        # head_dim 128, or 80 with fp32 activations, fit only 2 on an H200). A second call
        # (the new default against the Triton launch): Nemotron-H 160 368.1 / 189.1 / 188.7 against
        # 393.0 / 191.4 / 189.8 (the most stages: 401.6 / 191.8 / 190.6); Nemotron-3-Nano 160
        # 344.9 / 178.2 / 178.4 against 402.5 / 182.6 / 179.7; Nemotron-H 128 298.1 / 154.8 / 154.8
        # against 314.4 / 156.1 / 155.1.
        # Where it caps the stages, the counter's takes are 2 items, not 4: on an H100 (forty-sixth
        # run, `--variants`, three pairs each in one call) the flush step at Nemotron-H 128 took
        # 386.3-388.2 against 388.7-390.7 us, at 160 482.2 against 484.3-485.1, Nemotron-3-Nano 128
        # 365.9 against 369.1 (one pair), non-flush, amortized and staggered steps within 0.3 us. On
        # an H200 chunks of 2 read 562.2-564.3 against 564.7-567.2 us for chunks of 4 at Nemotron-H
        # 256 (thirty-ninth run, uncapped), but 1115.0-1122.4 against 1112.5-1116.4 at 512, so the
        # uncapped launches keep 4 without the L2 prefetch below.
        # From batch 192 the counter's takes are 2 items with the last ones taken one at a time,
        # at most 4 stages. They came in with the producer asking the L2 for the item it loads
        # next in in-phase steps (flush_ws_l2_ahead=1), no longer the default (below). On an H100
        # (fiftieth run, `--variants`, 30 rounds, two or four timings each in one call), default
        # then -> those four with the prefetch,
        # flush / amortized us: Nemotron-H 192 579.9-580.5 / 311.4-311.6 -> 568.9-569.3 / 310.7;
        # 256 768.1-770.9 / 409.0-409.2 -> 754.1-755.9 / 408.0-408.2; 384 1147.2-1148.4 /
        # 604.4-604.8 -> 1128.0-1129.0 / 603.4-603.6; 512 1525.7-1525.9 / 799.9-800.3 ->
        # 1500.5-1500.6 / 798.4-798.5; Nemotron-3-Nano 256 730.7 / 386.0 -> 716.0-716.4 /
        # 385.0-385.1; non-flush steps within 0.4 us. The capped form at 128 (a first H100):
        # 381.8-382.2 -> 378.9-379.1, amortized and staggered steps within 0.3 us. Two items ahead
        # lengthened the flush step by 30-160 us. Asked in every step, the staggered step read
        # 0.4-1.2 us longer at 384-512, hence in-phase steps only; with that, default then ->
        # this in one call, flush / amortized / staggered us: Nemotron-H 256 756.2-757.7 / 405.1 /
        # 404.4-404.7 -> 745.0-746.9 / 404.1-404.7 / 404.4-404.8; 512 1498.4-1500.9 / 790.9-791.0
        # / 790.5-790.6 -> 1479.7-1481.6 / 789.4-790.1 / 790.3-790.6; 128 382.1-382.6 / 212.2 /
        # 212.1-212.4 -> 378.8-380.5 / 211.8-212.2 / 212.2-212.4.
        # On an H200 (fifty-third run, `--variants`, 30 rounds, two or three timings each in one
        # call) the prefetch lost at every batch, flush / amortized us, with it -> without it:
        # Nemotron-H 192 455.5-458.6 / 223.7-224.0 -> 426.9-427.2 / 222.2; 256 602.1-604.0 /
        # 292.5-293.0 -> 563.8-564.2 / 290.3-290.4; 512 1206.0-1316.0 / 568.1-575.5 ->
        # 1168.4-1181.1 / 566.4-568.0 (its uncapped takes of 4: 1136.7-1143.1 / 564.3-564.8).
        # The H200 is where these defaults are measured against their targets, and B300s have
        # more bandwidth still, so the prefetch is not asked by default (except where
        # L2_AHEAD_GPUS lists the GPU and head_dim, below). Without it, from batch 512 the
        # takes of 4 with no taper (the forty-eighth run's default) flush sooner on that H200:
        # 1136.7-1143.1 against 1168.4-1181.1 us (1.10x against 1.13-1.14x the standard step).
        # On the GPUs of L2_AHEAD_GPUS the fiftieth run's form stays: an H100 (fifty-fourth run,
        # `run_gpu_suite.sh ws-l2-prefetch`, three pairs in one call), today's default -> with the
        # prefetch, flush / amortized us: Nemotron-H 192 564.6-565.2 / 307.9-308.3 -> 560.7-562.1 /
        # 307.7-308.1; 256 749.2-751.2 / 404.3-404.7 -> 744.9-746.0 / 404.0-404.4; 512 (takes of 2,
        # taper 2) 1498.9-1501.2 / 790.7-791.2 -> 1480.3-1480.9 / 789.7-790.0; Nemotron-3-Nano 256
        # 708.3 / 380.6 -> 706.1-707.9 / 380.3-380.6; non-flush and staggered steps within 0.5 us.
        ws = batch >= 128 and d_state == 128
        # On the H200 the prefetch gained at Nemotron-3-Nano dims (head_dim 80), with it -> without
        # it, flush / amortized us at 256 in four calls: 520.0-520.4 / 272.6-273.0 against
        # 533.2-535.2 / 273.7-273.8 (fifty-third run, three calls), 521.0-521.3 / 272.4-272.6
        # against 533.7 / 273.4 (fifty-fourth); the two runs' plain tables (with -> without), 128
        # 267.8-268.6 / 145.4-145.5 against 274.0-274.4 / 145.3-145.5, 512 (takes of 2, taper 2)
        # 1033.0-1038.6 / 528.3-529.1 against 1063.6-1063.9 / 530.0-530.2; staggered steps within 0.5
        # us. Why head_dim 80 and not 64 is not measured: at 80 only 3 stages fit beside the stream
        # launch on the H200's shared memory, 4 at 64 (but Nemotron-H 128, capped at 3, lost too).
        ahead = ws and head_dim in L2_AHEAD_GPUS.get(gpu, ())
        capped = ws and batch < 192  # the warp-specialised flush's 3-stage cap
        tapered = ws and (batch < 512 or ahead)  # takes of 2, the last items one at a time
        # The token's ring x entry stored by the ring launch (ring_x_in_ring): the stream launch,
        # a read of the checkpoint, then writes only y. Stores among a long stream of reads cost
        # more than their bytes (benchmarks/probe_memory_rates.py: the 1/128 of y stores took 244
        # -> 257 us for a 1 GiB read). `--variants`, H200, off and on in turn in one call, medians,
        # non-flush / amortized us, off -> on: Nemotron-H 128 147.8 / 158.2 -> 146.9 / 157.2; 256
        # 278.3 / 298.1 -> 275.1 / 295.1 (mixed 296.1 -> 292.5); 384 410.4 / 440.4 -> 403.7 /
        # 433.9; 512 540.5 / 580.5 -> 533.0 / 573.9 (flush steps within 1.5%); Nemotron-3-Nano 256
        # 263.8 / 282.0 -> 259.0 / 277.4, 512 511.8 / 548.3 -> 503.2 / 541.4. Results files
        # mamba2_2026-12-04_h200_variants_ring_x_in_ring*. Below batch 128 the ring launch is a
        # larger share of a short step: Nemotron-H 64 even (87.35 -> 87.2 us amortized, mixed 89.0
        # -> 89.35), 32 slower (52.05 -> 52.75, mixed 54.85 -> 55.5), so from 128 only.
        return LaunchConfig(block_p=16, num_warps=2, kernel="staged", fold="bf16x3", flush_launch=True,
                            ring_x_in_ring=large,
                            flush_max_registers=(128, 96), flush_stream=True, flush_heads=heads,
                            flush_block_p=16 if rows16 else 32, flush_warps=2 if rows16 else 4,
                            flush_l2_prefetch="lines" if large else "none",
                            flush_persistent=4 if listed else 0, flush_list_items="heads" if listed else "tiles",
                            flush_impl="cuda_ws" if ws else "triton", flush_ws_order="auto" if ws else "stride",
                            flush_ws_max_stages=3 if capped else 4 if ws else 0, flush_ws_taper=2 if tapered else 0,
                            flush_ws_chunk=2 if tapered else 4, flush_ws_l2_ahead=int(ahead))
    if batch < 128:
        # One program per head streaming 32-row tiles with the next one in flight, capped at 128
        # registers, rows first in the grid, cursors moved by a second launch, rolled FMA fold
        # (batch 128: amortized 213 us, the staged kernel 216 us).
        block_p = max(16, min(32, 4096 // block_n))
        return LaunchConfig(
            block_p=block_p, num_warps=4, max_registers=128, cursor_kernel=True, rows_fastest=True,
            kernel="v4", p_split=1, fold="loop",
        )
    return LaunchConfig(block_p=4, num_warps=2, max_registers=56, kernel="staged", fold="loop")
