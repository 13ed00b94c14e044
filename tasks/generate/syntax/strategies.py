"""The syntax-guided strategies: candidate rewrites, their selection by syntactic distance, and the
registered ``synsim``, ``syndiff``, ``synorig`` (:class:`SynParams`) and ``syntr`` (:class:`SynTrParams`)."""

from __future__ import annotations

import random
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from tasks.errors import STRICT_INPUT, ModelUnavailable
from tasks.generate.backtranslate import DEFAULT_PIVOTS
from tasks.generate.base import Strategy, build_strategy, register_strategy, stable_hash
from tasks.generate.stymask import rule_lexical
from tasks.generate.syntax.distance import DISTANCES
from tasks.generate.syntax.parsing import load_parser, parse
from tasks.generate.syntax.transforms import FAMILIES, Family, apply_transforms
from tasks.limits import MAX_BATCH, MAX_REPEATS, MAX_TEMPERATURE, MAX_TOKENS


@dataclass
class Candidate:
    """One candidate rewrite of a source text, with where it came from and its distance to the source."""

    text: str
    origin: str  # e.g. "to_passive", "to_passive+front_pp", "bt", "bt(front_pp)", "lexical", "llm"
    distance: float = float("nan")
    lexical_difference: float = float("nan")


_WORD = re.compile(r"\w+", re.UNICODE)


def lexical_difference(a: str, b: str) -> float:
    """1 - Jaccard similarity of the two texts' lower-cased word sets."""
    sa, sb = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    union = sa | sb
    return 1.0 - len(sa & sb) / len(union) if union else 0.0


def select_candidate(candidates: Sequence[Candidate], mode: Literal["synsim", "syndiff", "synorig"]) -> int | None:
    """Index of the candidate to keep: smallest distance (synsim), largest (syndiff), smallest with
    ties broken by the largest lexical difference (synorig); None when there is none."""
    if not candidates:
        return None
    idx = range(len(candidates))
    if mode == "synsim":
        return min(idx, key=lambda i: candidates[i].distance)
    if mode == "syndiff":
        return max(idx, key=lambda i: candidates[i].distance)
    return min(idx, key=lambda i: (round(candidates[i].distance, 9), -candidates[i].lexical_difference))


_COMPOSITIONS: tuple[tuple[str, ...], ...] = (
    ("to_passive",), ("to_active",), ("front_pp",), ("back_pp",),
    ("to_passive", "front_pp"), ("to_passive", "back_pp"), ("to_active", "front_pp"), ("to_active", "back_pp"),
)

PARAPHRASE_PROMPT = ("Paraphrase the following text. Keep its meaning. {how} Reply with the paraphrase only.\n\n"
                     "Text: {text}")
_HOW = {"synorig": "Keep exactly the same sentence structure; change the words.",
        "synsim": "You may change the sentence structure.", "syndiff": "You may change the sentence structure."}


