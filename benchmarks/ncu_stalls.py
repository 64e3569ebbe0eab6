"""Where a kernel's warps wait, per SASS instruction: Nsight Compute's source page (stall sampling)
summarised as the stall reasons' shares and the instructions holding the most samples.

    ncu --clock-control none -k regex:flush --launch-skip 1 -c 1 --section WarpStateStats \\
        --section SourceCounters -o flush python3 benchmarks/ncu_flush_step.py --kind kda --refold
    ncu -i flush.ncu-rep --page source --csv --print-source sass > flush_sass.csv
    python3 benchmarks/ncu_stalls.py flush_sass.csv [--top 20]          # .csv or .csv.gz

Each top instruction is printed with its address, its share of all samples, the SASS text and
its two largest stall reasons; the stalled-on producer is usually an earlier load or barrier
(look a few instructions up).
"""

from __future__ import annotations

import argparse
import csv
import gzip
from collections import Counter
from dataclasses import dataclass

SAMPLES = "Warp Stall Sampling (All Samples)"


@dataclass
class Instruction:
    address: str
    source: str
    samples: int
    executed: int
    stalls: dict[str, int]


def read_source_page(path: str) -> tuple[str, list[Instruction]]:
    """``(kernel name, instructions)`` from ``ncu --page source --csv --print-source sass``
    output: a ``"Kernel Name",NAME`` line, then a header row and one row per instruction."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if start is None or SAMPLES not in rows[start]:
        raise ValueError(f"{path}: expected ncu's source page (--page source --csv) with a {SAMPLES!r} column")
    kernel = next((r[1] for r in rows[:start] if len(r) > 1 and r[0] == "Kernel Name"), "?")
    header = rows[start]
    col = {name: i for i, name in enumerate(header)}
    stall_cols = [(name[len("stall_"):], i) for name, i in col.items()
                  if name.startswith("stall_") and "Not Issued" not in name]
    out = []
    for r in rows[start + 1:]:
        if len(r) < len(header):
            continue
        out.append(Instruction(r[col["Address"]], r[col["Source"]].strip(), _int(r[col[SAMPLES]]),
                               _int(r[col.get("Instructions Executed", col[SAMPLES])]),
                               {name: _int(r[i]) for name, i in stall_cols}))
    return kernel, out


def _int(text: str) -> int:
    return int(text.replace(",", "")) if text.strip() not in ("", "-") else 0


def summarise(instructions: list[Instruction], top: int = 20) -> str:
    total = sum(ins.samples for ins in instructions) or 1
    reasons = Counter()
    for ins in instructions:
        reasons.update(ins.stalls)
    lines = [f"{total} samples, {sum(ins.executed for ins in instructions):,} warp instructions executed",
             "stall reasons: " + ", ".join(f"{name} {100 * n / total:.1f}%" for name, n in reasons.most_common(8))]
    for ins in sorted(instructions, key=lambda i: -i.samples)[:top]:
        two = sorted(ins.stalls.items(), key=lambda kv: -kv[1])[:2]
        lines.append(f"{100 * ins.samples / total:5.1f}%  {ins.address[-6:]:>6}  {ins.source[:64]:<64}  "
                     + ", ".join(f"{name} {n}" for name, n in two if n))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="ncu --page source --csv --print-source sass output (.csv or .csv.gz)")
    p.add_argument("--top", type=int, default=20, help="instructions to list (most samples first)")
    args = p.parse_args(argv)
    kernel, instructions = read_source_page(args.csv)
    print(f"{kernel}: {len(instructions)} SASS instructions")
    print(summarise(instructions, args.top))


if __name__ == "__main__":
    main()
