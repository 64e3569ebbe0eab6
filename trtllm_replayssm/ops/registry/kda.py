"""``torch.ops.replayssm.kda_*``: the GDN ops of ``registry/gdn.py`` under KDA's names (the
per-channel decay is told apart by the rank of ``a`` and ``ring_g``)."""

from __future__ import annotations

from .gdn import define_delta_rule_ops

__all__ = ["kda_replay_step", "kda_standard_step"]

kda_standard_step, kda_replay_step = define_delta_rule_ops("kda")