class SynParams(BaseModel):
    """Params of ``synsim``, ``syndiff`` and ``synorig``."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)

    k: int = Field(8, ge=1, le=MAX_REPEATS, description="candidates sampled per text (the article samples parse templates)")
    distance: Literal["tree", "pos"] = Field(
        "tree", description="tree: dependency tree edit distance / total tokens; pos: UPOS Levenshtein / longer")
    generator: Literal["rules", "llm"] = Field(
        "rules", description="rules: transforms + lexical swaps + apertium back-translation; llm: k paraphrases "
                             "from the llm role's backend")
    max_steps: int = Field(2, ge=1, le=2, description="rules: most transforms composed per candidate")
    backtranslate: bool = Field(True, description="rules: add apertium back-translations when apertium is installed")
    pivots: list[str] = Field(default_factory=lambda: list(DEFAULT_PIVOTS),
                              description="rules: apertium pivots whose back-translations join the candidates "
                                          "(backtranslate's close and far pivots by default)")
    lexical: bool = Field(True, description="rules: add StyMask synonym swaps of the source and of the transforms")
    llm: dict[str, Any] = Field(default_factory=dict, description="llm: settings for llm_backend_for('llm', ...)")
    temperature: float = Field(0.9, ge=0, le=MAX_TEMPERATURE, description="llm: sampling temperature")
    max_tokens: int = Field(256, ge=1, le=MAX_TOKENS, description="llm: most tokens per paraphrase")
    on_no_candidate: Literal["keep", "fail"] = Field(
        "keep", description="when a text has no candidate: keep the source text, or fail the row")
    model: str | None = Field(None, description="spaCy pipeline (role pos_tagger) override")
    batch_size: int = Field(64, ge=1, le=MAX_BATCH, description="texts per nlp.pipe batch")


class SynTrParams(BaseModel):
    """Params of ``syntr``."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)

    families: list[Family] = Field(default_factory=lambda: ["voice", "pp"],
                                   description="transform families; each author draws one direction per family")
    consistency: Literal["author", "text"] = Field(
        "author", description="author: one draw per author (seed + stable_hash(author_id)); text: one per text "
                              "(the stochastic ablation)")
    model: str | None = Field(None, description="spaCy pipeline (role pos_tagger) override")
    batch_size: int = Field(64, ge=1, le=MAX_BATCH, description="texts per nlp.pipe batch")
    on_no_transform: Literal["synorig", "keep"] = Field(
        "synorig", description="a text none of its author's transforms applies to: synorig = rewritten as SynOrig "
                               "does (AESOP paraphrases under the unchanged template), keep = returned as is")
    pivots: list[str] = Field(default_factory=lambda: list(DEFAULT_PIVOTS),
                              description="on_no_transform synorig: back-translation pivots of its candidates")


def author_plan(author: str, seed: int, families: Sequence[str] = ("voice", "pp")) -> list[str]:
    """The transforms one author's texts get: one direction per family, drawn from
    ``Random(seed + stable_hash(author))``, in family order (voice before PP)."""
    rng = random.Random(seed + stable_hash(author))
    return [rng.choice(FAMILIES[f]) for f in families]


def _author_keys(batch: pd.DataFrame) -> list[str]:
    """Who a text's style belongs to: its author_id; without one, ``group:<group_id>``, then
    ``doc:<doc_id>``, then ``row:<i>`` (a text with no author is its own author)."""
    keys: list[str] = []
    for i in range(len(batch)):
        key = None
        for col, prefix in (("author_id", ""), ("group_id", "group:"), ("doc_id", "doc:")):
            if col in batch.columns:
                v = batch[col].iloc[i]
                if v is not None and not pd.isna(v) and str(v) != "":
                    key = f"{prefix}{v}"
                    break
        keys.append(key if key is not None else f"row:{i}")
    return keys


class _SyntaxBase(Strategy):
    """Shared machinery: the spaCy pipeline, input checks."""

    llm_settings_field = "llm"

    @classmethod
    def uses_llm(cls, params: Any) -> bool:
        return getattr(params, "generator", "rules") == "llm"

    def _nlp(self) -> Any:
        return load_parser(self.params.model)  # type: ignore[attr-defined]

    @staticmethod
    def _texts(batch: pd.DataFrame) -> tuple[list[str], list[Exception | None]]:
        texts, errors = [], []
        for t in batch["text"].tolist():
            if isinstance(t, str):
                texts.append(t)
                errors.append(None)
            else:
                texts.append("")
                errors.append(TypeError(f"text is not a string ({type(t).__name__})"))
        return texts, errors


