"""Registers and spills of NVRTC-compiled PTX, assembled by the ptxas Triton ships for sm_90 and
later (no GPU needed): what the CUDA C++ kernels' compile tests check."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

try:
    import triton

    PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas-blackwell"
except ImportError:  # pragma: no cover - triton is a dependency
    PTXAS = None

HAVE_PTXAS = PTXAS is not None and PTXAS.exists()


def assemble(ptx: str, sm: int, path: Path) -> tuple[int, int, str]:
    """``(registers, spill-store bytes, ptxas's log)`` of ``ptx`` for ``sm_<sm>``, written to
    ``path`` first; the PTX's version is lowered to one Triton's ptxas reads (the kernels use no
    newer instruction). Fails the calling test where ptxas refuses it."""
    path.write_text(re.sub(r"^\.version \d+\.\d+", ".version 8.8", ptx, flags=re.M))
    run = subprocess.run([str(PTXAS), "-v", f"--gpu-name=sm_{sm}", str(path), "-o", str(path.with_suffix(".cubin"))],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    regs = int(re.search(r"Used (\d+) registers", run.stderr).group(1))
    spills = int(re.search(r"(\d+) bytes spill stores", run.stderr).group(1))
    return regs, spills, run.stderr
