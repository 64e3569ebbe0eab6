"""What the GPU's clocks, power and clock-event reasons were while each part of a run went on.

``run_gpu_suite.sh clocks`` samples ``nvidia-smi`` every 50 ms into ``$OUT/clocks.csv``
(``--format=csv,noheader,nounits``: timestamp, SM clock MHz, memory clock MHz, power W, GPU
temperature, memory temperature, the active clock-event reasons as a hex mask) and writes a line
``<nvidia-smi timestamp> <name>`` to ``$OUT/clock_marks.txt`` as each part starts. This script
reads both and prints, per part, the samples' SM clock, power and temperatures and how often each
clock-event reason was active.

Why: on one H200 the Mamba-2 all-flush step grew from one repeat to the next within a process
(1131.8 -> 1320.1 -> 1440.7 us at Nemotron-H 512) while the standard step timed beside it stayed
steady (benchmarks/NOTES_mamba2.md, fifty-ninth run). A flush step folds on every SM while the
memory runs at full rate; if it reaches the board's power limit the SM clock drops in it alone.

    python3 benchmarks/gpu_clocks.py OUT_DIR
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import statistics
import sys
from pathlib import Path

#: The clock-event reason bits of NVML (``nvmlClocksEventReason*``) that say why clocks are low.
REASONS = {
    0x1: "idle",
    0x2: "app clocks",
    0x4: "sw power cap",
    0x8: "hw slowdown",
    0x10: "sync boost",
    0x20: "sw thermal",
    0x40: "hw thermal",
    0x80: "hw power brake",
}
POWER_CAP = 0x4
TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"


def parse_time(text: str) -> dt.datetime:
    """An ``nvidia-smi`` timestamp (``2026/12/06 20:45:01.123``), or ``date``'s form of it with
    nanoseconds, which ``strptime`` does not take (cut to microseconds)."""
    text = text.strip()
    day, _, frac = text.partition(".")
    return dt.datetime.strptime(f"{day}.{(frac or '0')[:6]}", TIME_FORMAT)


def read_samples(path: Path) -> list[dict]:
    """The samples of ``clocks.csv``; lines that are not a full sample (a header, a cut last line,
    ``[N/A]`` in any field but the memory temperature) are skipped. A memory temperature the board
    does not report is kept as NaN."""
    samples = []
    for line in path.read_text().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 7:
            continue
        try:
            samples.append(dict(time=parse_time(fields[0]), sm_mhz=float(fields[1]), mem_mhz=float(fields[2]),
                                power_w=float(fields[3]), gpu_c=float(fields[4]),
                                mem_c=float(fields[5]) if fields[5] not in ("", "N/A", "[N/A]") else float("nan"),
                                reasons=int(fields[6], 16)))
        except ValueError:
            continue
    return samples


def read_marks(path: Path) -> list[tuple[dt.datetime, str]]:
    """``(start, name)`` of each part, in the file's order."""
    marks = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            marks.append((parse_time(f"{parts[0]} {parts[1]}"), " ".join(parts[2:])))
    return marks


def summarize(samples: list[dict], marks: list[tuple[dt.datetime, str]]) -> list[dict]:
    """Per part (from its mark to the next; the last to the last sample): the number of samples,
    the SM clock's median and minimum, its median over the samples under the power cap
    (``sm_capped_median``: NaN where none was; a part's medians also hold its process's set-up,
    at idle clocks), the power's median and maximum, the hottest temperatures, and for each reason
    seen the share of samples it was active in."""
    if not marks:
        raise ValueError("marks: expected at least one part")
    rows = []
    for i, (start, name) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else dt.datetime.max
        part = [s for s in samples if start <= s["time"] < end]
        row = dict(part=name, samples=len(part))
        if part:
            sm = [s["sm_mhz"] for s in part]
            power = [s["power_w"] for s in part]
            capped = [s["sm_mhz"] for s in part if s["reasons"] & POWER_CAP]
            row.update(sm_median=statistics.median(sm), sm_min=min(sm),
                       sm_capped_median=statistics.median(capped) if capped else float("nan"),
                       power_median=statistics.median(power),
                       power_max=max(power), gpu_c_max=max(s["gpu_c"] for s in part),
                       mem_c_max=max((s["mem_c"] for s in part if not math.isnan(s["mem_c"])), default=float("nan")),
                       reasons={name_: sum(1 for s in part if s["reasons"] & bit) / len(part)
                                for bit, name_ in REASONS.items() if any(s["reasons"] & bit for s in part)})
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| part | samples | SM MHz median (min) | SM MHz under the power cap | power W median (max) "
             "| GPU / memory C max | reasons (share of samples) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["samples"]:
            lines.append(f"| {r['part']} | 0 | | | | | |")
            continue
        reasons = ", ".join(f"{k} {v:.0%}" for k, v in r["reasons"].items()) or "none"
        capped = "" if math.isnan(r["sm_capped_median"]) else f"{r['sm_capped_median']:.0f}"
        lines.append(f"| {r['part']} | {r['samples']} | {r['sm_median']:.0f} ({r['sm_min']:.0f}) | {capped} | "
                     f"{r['power_median']:.0f} ({r['power_max']:.0f}) | {r['gpu_c_max']:.0f} / {r['mem_c_max']:.0f} | "
                     f"{reasons} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="the folder holding clocks.csv and clock_marks.txt")
    args = p.parse_args(argv)
    csv, marks = args.out / "clocks.csv", args.out / "clock_marks.txt"
    for path in (csv, marks):
        if not path.is_file():
            p.error(f"out: expected {path.name} in {args.out} (run_gpu_suite.sh clocks writes it)")
    samples = read_samples(csv)
    if not samples:
        p.error(f"out: {csv} holds no sample")
    print(table(summarize(samples, read_marks(marks))))


if __name__ == "__main__":
    sys.exit(main())