class _SynCandidates(_SyntaxBase):
    """SynSim / SynDiff / SynOrig: generate candidates, keep one by syntactic distance."""

    mode: Literal["synsim", "syndiff", "synorig"]
    params: SynParams

    def __init__(self, params: SynParams, *, llm: Any = None) -> None:
        super().__init__(params)
        self._llm = llm
        self._bt: Strategy | None = None
        if params.generator == "rules" and params.backtranslate and shutil.which("apertium"):
            try:
                self._bt = build_strategy("backtranslate", {"pivots": params.pivots})
            except ModelUnavailable:
                self._bt = None
        self._nlp()  # a missing parser is a setup problem: fail at construction

    def _backend(self) -> Any:
        if self._llm is None:
            # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
            from tasks.models.llm import llm_backend_for

            self._llm = llm_backend_for("llm", self.params.llm)
        return self._llm

    def _backtranslate(self, texts: list[str]) -> list[list[str]]:
        """Per text, its back-translations through each pivot (the failed or empty ones left out)."""
        if self._bt is None or not texts:
            return [[] for _ in texts]
        out = self._bt.generate(pd.DataFrame({"text": texts}), seed=0)
        return [[o for o in outs if isinstance(o, str) and o.strip()] for outs in out]

    def _rule_pools(self, texts: list[str], docs: list[Any], seed: int) -> list[list[Candidate]]:
        p = self.params
        plans = [c for c in _COMPOSITIONS if len(c) <= p.max_steps]
        syntactic = self.mode != "synorig"
        pools: list[list[Candidate]] = [[] for _ in texts]
        if syntactic:
            flat_texts, flat_plans, flat_docs, owner = [], [], [], []
            for i, (t, d) in enumerate(zip(texts, docs, strict=True)):
                for plan in plans:
                    flat_texts.append(t)
                    flat_plans.append(plan)
                    flat_docs.append(d)
                    owner.append(i)
            results = apply_transforms(self._nlp(), flat_texts, flat_plans, flat_docs)
            for i, plan, (out, applied) in zip(owner, flat_plans, results, strict=True):
                if list(applied) == list(plan):  # only full compositions: partial ones repeat a shorter plan
                    pools[i].append(Candidate(out, "+".join(plan)))
        if p.lexical:
            for i, t in enumerate(texts):
                rng = random.Random(seed + stable_hash(t))
                for base in [Candidate(t, "source"), *(pools[i] if syntactic else [])]:
                    new = rule_lexical(base.text, rng, p=1.0)
                    if new != base.text:
                        origin = "lexical" if base.origin == "source" else f"lexical({base.origin})"
                        pools[i].append(Candidate(new, origin))
        if self._bt is not None:
            bt_in, bt_owner, bt_origin = [], [], []
            for i, t in enumerate(texts):
                bases = [Candidate(t, "source")] + ([c for c in pools[i] if "lexical" not in c.origin]
                                                    if syntactic else [])
                for base in bases:
                    bt_in.append(base.text)
                    bt_owner.append(i)
                    bt_origin.append("bt" if base.origin == "source" else f"bt({base.origin})")
            for i, origin, outs in zip(bt_owner, bt_origin, self._backtranslate(bt_in), strict=True):
                pools[i].extend(Candidate(out, origin) for out in outs)
        return pools

    def _llm_pools(self, texts: list[str], seed: int) -> list[list[Candidate]]:
        # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
        from tasks.models.llm import ChatRequest

        p = self.params
        requests = [ChatRequest(
            messages=[{"role": "user", "content": PARAPHRASE_PROMPT.format(how=_HOW[self.mode], text=t)}],
            temperature=p.temperature, max_tokens=p.max_tokens, n=p.k, seed=seed) for t in texts]
        results = self._backend().complete(requests)
        pools: list[list[Candidate]] = []
        for r in results:
            pools.append([Candidate(" ".join(x.split()) if "\n" not in x else x.strip(), "llm")
                          for x in (r.texts or []) if isinstance(x, str) and x.strip()] if r.ok else [])
        return pools

    def candidates(self, texts: Sequence[str], *, seed: int) -> list[list[Candidate]]:
        """Per text: the sampled candidates (at most ``k``, never the source itself, no duplicates),
        each with its distance to the source and lexical difference."""
        p = self.params
        texts = list(texts)
        nlp = self._nlp()
        docs = parse(nlp, texts, p.batch_size)
        pools = self._rule_pools(texts, docs, seed) if p.generator == "rules" else self._llm_pools(texts, seed)
        sampled: list[list[Candidate]] = []
        for i, (t, pool) in enumerate(zip(texts, pools, strict=True)):
            seen = {t.strip()}
            uniq = []
            for c in pool:
                if c.text.strip() and c.text.strip() not in seen:
                    seen.add(c.text.strip())
                    uniq.append(c)
            rng = random.Random(seed * 1_000_003 + stable_hash(f"{i}:{t}"))
            sampled.append(rng.sample(uniq, p.k) if len(uniq) > p.k else uniq)
        flat = [c for cands in sampled for c in cands]
        cand_docs = parse(nlp, [c.text for c in flat], p.batch_size)
        dist = DISTANCES[p.distance]
        k = 0
        for i, cands in enumerate(sampled):
            for c in cands:
                c.distance = dist(docs[i], cand_docs[k])
                c.lexical_difference = lexical_difference(texts[i], c.text)
                k += 1
        return sampled

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[str | Exception]:
        """One kept candidate per text (or the source / a failure when there is none)."""
        texts, errors = self._texts(batch)
        todo = [i for i, e in enumerate(errors) if e is None]
        out: list[str | Exception] = [e if e is not None else "" for e in errors]
        cands = self.candidates([texts[i] for i in todo], seed=seed)
        for i, cs in zip(todo, cands, strict=True):
            j = select_candidate(cs, self.mode)
            if j is not None:
                out[i] = cs[j].text
            elif self.params.on_no_candidate == "keep":
                out[i] = texts[i]
            else:
                out[i] = ValueError("no candidate rewrite for this text")
        return out


