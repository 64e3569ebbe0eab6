"""What the benchmark plots share: batch axes, the speedup reference lines, saving."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path


def batch_axes(axes, ticks) -> None:
    """Log2 batch axes labelled with the batches run, with a light grid."""
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(b) for b in ticks])
        ax.set_xlabel("batch (sequences)")
        ax.grid(True, which="both", alpha=0.3)


def speedup_lines(ax, target: float, ylabel: str) -> None:
    """Parity at 1.0 and the ``target`` speedup as reference lines."""
    ax.axhline(1.0, color="gray", linewidth=1)
    ax.axhline(target, color="tab:red", linewidth=1, linestyle=":", label=f"target {target}x")
    ax.set_ylabel(ylabel)


def save(fig, axes, title: str, out) -> Path:
    """Legends, ``title``, then ``out`` (parents created) as a PNG; closes ``fig``."""
    import matplotlib.pyplot as plt

    for ax in axes:
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


@contextlib.contextmanager
def refusals(p, what: str):
    """Turn a plot script's reading errors into usage errors (exit 2) that name its input:
    ``what`` says which benchmark's ``--json`` output the script reads."""
    try:
        yield
    except FileNotFoundError as err:
        p.error(f"json: no such file: {err.filename}")
    except json.JSONDecodeError as err:
        p.error(f"json: not JSON ({err}); expected {what}")
    except KeyError as err:
        p.error(f"json: a row lacks the field {err}; expected {what}")
    except ValueError as err:
        p.error(str(err))
