"""The Kimi Delta Attention reference: ReplaySSM against the plain recurrence in float64 (the
suite in delta_rule_harness.py), the recurrence against fla's naive reference and its fused_recurrent kernel."""

import pytest

from delta_rule_harness import KDA, DeltaRuleReferenceChecks
from fla_naive import check_against_fla_fused_recurrent, check_against_fla_naive


class TestKDAReference(DeltaRuleReferenceChecks):
    kind = KDA

    @pytest.mark.parametrize("HV,H", [(2, 2), (4, 2)])
    def test_matches_fla_naive(self, HV, H):
        check_against_fla_naive(self.layer(HV, H, d_k=8, d_v=6, seed=HV + H))

    @pytest.mark.parametrize("HV,H", [(2, 2), (4, 2)])
    def test_matches_fla_fused_recurrent_interpreted(self, HV, H):
        check_against_fla_fused_recurrent(self.layer(HV, H, d_k=8, d_v=8, seed=10 + HV + H))