@register_strategy("synsim", params=SynParams)
class SynSim(_SynCandidates):
    """The candidate syntactically closest to the source."""

    mode = "synsim"


@register_strategy("syndiff", params=SynParams)
class SynDiff(_SynCandidates):
    """The candidate syntactically farthest from the source."""

    mode = "syndiff"


@register_strategy("synorig", params=SynParams)
class SynOrig(_SynCandidates):
    """A lexical paraphrase that keeps the source's parse (closest in syntax, most different in words)."""

    mode = "synorig"


@register_strategy("syntr", params=SynTrParams)
class SynTr(_SyntaxBase):
    """Rule-based voice / PP-position transforms, the same choice for every text of an author."""

    params: SynTrParams

    def __init__(self, params: SynTrParams) -> None:
        super().__init__(params)
        self._nlp()
        self._fallback: Strategy | None = None
        if params.on_no_transform == "synorig":
            self._fallback = build_strategy("synorig", {"pivots": params.pivots, "model": params.model,
                                                        "batch_size": params.batch_size})

    def plans(self, batch: pd.DataFrame, *, seed: int) -> list[list[str]]:
        """Each row's transform plan: its author's (consistency=author) or its own draw (=text)."""
        p = self.params
        if p.consistency == "author":
            keys = _author_keys(batch)
        else:
            keys = [f"text:{i}:{t}" for i, t in enumerate(batch["text"].astype(str).tolist())]
        return [author_plan(k, seed, p.families) for k in keys]

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[str | Exception]:
        """Apply each row's plan; a text where nothing applies is rewritten as SynOrig does
        (``on_no_transform: synorig``, the default) or comes back unchanged (``keep``, flagged ``unchanged``)."""
        texts, errors = self._texts(batch)
        todo = [i for i, e in enumerate(errors) if e is None]
        plans = self.plans(batch, seed=seed)
        results = apply_transforms(self._nlp(), [texts[i] for i in todo], [plans[i] for i in todo])
        out: list[str | Exception] = [e if e is not None else "" for e in errors]
        untouched = []
        for i, (text, applied) in zip(todo, results, strict=True):
            out[i] = text
            if not applied:
                untouched.append(i)
        if self._fallback is not None and untouched:
            rewritten = self._fallback.generate(pd.DataFrame({"text": [texts[i] for i in untouched]}), seed=seed)
            for i, new in zip(untouched, rewritten, strict=True):
                if isinstance(new, str) and new.strip():
                    out[i] = new
        return out
