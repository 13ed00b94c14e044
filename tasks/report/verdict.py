"""The report's opening verdict, in plain words: which strategy for which goal and what it costs, what the
re-identification risk means against chance (over how many trials, named by what a trial is: turns, posts or
timelines, and how many authors), and what each adversary holds.

A trial of the re-identification attacks is one synthetic timeline: one author's posts within one group, split
into runs of ``privacy.reidentify.timeline_posts`` posts where the run says so (:func:`tasks.privacy.audit.
attack_timelines`). :class:`Trials` says what it is from the attacks' per-timeline tables and the corpus level.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from tasks.layout import RunLayout
from tasks.report.score_lookup import format_percent
from tasks.report.tables import strategy_label
from tasks.scores import BASELINE_ROWS, CHANCE
from tasks.store import ArtifactRef

#: What each adversary setting holds, in words.
ADVERSARY_WORDS: dict[str, str] = {
    "full": "holds the users' other posts and the source texts of the rewritten rows (the strongest case: it has "
            "the originals)",
    "disjoint": "holds only the users' other posts, not the source texts",
}


@dataclass(frozen=True)
class Trials:
    """What one re-identification trial of a run is: how many posts it holds and whose they are."""

    level: str = ""  # the corpus level: post, dialogue or timeline ("" where unknown)
    posts_per_trial: float = math.nan  # the median posts in one trial (nan: not recorded)
    n_authors: int | None = None  # the distinct authors of the attacked trials

    @property
    def post(self) -> str:
        """What one document is called: a turn in a dialogue, else a post."""
        return "turn" if self.level == "dialogue" else "post"

    @property
    def single(self) -> bool:
        """Whether each trial is one document attacked on its own."""
        return self.posts_per_trial == 1

    @property
    def author(self) -> str:
        """What an author is called: a speaker in a dialogue, else an author."""
        return "speaker" if self.level == "dialogue" else "author"

    def unit(self) -> str:
        """The trials' name, plural: ``turns``, ``posts``, ``speaker timelines``, ``author timelines``."""
        if self.single:
            return f"{self.post}s"
        return f"{self.author} timelines" if self.level else "author timelines"

    def described(self, n: object) -> str:
        """``473 turns (each attacked on its own) by 6 speakers``: ``n`` trials named by what they are."""
        count = f"{int(n):,} " if isinstance(n, int | float) and math.isfinite(float(n)) and n else ""
        if self.single:
            what = f"{count}{self.post}s (each attacked on its own)"
        elif math.isfinite(self.posts_per_trial):
            group = "conversation" if self.level == "dialogue" else "thread or timeline"
            what = (f"{count}{self.unit()} (a {self.author}'s {self.post}s in one {group}, {self.posts_per_trial:g} "
                    f"{self.post}s each at the median)")
        else:
            what = f"{count}{self.unit()}"
        return what + (f" by {self.n_authors:,} {self.author}s" if self.n_authors else "")


def read_trials(layout: RunLayout, read: Callable[[ArtifactRef], pd.DataFrame], level: str = "") -> Trials:
    """What a trial of the run's re-identification attacks is, from their per-timeline tables (``n_posts`` and
    ``author_id`` per trial); a run without them: the corpus ``level`` alone."""
    frames = [read(ref) for _, ref in sorted(layout.by_label("reidentify", "per_timeline").items())]
    frames = [f for f in frames if not f.empty and "author_id" in f.columns]
    if not frames:
        return Trials(level=level)
    per = pd.concat(frames, ignore_index=True)
    posts = per["n_posts"].astype(float) if "n_posts" in per.columns else pd.Series(dtype=float)
    return Trials(level=level, posts_per_trial=float(posts.median()) if posts.notna().any() else math.nan,
                  n_authors=int(per["author_id"].nunique()) or None)


def _worst_reid(summary: pd.DataFrame, strategy: str, variant: str,
                adversary: str | None = None) -> dict | None:
    """A strategy's highest re-identification accuracy@1 (under ``adversary`` where given) with its attack, setting,
    interval and trials; None where none was measured."""
    rows = summary[(summary["level"] == "privacy") & (summary["metric"] == "reid_accuracy")
                   & (summary["strategy"] == strategy) & (summary["variant"].fillna("") == variant)
                   & summary["value"].notna()]
    if adversary is not None and "adversary" in rows.columns:
        rows = rows[rows["adversary"] == adversary]
    if rows.empty:
        return None
    return rows.loc[rows["value"].astype(float).idxmax()].to_dict()


