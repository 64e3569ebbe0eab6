"""Registers every ReplaySSM op as ``torch.ops.replayssm.*`` (import side effect)."""

from . import mamba2  # noqa: F401
from . import gdn, kda  # noqa: F401
