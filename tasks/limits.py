"""Upper bounds of the numeric settings (config sections, strategy and attack parameters), each with its reason.

A number past its bound is a typo or a hostile config, never a run someone wants: it is refused up front with
its key path instead of allocating, looping or waiting for ever. docs/configuration.md lists them.
"""

from __future__ import annotations

#: Seeds (run seed, utility repeats, attack seeds): numpy's generators take 0 .. 2^32 - 1.
MAX_SEED = 2**32 - 1
#: Documents (data.max_docs, sample sizes): beyond what a corpus table in memory holds.
MAX_DOCS = 100_000_000
#: Characters per text (data.max_chars): 10 MB of text in one post is not user-generated text.
MAX_TEXT_CHARS = 10_000_000
#: Rows per shard or batch (generate.shard_size, metrics.shard_size, apertium batch_lines).
MAX_SHARD = 1_000_000
#: Texts per model batch (batch_size): beyond this a batch only costs memory.
MAX_BATCH = 4096
#: Tokens or words per text sent to or asked from a model: longer than any context the strategies use.
MAX_TOKENS = 32_768
#: Sampling temperature: past 5 the samples are noise.
MAX_TEMPERATURE = 5.0
#: Repeats (bootstrap samples, reference bags, candidates, beams): beyond this only the run time grows.
MAX_REPEATS = 100_000
#: Encoder layer index: no encoder the metrics load has more layers.
MAX_LAYER = 256
#: DP budget per document (dp epsilon): past this the noise is nil and the guarantee says nothing.
MAX_EPSILON = 1_000_000.0
#: Seconds one subprocess call may take (backtranslate timeout_s): one day.
MAX_SECONDS = 86_400.0
#: Example outputs per strategy in the report: a report is read by a person.
MAX_EXAMPLES = 1000
#: Utility repeats (utility.seeds): each is a full training run per strategy, fraction and setting.
MAX_UTILITY_SEEDS = 100
#: A relative gap (stymask tolerance): 10 times the corpus value leaves every text alone already.
MAX_RELATIVE_GAP = 10.0
#: Logit clip bounds and per-token clip norms (dp b_min, b_max, clip): language-model logits stay within +-100.
MAX_LOGIT = 1000.0
#: MinHash permutations (minhash k): 32 times the article's 128; signatures cost k hashes per shingle.
MAX_HASHES = 4096
#: Character n-gram length (minhash n, stylometric ngram_max): longer n-grams are whole phrases, not style.
MAX_NGRAM = 32
#: Most frequent words (delta mfw): stylometry uses 100-5000; the profiles cost authors x words x 8 B
#: (3 GB at 37.9k authors and 10^4 words), and past that the "frequent" words are rare ones.
MAX_MFW = 10_000


def check_range(name: str, value: float, low: float, high: float) -> None:
    """ValueError naming ``name`` unless ``low <= value <= high`` (dataclass parameters' ``__post_init__``)."""
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}]; got {value}")
