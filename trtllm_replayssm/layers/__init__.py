"""Decode-side SSM mixers, weight-compatible with the Hugging Face modules they are built from.

Each mixer holds its conv state and its ReplaySSM state per cache slot and decodes with the
ReplaySSM ops (``mode="replay"``) or the standard recurrence (``mode="standard"``).
"""

from .gdn import ReplayGatedDeltaNet
from .kda import ReplayKimiDeltaAttention
from .mamba2 import ReplayMamba2Mixer

__all__ = ["ReplayGatedDeltaNet", "ReplayKimiDeltaAttention", "ReplayMamba2Mixer"]