def _chance(summary: pd.DataFrame) -> float:
    rows = summary[(summary["strategy"] == CHANCE) & (summary["metric"] == "reid_accuracy") & summary["value"].notna()]
    return float(rows["value"].iloc[0]) if len(rows) else math.nan


def _interval(row: dict) -> str:
    shown = format_percent(float(row["value"]))
    low, high = (float(row.get(k, math.nan)) for k in ("ci_low", "ci_high"))
    return shown + (f" [{format_percent(low)}, {format_percent(high)}]" if math.isfinite(low) and math.isfinite(high)
                    else "")


def risk_sentence(summary: pd.DataFrame, strategy: str, variant: str, trials: Trials) -> str | None:
    """The re-identification risk of one strategy against chance, in words, with its trials and what the adversary
    behind it holds; None where none was measured."""
    worst = _worst_reid(summary, strategy, variant)
    if worst is None:
        return None
    chance = _chance(summary)
    attack, adversary = (str(worst.get(k) or "") for k in ("attack", "adversary"))
    by = " with the ".join(p for p in (f"the {attack} attack" if attack else "",
                                        f"{adversary} adversary" if adversary else "") if p)
    candidates = round(1 / chance) if math.isfinite(chance) and chance > 0 else None
    said = (f"the strongest attack on {strategy_label(strategy, variant)}{f', {by},' if by else ''} named the right "
            f"{trials.author} for {_interval(worst)} of {trials.described(worst.get('n'))}")
    if math.isfinite(chance):
        said += (f"; guessing names the right one for {format_percent(chance)}"
                 + (f" (one in {candidates:,} candidates)" if candidates else ""))
    if adversary == "full" and (other := _worst_reid(summary, strategy, variant, "disjoint")) is not None:
        said += f"; without the source texts (disjoint adversary) the strongest attack names {_interval(other)}"
    return said


def verdict_items(ranked: Sequence[tuple[object, Sequence, Sequence[str]]], summary: pd.DataFrame, trials: Trials,
                  budget: str | None = None) -> list[tuple[str, str]]:
    """(what, plain sentence) pairs that open the report: per goal the strategy to use and what it costs, the
    re-identification risk against chance of the strategy to share (the share-data choice; none eligible: the least
    re-identified strategy; no share-data goal: the first goal's choice), and what each adversary holds."""
    from tasks.report.recommend import OVER_BUDGET

    items: list[tuple[str, str]] = []
    first: tuple[str, str] | None = None
    share: tuple[str, str] | None = None
    sharing = False
    for goal, recs, _ in ranked:
        top = next((r for r in recs if r.rank == 1), None)
        headline = goal.headline()  # type: ignore[attr-defined]
        sharing = sharing or goal.use_case == "share_data"  # type: ignore[attr-defined]
        if top is None:
            over = any(r.reasons and r.reasons[-1].startswith(OVER_BUDGET) for r in recs)
            items.append((headline, f"no strategy of this run meets the budget {budget}" if over and budget
                          else "no strategy of this run is eligible"))
            continue
        name = strategy_label(top.strategy, top.variant)
        items.append((headline, f"use {name} (score {top.score:.2f} of 1). What it costs: {top.cost}"))
        first = first or (top.strategy, top.variant)
        if goal.use_case == "share_data":  # type: ignore[attr-defined]
            share = share or (top.strategy, top.variant)
    # the risk of the strategy to share; none eligible to share: the least re-identified one, the nearest to it
    chosen = share or (None if sharing else first) or _least_reidentified(summary)
    if chosen is not None and (risk := risk_sentence(summary, *chosen, trials)) is not None:
        items.append(("Re-identification against chance", risk))
    settings = summary.loc[(summary["level"] == "privacy") & (summary["metric"] == "reid_accuracy"),
                           "adversary"].dropna().astype(str) if "adversary" in summary.columns else pd.Series([])
    held = [f"the {a} adversary {words}" for a, words in ADVERSARY_WORDS.items() if a in set(settings)]
    if held:
        items.append(("What the adversaries hold", "; ".join(held)))
    return items


def _least_reidentified(summary: pd.DataFrame) -> tuple[str, str] | None:
    """The strategy (variant) whose strongest attack re-identifies least, or None where none was attacked."""
    strategies = summary.loc[~summary["strategy"].isin(BASELINE_ROWS), ["strategy", "variant"]]
    pairs = list(dict.fromkeys(zip(strategies["strategy"], strategies["variant"].fillna(""), strict=True)))
    measured = [(p, w) for p in pairs if (w := _worst_reid(summary, *p)) is not None]
    return min(measured, key=lambda pw: float(pw[1]["value"]))[0] if measured else None
