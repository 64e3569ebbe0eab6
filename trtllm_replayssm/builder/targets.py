"""Target GPUs: what the builder assumes about each one and the state configuration it picks.

A preset fills every option the user left out; an explicit option always wins. The split
configuration (FP16 recurrence checkpoint with stochastic rounding, NVFP4 read copy) is the one
the ReplaySSM measurements found closest to FP32 state at a fraction of its read bytes: FP16+SR
recurrence tracks the FP32 one, and the NVFP4 read copy's error does not grow with length
(replayssm-math.md section 4).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TARGETS", "Target"]


@dataclass(frozen=True)
class Target:
    """One deployment GPU.

    Attributes:
        name: the ``--target`` spelling.
        sm: CUDA architecture the kernels are compiled for (``sm_103``, ``sm_100``, ``sm_90``).
        memory_bytes: HBM capacity of one GPU.
        native_fp4: the tensor cores run NVFP4 GEMMs; without them NVFP4 weights are
            dequantized to BF16 in the GEMM prologue (same bytes moved, no FP4 math).
        quantization / ssm_checkpoint / ssm_read: the preset values of those options.
    """

    name: str
    sm: str
    memory_bytes: int
    native_fp4: bool
    quantization: str = "nvfp4"
    ssm_checkpoint: str = "fp16-sr"
    ssm_read: str = "nvfp4"

    @property
    def weight_path_note(self) -> str:
        if self.native_fp4:
            return f"NVFP4 GEMMs run on the {self.sm} FP4 tensor cores"
        return (
            f"{self.sm} has no FP4 tensor cores: NVFP4 weights are dequantized to BF16 before the "
            "GEMM (memory saving kept, no FP4 math); the NVFP4 state read copy is decoded in registers"
        )


_GB = 10**9
TARGETS: dict[str, Target] = {
    "b300": Target("b300", "sm_103", 288 * _GB, native_fp4=True),
    "b200": Target("b200", "sm_100", 180 * _GB, native_fp4=True),
    "h200": Target("h200", "sm_90", 141 * _GB, native_fp4=False),
    "h100": Target("h100", "sm_90", 80 * _GB, native_fp4=False),
}
