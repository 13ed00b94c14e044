"""Deterministic train/val/test splits and nested undersampling, always by whole groups.

A group is a conversation or a timeline (``group_id``); a document without a group is a group of its
own (keyed by its ``doc_id``). Keeping whole groups on one side stops a model from seeing one turn
of a dialogue in training and the next in test. Every choice is driven by a seeded sha256 of the
group key, never by Python's ``hash()`` (salted per process) or by row order, so the same table
and seed give the same result on any machine.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pandas as pd

from tasks.corpus.schema import SPLITS
from tasks.errors import ConfigError

#: Fractions of documents for train/val/test when none are given.
DEFAULT_FRACTIONS: tuple[float, float, float] = (0.8, 0.1, 0.1)


def group_keys(df: pd.DataFrame) -> pd.Series:
    """Each row's group key: ``g:<group_id>``, or ``d:<doc_id>`` for a document without a group."""
    doc = "d:" + df["doc_id"].astype("string")
    if "group_id" not in df.columns:
        return doc.astype(object)
    grp = "g:" + df["group_id"].astype("string")
    return grp.fillna(doc).astype(object)


def seeded_rank(keys: list[str], seed: int, salt: str) -> list[str]:
    """The keys ordered by sha256(salt, seed, key): a stable pseudo-random order."""
    def digest(key: str) -> bytes:
        return hashlib.sha256(f"{salt}\x1f{seed}\x1f{key}".encode("utf-8", "surrogatepass")).digest()
    return sorted(keys, key=lambda k: (digest(k), k))


def _check_fractions(fractions: tuple[float, ...]) -> np.ndarray:
    if len(fractions) != len(SPLITS):
        raise ConfigError(f"split fractions need {len(SPLITS)} values ({'/'.join(SPLITS)}), got {len(fractions)}")
    arr = np.asarray(fractions, dtype=float)
    if not np.isfinite(arr).all() or (arr < 0).any() or arr.sum() <= 0:
        raise ConfigError(f"split fractions must be non-negative with a positive sum, got {tuple(fractions)}")
    return arr / arr.sum()


def _allocate(sizes: list[int], fractions: np.ndarray) -> list[int]:
    """Split index per group (groups already in seeded order): cumulative allocation by document count.

    A group goes to the split whose cumulative-fraction interval holds the midpoint of the group's
    document range. Then, when there are at least as many groups as splits with a positive fraction,
    every such split that got nothing takes the smallest group from the split with most surplus
    documents that has more than one group.
    """
    total = float(sum(sizes))
    positive = [i for i, f in enumerate(fractions) if f > 0]
    bounds = np.cumsum(fractions[positive])
    bounds[-1] = np.inf  # float rounding must not push the last groups past the end
    out: list[int] = []
    start = 0.0
    for size in sizes:
        mid = (start + size / 2.0) / total
        out.append(positive[int(np.searchsorted(bounds, mid, side="right"))])
        start += size
    if len(sizes) >= len(positive):
        for empty in positive:
            if empty in out:
                continue
            counts = {i: out.count(i) for i in positive}
            docs = {i: sum(s for s, a in zip(sizes, out, strict=True) if a == i) for i in positive}
            donors = [i for i in positive if counts[i] > 1]
            donor = max(donors, key=lambda i: (docs[i] - fractions[i] * total, -i))
            members = [g for g, a in enumerate(out) if a == donor]
            out[min(members, key=lambda g: (sizes[g], g))] = empty
    return out


