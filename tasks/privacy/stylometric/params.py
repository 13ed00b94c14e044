"""The stylometric attack's parameters (:class:`StyloParams`): what makes two profiles comparable, and
the mode that profiles a history source of a given size. Kept apart so every other part of the attack (and
the classifier attack, which takes its n-gram settings) reads one definition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tasks.limits import MAX_DOCS, MAX_NGRAM, MAX_SEED, check_range
from tasks.signatures import make_signature

Mode = Literal["auto", "text", "exact", "sketch"]


@dataclass(frozen=True)
class StyloParams:
    """What makes two profiles comparable: n-gram range, casing, mode and sketch sizes."""

    ngram_min: int = 2
    ngram_max: int = 4
    word_min: int = 1        # word n-grams (scikit-learn's word tokens); word_max 0 = characters only
    word_max: int = 2
    lowercase: bool = False  # casing is style; scikit-learn's default is True
    mode: Mode = "auto"      # text up to text_max_mb of history text, sketch above (resolved_mode)
    hash_bits: int = 20      # sketch: document-frequency buckets (2**20 x 4 B = 4 MB of IDF)
    width: int = 4096        # sketch: signed buckets per profile (power of two)
    df_sample: int = 1_000_000  # sketch: posts the document frequencies are estimated from (all, when fewer)
    seed: int = 1
    text_max_mb: int = 40    # auto: the most history text (MB) profiled in text mode (~250k posts of 150 chars)

    def __post_init__(self) -> None:
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max; got ({self.ngram_min}, {self.ngram_max})")
        if self.word_max and not 1 <= self.word_min <= self.word_max <= 4:
            raise ValueError(f"need 1 <= word_min <= word_max <= 4 (or word_max 0); got ({self.word_min}, "
                             f"{self.word_max})")
        check_range("ngram_max", self.ngram_max, 1, MAX_NGRAM)
        check_range("df_sample", self.df_sample, 1, MAX_DOCS)
        check_range("seed", self.seed, 0, MAX_SEED)
        check_range("text_max_mb", self.text_max_mb, 0, 1 << 20)
        if self.mode not in ("auto", "text", "exact", "sketch"):
            raise ValueError(f"mode must be 'auto', 'text', 'exact' or 'sketch'; got {self.mode!r}")
        if self.width < 2 or self.width > 1 << 24 or self.width & (self.width - 1):
            raise ValueError(f"width must be a power of two in [2, 2**24]; got {self.width}")
        if not 8 <= self.hash_bits <= 30:
            raise ValueError(f"hash_bits must be in [8, 30]; got {self.hash_bits}")

    @property
    def signature(self) -> str:
        sketch = self.mode in ("sketch", "auto")  # auto: the sketch's sizes count above text_max_mb
        profile = {"text": "text", "auto": f"text<={self.text_max_mb}MB|mean"}.get(self.mode, "mean")
        return make_signature("reid_stylometric", features=self.features,
                              tf="sublinear", idf="smooth-histories", norm="l2", profile=profile, sim="cosine",
                              lowercase=self.lowercase, mode=self.mode,
                              buckets=f"2^{self.hash_bits}" if sketch else None,
                              width=self.width if sketch else None, seed=self.seed if sketch else None,
                              df_sample=self.df_sample if sketch else None)

    def resolved_mode(self, text_bytes: int) -> Literal["text", "exact", "sketch"]:
        """The mode that profiles histories holding ``text_bytes`` of text (:func:`history_text_bytes`):
        ``auto`` is ``text`` up to ``text_max_mb`` and ``sketch`` above; the others are themselves."""
        if self.mode == "auto":
            return "text" if text_bytes <= self.text_max_mb * 1_000_000 else "sketch"
        return self.mode

    @property
    def features(self) -> str:
        """The n-grams profiled, e.g. ``char2-4+word1-2``."""
        words = f"+word{self.word_min}-{self.word_max}" if self.word_max else ""
        return f"char{self.ngram_min}-{self.ngram_max}{words}"

    def ngram_args(self) -> tuple[int, int, int, int]:
        """(char lo, char hi, word lo, word hi) as the kernels take them (word hi 0 = no word n-grams)."""
        return self.ngram_min, self.ngram_max, self.word_min if self.word_max else 0, self.word_max
