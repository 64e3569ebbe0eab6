"""Plot a ``bench_mamba2_decode.py --json`` result: ReplaySSM's speedup over the standard step
and the share of copy bandwidth each step reaches, against batch size, per model shape.

    python benchmarks/plot_mamba2.py mamba2.json --out mamba2.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _plotting import batch_axes, refusals, save, speedup_lines  # noqa: E402


def load_results(path: Path) -> tuple[dict, list[dict]]:
    """``(run description, per-(dims, batch) records)`` of a benchmark JSON file."""
    data = json.loads(Path(path).read_text())
    records = data.get("results") if isinstance(data, dict) else None
    if not records:
        raise ValueError(f"json: expected the output of bench_mamba2_decode.py --json (a 'results' list), got none in {path}")
    return data, records


def plot(data: dict, records: list[dict], out: Path, target: float = 1.8) -> Path:
    """Two panels (speedup; % of copy) against batch, one line style per model shape; saves ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = sorted({r["dims"] for r in records})
    fig, (ax_speed, ax_copy) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, name in enumerate(shapes):
        rows = sorted((r for r in records if r["dims"] == name), key=lambda r: r["batch"])
        batches = [r["batch"] for r in rows]
        style = dict(marker="o", linestyle="-" if i == 0 else "--")
        ax_speed.plot(batches, [r["speedup_amortized"] for r in rows], label=f"{name}: amortized (15 + 1)", **style)
        ax_speed.plot(batches, [r["speedup_mixed"] for r in rows], label=f"{name}: staggered phases", alpha=0.6, **style)
        for key, label in (("standard_pct_copy", "standard"), ("nonflush_pct_copy", "ReplaySSM non-flush"),
                           ("flush_pct_copy", "ReplaySSM flush")):
            ax_copy.plot(batches, [r[key] for r in rows], label=f"{name}: {label}", **style)
    batch_axes((ax_speed, ax_copy), sorted({r["batch"] for r in records}))
    speedup_lines(ax_speed, target, "speedup over the standard step (same run)")
    ax_copy.set_ylabel("% of device copy bandwidth")
    device = data.get("device", {})
    return save(fig, (ax_speed, ax_copy), f"Mamba-2 decode, {device.get('gpu', 'GPU')}: fp32 state, "
                f"{data.get('activation', '')} activations, L={data.get('window', '')}", out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", type=Path, help="bench_mamba2_decode.py --json output")
    p.add_argument("--out", type=Path, default=None, help="PNG path (default: beside the JSON)")
    p.add_argument("--target", type=float, default=1.8, help="speedup line to draw")
    args = p.parse_args(argv)
    with refusals(p, "the output of bench_mamba2_decode.py --json"):
        data, records = load_results(args.json)
        out = plot(data, records, args.out or args.json.with_suffix(".png"), args.target)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