def assign_splits(df: pd.DataFrame, fractions: tuple[float, float, float] = DEFAULT_FRACTIONS,
                  seed: int = 0) -> pd.DataFrame:
    """Fill null ``split`` values by group, deterministically; given splits are kept.

    Rows of a group that already has a split elsewhere take that split (the most frequent one), so
    a group never straddles. The other groups are ordered by a seeded hash and allocated whole,
    cumulatively by document count, to approach ``fractions`` (train, val, test). With few groups
    (e.g. four debates) every split with a positive fraction still gets at least one group as long
    as there are at least as many groups as such splits. Returns a copy.
    """
    fr = _check_fractions(tuple(fractions))
    out = df.copy()
    if "split" not in out.columns:
        out["split"] = pd.Series(pd.NA, index=out.index, dtype="string")
    split = out["split"].astype("string")
    if len(out) == 0:
        out["split"] = split
        return out
    keys = group_keys(out)
    given = split.notna()
    if given.any():
        mixed = keys.isin(set(keys[given]) & set(keys[~given]))
        if mixed.any():
            counts = (pd.DataFrame({"key": keys[given & mixed], "split": split[given & mixed].astype(object)})
                      .value_counts().rename("n").reset_index()
                      .sort_values(["key", "n", "split"], ascending=[True, False, True])
                      .drop_duplicates("key"))
            known = dict(zip(counts["key"], counts["split"], strict=True))
            inherit = ~given & mixed
            split[inherit] = keys[inherit].map(known).astype("string")
    todo = split.isna()
    if todo.any():
        sizes = keys[todo].value_counts()
        order = seeded_rank(list(sizes.index), seed, "split")
        alloc = _allocate([int(sizes[k]) for k in order], fr)
        chosen = {k: SPLITS[i] for k, i in zip(order, alloc, strict=True)}
        split[todo] = keys[todo].map(chosen).astype("string")
    out["split"] = split
    return out


def undersample(df: pd.DataFrame, fraction: float, seed: int = 0, split: str = "train") -> pd.DataFrame:
    """Keep about ``fraction`` of the documents of one split, by whole groups; other splits untouched.

    Groups of the split are ranked by a seeded hash and kept from the top while the running document
    count stays nearest the target (a group is kept when the midpoint of its document range is within
    the target). The ranking does not depend on the fraction, so samples are nested: the 10% sample
    is a subset of the 50% sample for the same seed. A positive fraction keeps at least one group.
    Row order is preserved.
    """
    if not (0.0 < fraction <= 1.0) or math.isnan(fraction):
        raise ConfigError(f"undersampling fraction must be in (0, 1], got {fraction}")
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got '{split}'")
    in_split = (df["split"].astype("string") == split).fillna(False).to_numpy(dtype=bool)
    if fraction == 1.0 or not in_split.any():
        return df.copy()
    keys = group_keys(df)[in_split]
    sizes = keys.value_counts()
    target = fraction * len(keys)
    kept: set[str] = set()
    running = 0
    for key in seeded_rank(list(sizes.index), seed, "undersample"):
        size = int(sizes[key])
        if kept and running + size / 2.0 > target:
            break
        kept.add(key)
        running += size
    keep = ~in_split
    keep[in_split] = keys.isin(kept).to_numpy()
    return df[keep].copy()


def cap_documents(df: pd.DataFrame, max_docs: int, seed: int = 0) -> pd.DataFrame:
    """At most ``max_docs`` documents, by whole groups, each split shrunk in proportion (for demos).

    Each split gets ``round(max_docs * its share)`` documents (at least one when it has any and
    ``max_docs`` allows): groups are taken in seeded-hash order, skipping a group that would overflow
    the budget. When not even one group fits, the first-ranked group is cut to the budget by
    position. Row order is preserved. Deterministic for a given table and seed.
    """
    if max_docs < 1:
        raise ConfigError(f"max_docs must be at least 1, got {max_docs}")
    if len(df) <= max_docs:
        return df.copy()
    keys = group_keys(df)
    split = df["split"].astype("string").fillna("") if "split" in df.columns else pd.Series("", index=df.index)
    shares = split.value_counts()
    budgets = {s: max(1, round(max_docs * int(n) / len(df))) for s, n in shares.items()}
    while sum(budgets.values()) > max_docs:  # rounding up to one per split can overshoot a tiny cap
        largest = max(budgets, key=lambda s: (budgets[s], s))
        budgets[largest] -= 1
        budgets = {s: b for s, b in budgets.items() if b > 0}
    keep = np.zeros(len(df), dtype=bool)
    for name, budget in budgets.items():
        member = (split == name).to_numpy()
        sizes = keys[member].value_counts()
        ranked = seeded_rank(list(sizes.index), seed, "cap")
        kept: set[str] = set()
        used = 0
        for key in ranked:
            if used + int(sizes[key]) <= budget:
                kept.add(key)
                used += int(sizes[key])
        if kept:
            keep |= member & keys.isin(kept).to_numpy()
            continue
        first = member & (keys == ranked[0]).to_numpy()
        order = df[first]
        if "position" in order.columns:
            order = order.sort_values("position", kind="stable", na_position="last")
        cut = order.index[:budget]
        keep |= df.index.isin(cut)
    return df[keep].copy()


