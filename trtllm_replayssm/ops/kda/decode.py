"""KDA decode kernels: the delta-rule kernels of ``ops/gdn/decode.py`` with ``PER_CHANNEL``.

One kernel serves both kinds: a ``[batch, HV, d_k]`` decay input ``a`` (and a
``[slots, HV, capacity, d_k]`` ``ring_g``) switches the per-channel decay on at compile time.
"""

from ..gdn.decode import delta_replay_step as kda_replay_step
from ..gdn.decode import delta_standard_step as kda_standard_step
from ..gdn.decode import launch_config

__all__ = ["kda_replay_step", "kda_standard_step", "launch_config"]
