"""Plot ``bench_gdn_decode.py`` / ``bench_kda_decode.py`` results (plain runs or ``--variants``):
each kernel's amortized and staggered speedup over a baseline measured in the same file, and its
non-flush step's share of copy bandwidth, against batch size. Several files (e.g. runs at
different batches) are merged; a ratio only ever uses the baseline of its own file and batch. A
plain run's kernels are "replay", "replay refold", ...; their staggered line is the steady-state
row where the file has one (consecutive steps from the cache's staggered placement), the
one-offset row otherwise.

    python benchmarks/plot_delta.py gdn_128_256.json gdn_32_64.json --out gdn.png \\
        --name "flush_warps=2" "default, refold=False" --name rowwise row-wise
    python benchmarks/plot_delta.py benchmarks/results/gdn_2026-12-02_h200_plain_twentieth.json --out gdn.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _plotting import batch_axes, refusals, save, speedup_lines  # noqa: E402

BASELINES = ("fla", "standard")
#: A plain run's row modes: ``"<kernel> <step>"`` (``"replay amortized"``, ``"replay refold steady"``).
PLAIN_STEPS = ("non-flush", "flush", "amortized", "staggered", "steady")


def plain_rows(rows: list[dict]) -> list[dict]:
    """A plain run's rows (``{"batch", "mode", "us", "pct_copy"}``, one per kernel and step) in the
    ``--variants`` shape: one row per (batch, kernel) with ``amortized_us``, ``nonflush_us``,
    ``nonflush_pct_copy`` and ``staggered_us`` (the steady-state row where present); baselines
    keep their mode with ``amortized_us``; ``--sweep``'s forced-``BV`` rows are left out."""
    steps: dict[tuple[int, str], dict[str, dict]] = {}
    out = []
    for r in rows:
        if r["mode"] in BASELINES:
            out.append({"batch": r["batch"], "mode": r["mode"], "amortized_us": r["us"]})
            continue
        kernel, _, step = r["mode"].rpartition(" ")
        # "--sweep"'s rows ("replay BV=16 ...") force a tile height at one or two batches: a
        # tuning probe, not a kernel the ops launch, so not a line of the plot.
        if step in PLAIN_STEPS and kernel and " BV=" not in kernel:
            steps.setdefault((r["batch"], kernel), {})[step] = r
    for (batch, kernel), by_step in steps.items():
        if "amortized" not in by_step or "non-flush" not in by_step:
            continue
        staggered = by_step.get("steady") or by_step.get("staggered") or by_step["amortized"]
        out.append({"batch": batch, "mode": kernel, "amortized_us": by_step["amortized"]["us"],
                    "nonflush_us": by_step["non-flush"]["us"], "staggered_us": staggered["us"],
                    "nonflush_pct_copy": by_step["non-flush"].get("pct_copy")})
    return out


def load_rows(paths) -> tuple[dict, list[dict]]:
    """``(first file's description, timed rows)``; each row gains ``x_baseline`` per baseline of its
    own file and batch (``x_fla``, ``x_standard``) where that baseline was timed."""
    rows, first = [], None
    for path in paths:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError(f"json: expected the output of bench_gdn_decode.py / bench_kda_decode.py [--variants] "
                             f"--json (a 'rows' list), got none in {path}")
        first = first or data
        timed = data["rows"]
        if any("us" in r and "amortized_us" not in r for r in timed):  # a plain run
            timed = plain_rows(timed)
        base = {(r["batch"], r["mode"]): r["amortized_us"] for r in timed if r["mode"] in BASELINES}
        for r in timed:
            if r["mode"] in BASELINES or "nonflush_us" not in r:
                continue
            row = dict(r)
            for name in BASELINES:
                if (r["batch"], name) in base:
                    row[f"x_{name}"] = base[r["batch"], name] / r["amortized_us"]
                    # a write-through row has one step time: its staggered step is the same
                    row[f"x_{name}_staggered"] = base[r["batch"], name] / r.get("staggered_us", r["amortized_us"])
            rows.append(row)
    if not rows:
        raise ValueError(f"json: no timed ReplaySSM rows in {', '.join(map(str, paths))}")
    return first, rows


def label_of(mode: str, names: list[tuple[str, str]]) -> str | None:
    """The label of the first ``(substring, label)`` whose substring is in ``mode``; with no
    ``names`` the mode itself; ``None`` (not plotted) when ``names`` match nothing."""
    if not names:
        return mode
    return next((label for sub, label in names if sub in mode), None)


def plot(data: dict, rows: list[dict], out: Path, baseline: str = "fla", names=(), target: float = 1.8) -> Path:
    """Two panels (speedup over ``baseline``; non-flush % of copy) against batch; saves ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = f"x_{baseline}"
    lines = {}
    named = [r for r in rows if label_of(r["mode"], list(names)) is not None]
    if not named:
        raise ValueError(f"--name: no row's kernel name contains {' or '.join(repr(sub) for sub, _ in names)}")
    for r in named:
        if key in r:
            lines.setdefault(label_of(r["mode"], list(names)), {})[r["batch"]] = r
    if not lines:
        raise ValueError(f"--baseline {baseline}: no plotted row has that baseline in its own file")
    fig, (ax_speed, ax_copy) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (label, by_batch) in enumerate(sorted(lines.items())):
        batches = sorted(by_batch)
        color = f"C{i}"
        ax_speed.plot(batches, [by_batch[b][key] for b in batches], marker="o", color=color,
                      label=f"{label}: amortized (15 + 1)")
        ax_speed.plot(batches, [by_batch[b][f"{key}_staggered"] for b in batches], marker="o", linestyle="--",
                      color=color, alpha=0.6, label=f"{label}: staggered phases")
        ax_copy.plot(batches, [by_batch[b].get("nonflush_pct_copy") or float("nan") for b in batches], marker="o",
                     color=color, label=label)
    batch_axes((ax_speed, ax_copy), sorted({b for by_batch in lines.values() for b in by_batch}))
    speedup_lines(ax_speed, target, f"speedup over {baseline} (same run)")
    ax_copy.set_ylabel("non-flush step, % of device copy bandwidth")
    device = data.get("device", {})
    return save(fig, (ax_speed, ax_copy), f"{str(data.get('kind', 'delta rule')).upper()} decode, "
                f"{device.get('gpu', 'GPU')}: fp32 state, {data.get('dtype', '')} activations, "
                f"L={data.get('window', '')}", out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", type=Path, nargs="+", help="bench_gdn_decode.py / bench_kda_decode.py [--variants] --json")
    p.add_argument("--out", type=Path, default=None, help="PNG path (default: beside the first JSON)")
    p.add_argument("--baseline", default="fla", choices=BASELINES)
    p.add_argument("--name", nargs=2, action="append", default=[], metavar=("SUBSTRING", "LABEL"),
                   help="plot only kernels whose name contains SUBSTRING, as LABEL (repeatable; first match wins)")
    p.add_argument("--target", type=float, default=1.8, help="speedup line to draw")
    args = p.parse_args(argv)
    with refusals(p, "the output of bench_gdn_decode.py / bench_kda_decode.py [--variants] --json"):
        data, rows = load_rows(args.json)
        out = plot(data, rows, args.out or args.json[0].with_suffix(".png"), args.baseline, args.name, args.target)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