def author_timelines(corpus: pd.DataFrame, n_posts: int = 5, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(timelines, histories): the re-identification evaluation split of a corpus with authors.

    Per author, one run of ``n_posts`` consecutive documents becomes a timeline (a released timeline whose
    author an attack must find); the author's other documents stay in ``histories`` (what the adversary
    holds). Documents are consecutive when they are neighbours in one group ordered by ``position`` (then
    ``doc_id``; without ``group_id`` the author's documents are one group, without ``position`` the
    corpus's row order is used). Of the runs that lie inside one group the author's run is picked by a seeded
    sha256 of the author id, so the split does not depend on row order or machine and the same seed gives
    the same runs. An author with fewer than ``n_posts + 1`` documents (no document would be left to the
    adversary), or with no group holding ``n_posts`` documents, gets no timeline: all its documents stay in
    the histories, as do documents without an author.

    Timelines keep every column of the corpus; their ``group_id`` is a new id per timeline (``tl:<author>``)
    and the document's own group is in ``source_group_id``. Row order: timelines by author then position;
    histories in the corpus's order.
    """
    if n_posts < 1:
        raise ConfigError(f"timeline length must be at least 1, got {n_posts}")
    if "author_id" not in corpus.columns:
        raise ConfigError("the timeline split needs an author_id column")
    frame = corpus.reset_index(drop=True)
    order = pd.DataFrame({
        "row": np.arange(len(frame)),
        "author": frame["author_id"].astype("string"),
        "group": frame["group_id"].astype("string").fillna("") if "group_id" in frame.columns else "",
        "position": (pd.to_numeric(frame["position"], errors="coerce").astype("Float64")
                     if "position" in frame.columns else pd.Series(np.arange(len(frame)), dtype="Float64")),
        "doc": frame["doc_id"].astype("string") if "doc_id" in frame.columns else "",
    })
    order = order[order["author"].notna()].sort_values(["author", "group", "position", "doc", "row"],
                                                      kind="stable", na_position="last")
    chosen: list[np.ndarray] = []
    rows, groups = order["row"].to_numpy(), order["group"].to_numpy(object)
    for author, at in order.groupby("author", sort=True).indices.items():
        if len(at) < n_posts + 1:
            continue
        grp = groups[at]
        starts = np.flatnonzero(grp[:len(at) - n_posts + 1] == grp[n_posts - 1:]) if n_posts > 1 else \
            np.arange(len(at))  # sorted by group: a run inside one group starts and ends in it
        if not len(starts):
            continue
        digest = hashlib.sha256(f"timelines\x1f{seed}\x1f{author}".encode("utf-8", "surrogatepass")).digest()
        start = int(starts[int.from_bytes(digest[:8], "big") % len(starts)])
        chosen.append(rows[at[start:start + n_posts]])
    picked = np.concatenate(chosen) if chosen else np.zeros(0, np.int64)
    timelines = frame.iloc[picked].copy()
    if "group_id" in timelines.columns:
        timelines["source_group_id"] = timelines["group_id"]
    timelines["group_id"] = ("tl:" + timelines["author_id"].astype("string")).astype(object)
    keep = np.ones(len(frame), bool)
    keep[picked] = False
    return timelines.reset_index(drop=True), frame[keep].reset_index(drop=True)
