"""What a CUDA graph conditional node costs a replay whose body it skips.

A flush launch in grid form folds at copy speed but, with a block for every (row, head) of the
batch, costs a wave of early exits in every step that has no flush row (NOTES_mamba2.md,
thirty-first and thirty-third runs). An ``IF`` node (``_graph_conditional.py``) whose handle
a kernel of the step sets would run that grid only in the steps that need it. This probe checks,
on the GPU at hand, that a module calling ``cudaGraphSetConditional`` loads and sets the handle
(the body runs in exactly the replays whose flag is set), then times replays of graphs that
differ only by such a node:

- ``serial``: a one-block setter kernel, with or without the ``IF`` node after it (the node's
  own cost on a graph's critical path);
- ``beside``: a ``--mib`` device copy on the capturing stream and the setter on a side stream
  (``--priority``) joined after it, with or without the node after the setter (the node off the
  critical path, as the step would have it beside its stream launch);
- ``after``: the copy, then the setter and the node on the same stream;
- with the flag set, the body (one block bumping a counter) run by the node and launched plainly.

    PYTHONPATH=$PWD python3 benchmarks/probe_graph_conditional.py [--mib 512] [--rounds 200]
"""

from __future__ import annotations

import argparse
import functools
import ctypes
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _graph_conditional as gc  # noqa: E402
from _timing import capture_graph, device_info, median, time_replays  # noqa: E402

from trtllm_replayssm.ops import _nvrtc  # noqa: E402

SOURCE = gc.DEVICE_DECLARATION + r"""
extern "C" __global__ void set_if(unsigned long long handle, const int* flag, int use_handle) {
    if (threadIdx.x == 0 && use_handle && *flag) cudaGraphSetConditional(handle, 1u);
}
extern "C" __global__ void bump(int* counter) {
    if (threadIdx.x == 0) atomicAdd(counter, 1);
}
"""


def kernels(device):
    setter = _nvrtc.load_kernel(SOURCE, "set_if", {}, (ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int32), device)
    bump = _nvrtc.load_kernel(SOURCE, "bump", {}, (ctypes.c_void_p,), device)
    return setter, bump


@functools.lru_cache(maxsize=None)
def _side(device, priority: str) -> torch.cuda.Stream:
    low, high = torch.cuda.Stream.priority_range()
    return torch.cuda.Stream(device=device, priority=high if priority == "high" else low)


def build(form: str, setter, bump, flag, counter, src, dst, priority: str = "high"):
    """One graph of ``form``: (``serial`` | ``beside`` | ``after``) x (``plain`` | ``if`` | ``body``);
    ``priority``: the side stream's (``beside``)."""
    layout, node = form.split("-")
    device = flag.device

    def step():
        stream = torch.cuda.current_stream(device)
        capturing = torch.cuda.is_current_stream_capturing()
        side = None
        if layout == "beside":
            side = _side(device, priority)
            side.wait_stream(stream)
            dst.copy_(src)
            stream = side
        elif layout == "after":
            dst.copy_(src)
        with torch.cuda.stream(stream):
            handle = gc.create_handle(stream) if capturing and node == "if" else 0
            setter.launch(1, 32, 0, (handle, flag.data_ptr(), int(handle != 0)), stream.cuda_stream)
            if node == "if" and capturing:
                gc.if_node(stream, handle, lambda: bump.launch(1, 32, 0, (counter.data_ptr(),),
                                                               torch.cuda.current_stream(device).cuda_stream),
                           device)
            elif node == "body":
                bump.launch(1, 32, 0, (counter.data_ptr(),), stream.cuda_stream)
        if side is not None:
            torch.cuda.current_stream(device).wait_stream(side)

    gc.body_stream(device)  # created before the capture
    return capture_graph(step)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, default=512, help="size of the copy beside the setter")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--priority", choices=("high", "low"), nargs="+", default=["high", "low"],
                   help="the side stream's priority (the step's flush stream is high)")
    args = p.parse_args(argv)
    if args.mib < 1 or args.rounds < 1:
        p.error(f"--mib / --rounds: expected >= 1, got {args.mib} / {args.rounds}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    if not gc.available():
        p.error("the CUDA driver has no conditional-node entry points (CUDA 12.4 or later)")
    device = torch.device("cuda", torch.cuda.current_device())
    print(device_info())
    print("torch.cuda.CUDAGraph conditional methods:",
          [m for m in dir(torch.cuda.CUDAGraph) if "cond" in m.lower()] or "none")
    setter, bump = kernels(device)
    print(f"set_if: {setter.num_regs} registers")
    flag = torch.zeros(1, dtype=torch.int32, device=device)
    counter = torch.zeros(1, dtype=torch.int32, device=device)
    src = torch.empty(args.mib << 18, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    forms = [f"{a}-{b}" for a in ("serial", "after") for b in ("plain", "if", "body")]
    graphs = {f: build(f, setter, bump, flag, counter, src, dst) for f in forms}
    for priority in args.priority:
        graphs.update({f"beside-{b}-{priority}": build(f"beside-{b}", setter, bump, flag, counter, src, dst, priority)
                       for b in ("plain", "if", "body")})

    # The handle decides: the body runs in the replays whose flag is set, and only in those.
    for value, want in ((0, 0), (1, 10), (0, 0)):
        flag.fill_(value)
        counter.zero_()
        for _ in range(10):
            graphs["serial-if"].replay()
        torch.cuda.synchronize()
        got = int(counter.item())
        print(f"flag {value}: body ran {got} of 10 replays ({'ok' if got == want else f'WRONG, expected {want}'})")
        if got != want:
            return 1

    print(f"\nus per replay, median of {args.rounds} (rotated rounds; the copy: {args.mib} MiB)")
    print("| layout | flag | plain | IF node | body launched |")
    print("|---|---|---|---|---|")
    for layout in ("serial", "after", *(f"beside-{q}" for q in args.priority)):
        for value in (0, 1):
            flag.fill_(value)
            names = [f"{layout.split('-')[0]}-{n}" + (f"-{layout.split('-')[1]}" if "-" in layout else "")
                     for n in ("plain", "if", "body")]
            time_replays([graphs[n] for n in names], rounds=20, rotate=True)
            t = time_replays([graphs[n] for n in names], rounds=args.rounds, rotate=True)
            cells = [f"{median([r[i] for r in t]):.2f}" for i in range(3)]
            print(f"| {layout} | {value} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
