"""Syntax-guided rewriting: SynSim, SynDiff, SynOrig and SynTr of the article (Table 1, §4.1).

The article uses AESOP (Sun, Ma and Peng 2021): a retrieval step samples parse templates, a BART
model rewrites the source under a template. It compares the candidate whose template has the
smallest (SynSim) or largest (SynDiff) constituency tree edit distance to the source's parse, the
source's own parse as template (SynOrig), and the source's parse transformed in voice and
prepositional-phrase position with the rule-based heuristics of Lyu et al. (2021) (SynTr).

Here (offline, no AESOP checkpoint):

- **Distance** (:func:`syntactic_distance`): Zhang-Shasha tree edit distance between *dependency*
  trees whose node labels are ``dep|UPOS`` (no words: syntax only), unit costs, the sentences of a
  text joined under one virtual root, normalised by the total token count of both texts
  (``TED / (n_a + n_b)``, in [0, 1]: deleting every node and inserting every node costs exactly
  that, and the virtual roots always match); a text longer than ``MAX_DISTANCE_TOKENS`` (256) is
  compared on its first 256 tokens, since the exact distance is too slow there. Dependency rather
  than constituency trees because spaCy parses dependencies; the tree distance rather than the POS
  edit distance by default because it sees structure (voice, PP attachment and position) and not
  only the tag order. The POS alternative (``distance: pos``) is Levenshtein over UPOS tags
  normalised by the longer sequence.
- **Candidates** (:class:`CandidateGenerator`): ``generator: rules`` (default) pools the rule-based
  transforms below and their compositions, lexical swaps (StyMask's synonym table) and apertium
  back-translation (eng -> pivot -> eng through each of ``pivots``, backtranslate's measured close
  and far pivots by default, when apertium is installed) of the source and of each transformed text,
  so a text no rule applies to still gets rewrites; ``k`` of them are sampled with a seeded RNG. ``generator: llm`` asks the ``llm``
  role's backend (vLLM or in-process) for ``k`` paraphrases instead.
- **SynSim / SynDiff**: the sampled candidate with the smallest / largest distance to the source.
- **SynOrig**: the original's parse is the template, so the output is a paraphrase that keeps the
  source's syntax: only *lexical* candidates are pooled (back-translation, lexical swaps; with the
  LLM, paraphrases prompted to keep the sentence structure), never the syntactic transforms, and the
  one closest in syntax wins; ties go to the one that differs most in words (token Jaccard), so the
  output is a rewrite and not a copy.
- **SynTr**: the source's parse transformed consistently per author. The transformed text is the
  output itself (AESOP would rewrite *under* the transformed template; the rules here rewrite the
  sentence directly). Each author draws one direction per family once (voice: to_passive or
  to_active; PP: front_pp or back_pp) with ``Random(seed + stable_hash(author_id))``, so every text of
  a timeline gets the same transforms: a stable user-level style. A text where nothing applies keeps
  its own parse as template, so it is rewritten as SynOrig rewrites (lexical swaps and back-translations
  through ``pivots``, the one closest in syntax; ``on_no_transform: synorig``, default): measured on 100
  debate turns, no transform applied to 91% of them, which came back verbatim before. ``keep`` returns
  such a text as is (flagged ``unchanged``).

Transforms (:data:`TRANSFORMS`) work sentence by sentence on spaCy parses and return None when they
do not apply to any sentence: ``to_passive`` (finite main verb in simple past/present, one subject,
one direct object, no auxiliary, negation, particle or clausal complement, and no object opening on a
preposition the parser took for a number's modifier: "writes about two kinds"), ``to_active`` (``was/
were/is/are/am`` + participle with a ``by`` agent; anything with another auxiliary is left alone),
``front_pp`` (a sentence-final PP attached to the main verb moves to the front with a comma),
``back_pp`` (the reverse). Questions and sentences with inner line breaks are left alone.

Registered names: ``synsim``, ``syndiff``, ``synorig`` (params :class:`SynParams`) and ``syntr``
(params :class:`SynTrParams`), four names sharing one implementation, so a config reads like the
article's table (``- name: synsim``) and the table's ``strategy`` column names the row.

The package, one module per concern: :mod:`.distance` (tree edit and POS distances), :mod:`.parsing`
(the spaCy pipeline), :mod:`.morphology` (verb forms), :mod:`.transforms` (the rewrite rules) and
:mod:`.strategies` (candidates, selection and the four registered strategies). Importing the package
registers the strategies.
"""

from tasks.generate.syntax.distance import (
    DISTANCES,
    MAX_DISTANCE_TOKENS,
    ROOT_LABEL,
    Tree,
    dependency_tree,
    levenshtein,
    pos_distance,
    syntactic_distance,
    tree_distance,
    tree_edit_distance,
    tree_size,
)
from tasks.generate.syntax.morphology import IRREGULAR, regular_participle, third_singular
from tasks.generate.syntax.parsing import load_parser, parse
from tasks.generate.syntax.strategies import (
    PARAPHRASE_PROMPT,
    Candidate,
    SynDiff,
    SynOrig,
    SynParams,
    SynSim,
    SynTr,
    SynTrParams,
    author_plan,
    lexical_difference,
    select_candidate,
)
from tasks.generate.syntax.transforms import (
    FAMILIES,
    TRANSFORMS,
    Family,
    TransformName,
    apply_transforms,
    back_pp,
    front_pp,
    to_active,
    to_passive,
)

__all__ = [
    "DISTANCES", "FAMILIES", "IRREGULAR", "MAX_DISTANCE_TOKENS", "PARAPHRASE_PROMPT", "ROOT_LABEL", "TRANSFORMS",
    "Candidate", "Family", "SynDiff", "SynOrig", "SynParams", "SynSim", "SynTr", "SynTrParams", "TransformName",
    "Tree", "apply_transforms", "author_plan", "back_pp", "dependency_tree", "front_pp", "levenshtein",
    "lexical_difference", "load_parser", "parse", "pos_distance", "regular_participle", "select_candidate",
    "syntactic_distance", "third_singular", "to_active", "to_passive", "tree_distance", "tree_edit_distance",
    "tree_size",
]
