"""The small real corpus the flow tests run on: the first turns of the first debates of the `debates` dataset."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tasks.corpus.datasets import fetch_dataset

REPO = Path(__file__).resolve().parent.parent


def debate_turns(debates: int, turns: int, words: int | None = None) -> pd.DataFrame:
    """The first ``turns`` turns of each of the first ``debates`` debates, in the corpus schema without the
    split (the flow makes its own). ``words`` cuts each turn to its first that many words: a test of the flow
    and its caches needs real turns, not their full length (111 words on average here, up to 542), which only
    makes every encoder pass longer."""
    corpus = pd.read_parquet(fetch_dataset("debates", REPO / "data"))
    groups = sorted(corpus["group_id"].unique())[:debates]
    sample = (corpus[corpus["group_id"].isin(groups)].sort_values(["group_id", "position"])
              .groupby("group_id").head(turns).drop(columns=["split"]))
    if words is not None:
        sample["text"] = sample["text"].str.split().str[:words].str.join(" ")
    return sample
