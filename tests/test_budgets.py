"""Budgets over worst-case re-identification and utility: who meets them, by how much others miss."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tasks.errors import ConfigError
from tasks.privacy.attacks import worst_case
from tasks.report.budgets import check_budget, parse_budget


def test_budget_uses_the_worst_attack_and_says_by_how_much_others_miss() -> None:
    attacks = pd.DataFrame({
        "strategy": ["copy", "copy", "stymask", "stymask", "dp", "dp"],
        "attack": ["minhash", "stylometric"] * 3,
        "adversary": ["disjoint"] * 6,
        "accuracy_at_1": [0.05, 0.425, 0.02, 0.30, 0.01, 0.04],
    })
    worst = worst_case(attacks).rename(columns={"accuracy_at_1": "reidentification"})
    table = worst.merge(pd.DataFrame({"strategy": ["copy", "stymask", "dp"], "utility": [1.0, 0.95, None]}))
    got = check_budget(table, parse_budget("reidentification<=0.10, utility>=0.90")).set_index("strategy")
    # copy passes MinHash (0.05) but not the stylometric attack (0.425): it misses by 0.325
    assert not got.loc["copy", "meets"] and got.loc["copy", "miss_reidentification"] == pytest.approx(0.325)
    assert got.loc["copy", "miss_utility"] == 0.0 and "stylometric" not in got.loc["copy", "verdict"]
    assert "misses reidentification<=0.1 by 0.325" in got.loc["copy", "verdict"]
    assert not got.loc["dp", "meets"] and "utility unknown" in got.loc["dp", "verdict"]  # unknown never passes
    assert math.isnan(got.loc["dp", "miss_utility"])
    ok = check_budget(table.assign(utility=0.95), parse_budget("reidentification<=0.5,utility>=0.9"))
    assert ok["meets"].all() and ok["strategy"].iloc[0] == "copy"


def test_budget_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match=r"cannot read 'privacy<0\.1'"):
        parse_budget("privacy<0.1")
    with pytest.raises(ConfigError, match="no bound"):
        parse_budget(" , ")
    with pytest.raises(ConfigError, match="no column 'utility'"):
        check_budget(pd.DataFrame({"strategy": ["a"], "reidentification": [0.1]}), parse_budget("utility>=0.9"))
