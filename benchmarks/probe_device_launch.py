"""What a grid launched from the device (CUDA dynamic parallelism) costs inside a CUDA graph.

The question behind it (benchmarks/NOTES_mamba2.md, fifty-fourth run): the Mamba-2 flush could
run as a grid of short blocks, which moves read-modify-write bytes at the standard step's rate,
if the grid were launched only in the steps that have rows to fold. A grid launched in every step
pays its blocks' early exits in the others, and a graph conditional node 7.5 us a replay (thirty-
eighth run). Here one block reads a flag and launches the grid from the device (``launcher`` in
``device_launch.cu``, built by nvcc twice: relocatable with the launcher, plain without it).

Graphs, each timed with the L2 flushed before every replay (median of ``--rounds``, rotated):

- ``floor``: one kernel writing one word;
- flag 0 (a step with nothing to fold), beside a ``--mib`` read-modify-write grid on the capturing
  stream (the stream launch's stand-in), the candidate on a high-priority side stream:
  ``rmw`` alone, ``rmw|launcher`` (the launcher finds nothing), ``rmw|gated`` (the same grid as
  the update, launched from the host, every block reading the flag and leaving);
- flag 1 (an all-flush step): the ``--mib`` update grid launched from the host by the plain build
  (``update``) and by the relocatable one (``update rdc``), gated (``gated``), and from the
  device by a tail launch (``launcher>update``) or fire-and-forget (``launcher~update``); and
  the host-launched and tail-launched update each followed on the stream by the ``rmw`` grid
  (``update;rmw``, ``launcher>update;rmw``: an all-flush step's flush then the next kernel) or
  by a one-word write (``update;mark``, ``launcher>update;mark``, ``launcher~update;mark``: the
  update's time to the next kernel on the stream, which the events around a replay ending in the
  launcher do not hold).

Before timing it checks, in graph replays, that each form adds 1 to every element when the flag
is set and nothing when it is not, and whether reads of the whole buffer captured after the form
see the child's result, in the same graph (``order``: what the flush's join on the step's stream
would rely on) and in the next graph replayed (``next``: what the next decode step relies on).
The events around a replay are checked against the host clock over back-to-back replays
(``wall us``): an event that a child grid outlived reads short.

    PYTHONPATH=$PWD python3 benchmarks/probe_device_launch.py [--mib 1024] [--rounds 30]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import positive_int  # noqa: E402
from _timing import L2Flusher, capture_graph, device_info, graph_floor_us, median, time_replays  # noqa: E402

from trtllm_replayssm.ops._side_stream import fork, join  # noqa: E402

SOURCE = Path(__file__).resolve().parent / "device_launch.cu"
BUILDS = ("rdc", "plain")
#: Flag-1 forms of one launch, checked and timed; then the sequences, timed (forms' docstring).
FLAG1_FORMS = ("update", "update rdc", "gated", "launcher>update", "launcher~update")
SEQUENCES = ("update;rmw", "launcher>update;rmw", "update;mark", "launcher>update;mark", "launcher~update;mark")


def nvcc_command(nvcc: str, arch: str, build: str, source: Path, output: Path) -> list[str]:
    """The nvcc line for ``build`` in :data:`BUILDS`: ``rdc`` relocatable with the device launcher
    (linked against libcudadevrt), ``plain`` without it; ``arch`` as ``sm_90``."""
    if build not in BUILDS:
        raise ValueError(f"build: expected one of {BUILDS}, got {build!r}")
    flags = ["-rdc=true"] if build == "rdc" else ["-DNO_DEVICE_LAUNCH"]
    tail = ["-lcudadevrt"] if build == "rdc" else []
    return [nvcc, "-O3", f"-arch={arch}", *flags, "-shared", "-Xcompiler", "-fPIC", "-o", str(output), str(source),
            *tail]


@functools.lru_cache(maxsize=None)
def library(build: str, arch: str) -> ctypes.CDLL:
    """Build (once per source, build and arch, cached under the temp folder) and load ``build``."""
    nvcc = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    if not os.path.exists(nvcc):
        raise SystemExit("probe_device_launch.py: needs nvcc (on PATH or under $CUDA_HOME/bin)")
    key = hashlib.sha256(SOURCE.read_bytes() + build.encode() + arch.encode()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"replayssm_device_launch_{build}_{key}.so"
    if not out.exists():  # built aside and renamed, so that an interrupted build is never loaded
        part = out.with_name(f"{out.stem}.{os.getpid()}.part.so")
        subprocess.run(nvcc_command(nvcc, arch, build, SOURCE, part), check=True)
        os.replace(part, out)
    lib = ctypes.CDLL(str(out))
    lib.launch_update.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_float, ctypes.c_void_p]
    lib.launch_launcher.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_float, ctypes.c_int,
                                    ctypes.c_void_p]
    return lib


def _check(err: int, what: str) -> None:
    if err != 0:
        raise RuntimeError(f"{what}: cudaError {err}")


def forms(libs: dict, flag: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> dict:
    """``name -> fn()`` launching each form on the current stream (``y``: the stream's stand-in grid)."""
    n4 = x.numel() // 4

    def update(build, gated):
        return lambda: _check(libs[build].launch_update(flag.data_ptr() if gated else None, x.data_ptr(), n4, 1.0,
                                                        torch.cuda.current_stream().cuda_stream), "update")

    def launcher(fire_and_forget):
        return lambda: _check(libs["rdc"].launch_launcher(flag.data_ptr(), x.data_ptr(), n4, 1.0, int(fire_and_forget),
                                                          torch.cuda.current_stream().cuda_stream), "launcher")

    def rmw():
        _check(libs["plain"].launch_update(None, y.data_ptr(), y.numel() // 4, 1.0,
                                           torch.cuda.current_stream().cuda_stream), "rmw")

    device = x.device
    mark = torch.zeros(1, dtype=torch.int32, device=device)

    def beside(candidate):  # the candidate on the step's own side stream, as the flush launch runs
        def run():
            side = fork(device)
            with torch.cuda.stream(side):
                candidate()
            rmw()
            join(side, device)
        return run

    fns = {
        "rmw": rmw, "rmw|launcher": beside(launcher(False)), "rmw|gated": beside(update("plain", True)),
        "update": update("plain", False), "update rdc": update("rdc", False), "gated": update("plain", True),
        "launcher>update": launcher(False), "launcher~update": launcher(True),
    }
    then = {"rmw": rmw, "mark": lambda: mark.fill_(1)}  # what a sequence puts on the stream after its form
    for name in SEQUENCES:  # "form;then", in stream order
        first, second = name.split(";")
        fns[name] = lambda a=fns[first], b=then[second]: (a(), b())
    return fns


class _OrderCheck:
    """Captured after a form: counts the gain each replay should have made (``inc``) and keeps the
    extremes of ``x``'s minimum and maximum less that count. Where the stream's order covers the
    form's child grid both stay 0; a read that ran beside the child sees a part of ``x`` not yet
    updated. The minimum and maximum read every element, not only the first blocks' part."""

    def __init__(self, x: torch.Tensor):
        self.x = x
        self.inc = torch.zeros((), dtype=x.dtype, device=x.device)
        self.count = torch.zeros_like(self.inc)
        self.lo = torch.zeros_like(self.inc)
        self.hi = torch.zeros_like(self.inc)

    def reset(self, inc: float) -> None:
        self.inc.fill_(inc)
        for t in (self.count, self.lo, self.hi):
            t.zero_()

    def __call__(self) -> None:
        self.count.add_(self.inc)
        torch.minimum(self.lo, self.x.amin() - self.count, out=self.lo)
        torch.maximum(self.hi, self.x.amax() - self.count, out=self.hi)

    def verdict(self) -> str:
        return "ok" if float(self.lo) == 0.0 and float(self.hi) == 0.0 else \
            f"not kept (min-count {float(self.lo):g}, max-count {float(self.hi):g})"


def check_forms(fns: dict, flag: torch.Tensor, x: torch.Tensor, replays: int = 1,
                flush: L2Flusher | None = None) -> list[str]:
    """``replays`` replays (an L2 flush before each, as the timing runs them) of each flag-1 form's
    graph: with the flag set every element of ``x`` gains 1 a replay, with it clear none does (the
    host-launched ``update`` forms read no flag: 1 both times). ``order``: whether reads of all of
    ``x`` captured right after the form in its graph see its result after every replay; ``next``:
    the same reads as a graph of their own, replayed after each replay of the form's (the next
    decode step's view of a flush). Returns one line per form."""
    lines = []
    inside, after = _OrderCheck(x), _OrderCheck(x)
    reader = capture_graph(after, warmup=0)
    for name in FLAG1_FORMS:
        try:
            graph = capture_graph(lambda f=fns[name]: (f(), inside()), warmup=0)
            cells = []
            for value in (1, 0):
                flag.fill_(value)
                x.zero_()
                gain = 1.0 if name.startswith("update") else float(value)
                inside.reset(gain)
                after.reset(gain)
                for _ in range(replays):
                    if flush is not None:
                        flush()
                    graph.replay()
                    reader.replay()
                torch.cuda.synchronize()
                cells.append(f"flag {value}: values {'ok' if bool(torch.all(x == gain * replays)) else 'WRONG'}, "
                             f"order {inside.verdict()}, next {after.verdict()}")
            lines.append(f"{name}: " + "; ".join(cells))
        except Exception as exc:  # a form the driver refuses in a graph is a result, not a crash
            lines.append(f"{name}: failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})")
    return lines


def wall_us(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    """Host clock over ``replays`` back-to-back replays and a synchronize, per replay (no L2 flush):
    a check on the events, which a child grid could outlive."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - start) / replays


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=positive_int, default=1024, help="bytes each grid reads and writes, MiB")
    p.add_argument("--rounds", type=positive_int, default=30)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    print(device_info(), f"nvcc arch {arch}")
    libs = {build: library(build, arch) for build in BUILDS}
    n = args.mib << 18
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    x = torch.zeros(n, dtype=torch.float32, device="cuda")
    y = torch.zeros(n, dtype=torch.float32, device="cuda")
    fns = forms(libs, flag, x, y)
    flusher = L2Flusher()
    for line in check_forms(fns, flag, x):
        print(line)
    # A child launch that fails on the device leaves no host error: the sums over many flushed
    # replays show whether every replay's child ran, the way the timing replays them.
    print(f"over {args.rounds} replays, L2 flushed before each:")
    for line in check_forms(fns, flag, x, replays=args.rounds, flush=flusher):
        print(line)
    floor = graph_floor_us(flusher, args.rounds)
    print(f"\nus per replay, median of {args.rounds} rotated rounds, L2 flushed before each; floor {floor:.1f};"
          f" wall: host clock over {args.rounds} back-to-back replays")
    print("| flag | form | us | wall us |")
    print("|---|---|---|---|")
    for value, names in ((0, ("rmw", "rmw|launcher", "rmw|gated")), (1, FLAG1_FORMS + SEQUENCES)):
        flag.fill_(value)
        graphs = {}
        for name in names:
            try:
                graphs[name] = capture_graph(fns[name])
            except Exception as exc:
                print(f"| {value} | {name} | not captured: {type(exc).__name__} | |")
        time_replays(list(graphs.values()), rounds=3, flush=flusher, rotate=True)
        times = time_replays(list(graphs.values()), rounds=args.rounds, flush=flusher, rotate=True)
        for i, name in enumerate(graphs):
            print(f"| {value} | {name} | {median([r[i] for r in times]):.1f} | {wall_us(graphs[name], args.rounds):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
