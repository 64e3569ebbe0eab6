"""Plot ``bench_gdn_paper.py`` / ``bench_mamba2_paper.py --json`` results: each step's amortized
and staggered speedup over the file's baseline (fla's step for Gated DeltaNet, the in-project
standard step for Mamba-2), ours against the paper's kernels, against batch size.

    python benchmarks/plot_paper.py gdn_paper.json --out gdn_paper.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _plotting import batch_axes, refusals, save, speedup_lines  # noqa: E402

BASELINES = ("fla", "standard")
LABELS = {"replay default": "ours", "replay fused": "ours, one launch"}


def load(path) -> tuple[dict, str, dict[str, dict[int, tuple[float, float]]]]:
    """``(file, baseline name, {step: {batch: (amortized x, staggered x)}})``, each ratio against
    the baseline of its own batch."""
    data = json.loads(Path(path).read_text())
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ValueError(f"json: expected the output of bench_gdn_paper.py / bench_mamba2_paper.py --json "
                         f"(a 'rows' list), got none in {path}")
    base = {(r["batch"], r["mode"]): r["us"] for r in rows if r.get("mode") in BASELINES}
    names = {m for _, m in base}
    if len(names) != 1:
        raise ValueError(f"json: expected one baseline ({' or '.join(BASELINES)}) per batch in {path}, found "
                         f"{sorted(names) or 'none'}")
    baseline = names.pop()
    steps: dict[str, dict[int, tuple[float, float]]] = {}
    for r in rows:
        if r.get("mode") in BASELINES or "amortized" not in r:
            continue
        ref = base.get((r["batch"], baseline))
        if ref is None:
            raise ValueError(f"json: batch {r['batch']} has no {baseline} step in {path}")
        staggered = r.get("staggered", r.get("mixed", r["amortized"]))
        steps.setdefault(LABELS.get(r["mode"], r["mode"]), {})[r["batch"]] = (ref / r["amortized"], ref / staggered)
    if not steps:
        raise ValueError(f"json: no timed ReplaySSM steps in {path}")
    return data, baseline, steps


def plot(path, out) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data, baseline, steps = load(path)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    batches = sorted({b for s in steps.values() for b in s})
    for name, by_batch in steps.items():
        xs = sorted(by_batch)
        style = dict(marker="o", linewidth=2) if name.startswith("ours") else dict(marker="s", linestyle="--")
        for i, ax in enumerate(axes):
            ax.plot(xs, [by_batch[b][i] for b in xs], label=name, **style)
    target = 1.8
    for ax, what in zip(axes, ("amortized (every slot in phase)", "staggered phases")):
        speedup_lines(ax, target, f"x {baseline} step, {what}")
    batch_axes(axes, batches)
    gpu = data.get("device", {}).get("gpu", "GPU")
    kind = "Mamba-2" if baseline == "standard" else "Gated DeltaNet"
    return save(fig, axes, f"{kind} ReplaySSM: ours and the paper's public kernels ({gpu}, fp32 state, L=16)", out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", help="a bench_gdn_paper.py / bench_mamba2_paper.py --json file")
    p.add_argument("--out", required=True, help="the PNG to write")
    args = p.parse_args(argv)
    with refusals(p, "the output of bench_gdn_paper.py / bench_mamba2_paper.py --json"):
        print(plot(args.json, args.out))


if __name__ == "__main__":
    main()
