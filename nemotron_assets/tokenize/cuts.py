"""Where an over-long text may be cut so that its pieces tokenize to exactly the ids of the whole text.

Hugging Face ``tokenizers`` encodes a text T in four stages: (1) split T at added-token matches (special
tokens such as ``<|end_of_text|>``); (2) normalize each remaining segment; (3) pre-tokenize it into
pre-tokens; (4) run the model (BPE, WordPiece, Unigram, ...) on each pre-token on its own; then the
post-processor adds its template tokens (BERT's ``[CLS] ... [SEP]``, a BOS) once per call. Holding the
~600 bytes per token of a whole 50 MB document is what made one document cost 6.8 GB, so long texts are
encoded in pieces A | B (without the template, which is added once around all of them). That is exact iff
each stage gives, for T = A + B, its result for A followed by its result for B.

**The cut.** A cut point c is a line break between two visible characters: ``Y \\n X`` (or ``Y \\r\\n X``
where CRLF is allowed below), Y and X of Unicode category L, N, P or S (letters, digits, punctuation,
symbols: never whitespace, never a combining mark), cut right after the ``\\n``.

**Why each stage splits cleanly there**, for the components :class:`CutRules` accepts (anything else is
refused, and the text is tokenized whole):

1. *Added tokens.* A match crossing c would contain the ``\\n`` and the character after it, so no added token
   may contain whitespace (also not after normalization, which may turn ``\\n`` into a space). An ``lstrip``
   token starting at c would swallow the ``\\n`` to its left, so a cut is never placed before the first
   character of one. ``rstrip`` tokens stop at X (not whitespace) in T and at the end in A: same match.
2. *Normalizers* accepted work character by character (Lowercase, StripAccents, BertNormalizer, NMT, a
   one-character Replace) or are the Unicode normalization forms, which reorder and compose only within a
   combining sequence; ``\\n`` is a starter that composes with nothing, so no sequence crosses c. Prepend,
   Strip, regex Replace and SentencePiece's Precompiled map look at the piece as a whole and are refused.
3. *Pre-tokenizers.* The first one (or the first of a Sequence) must put a boundary at c and split A exactly
   as it splits the first part of T:

   - BertPreTokenizer, Whitespace, WhitespaceSplit split at every whitespace character and decide each
     split from the two characters around it, so c (after whitespace) is a boundary and nothing else moves.
   - Llama-3's Split regex (``LLAMA3_SPLIT_REGEX``, also tiktoken's cl100k), Isolated. Its regex has no
     look-behind, so matching T from c is matching B. Up to c: the only alternatives that can consume the
     ``\\n`` are ``\\s*[\\r\\n]+`` and the ``[\\r\\n]*`` tail of `` ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*``; both are
     greedy runs of classes that exclude X, so in T they stop at X and in A at the end: the same match, ending
     at c. ``\\s+(?!\\S)`` (whose look-ahead would see X in T and the end in A) is tried after
     ``\\s*[\\r\\n]+``, which already matches any whitespace run holding a line break. Every earlier match
     ends before the ``\\n`` and looked at most one character past its end, so it never saw X. CRLF is fine.
   - GPT-2's ByteLevel regex (``ByteLevel(use_regex=True, add_prefix_space=False)``): Y's match stops at the
     ``\\n``; the ``\\n`` alone is one pre-token in both T (``\\s+(?!\\S)`` fails before X, ``\\s+`` takes it)
     and A (``\\s+(?!\\S)`` takes it at the end). With ``\\r\\n`` it is not: T gives ``\\r``, ``\\n`` and A
     ``\\r\\n``, so for this regex only a bare ``\\n`` is a cut.

   Later members of a Sequence then see splits that already end at c; each works on one split at a time and
   does not depend on where the split lies in the text, except Metaspace with ``prepend_scheme="first"``
   (it adds ``▁`` only at offset 0, which every piece would get): refused anywhere. ByteLevel
   ``add_prefix_space`` and Metaspace ``prepend_scheme="always"`` as the *first* member add text at the start
   of every piece: refused there.
4. *Models* run on one pre-token at a time. BPE dropout (random merges) is refused.
5. *Post-processor:* ByteLevel (ids unchanged), TemplateProcessing ``special... $A special...``,
   BertProcessing, RobertaProcessing, or a Sequence of them add a constant prefix and suffix; we read them
   from the tokenizer and check ``encode(t) == prefix + encode(t, add_special_tokens=False) + suffix`` on probe
   texts before trusting them.

**The tokenizer checks every cut too.** Besides the argument above, a cut is used only if, on a window W of
``WINDOW_CHARS`` each side, the tokenizer itself agrees: normalizing W gives normalize(left) +
normalize(right); the pre-tokenizer puts a boundary at c in normalized W with the premise above (a ``\\n``,
or whitespace for the whitespace splitters, right before it, visible characters around it); and
``ids(W) == ids(left) + ids(right)``. A cut failing that is skipped and the next line break is tried; after
``MAX_REJECTED_CUTS`` failures the rest of the text stays one piece.
"""

import json
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field

from tokenizers import Tokenizer

LLAMA3_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
PIECE_CHARS = 1 << 19  # target piece length: ~0.5 M characters
WINDOW_CHARS = 1 << 10  # characters each side of a cut that the tokenizer re-checks
MAX_REJECTED_CUTS = 64  # per text: after this many line breaks fail the check, the rest stays one piece

# Pre-tokenizer kinds that put a boundary at a line break (see the module docstring, stage 3).
WHITESPACE_SPLITTERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
PER_SPLIT_PRE_TOKENIZERS = WHITESPACE_SPLITTERS | {"ByteLevel", "Metaspace", "Digits", "Punctuation", "Split",
                                                   "UnicodeScripts", "CharDelimiterSplit"}
PER_CHARACTER_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "BertNormalizer", "Nmt"}
MODELS = {"BPE", "WordPiece", "WordLevel", "Unigram"}


@dataclass(frozen=True)
class CutRules:
    """How texts may be cut for one tokenizer, or why they must not be."""

    refusal: str | None  # why no cut can be proven for this tokenizer; None when cuts are allowed
    crlf: bool = False  # "\r\n" counts as a line break (not for GPT-2's regex)
    whitespace_splitter: bool = False  # the first pre-tokenizer splits at any whitespace (premise check)
    prefix: tuple[int, ...] = ()  # ids the post-processor puts before every text
    suffix: tuple[int, ...] = ()  # ... and after it
    lstrip_starts: frozenset[str] = field(default_factory=frozenset)  # first characters of lstrip tokens


def visible(char: str) -> bool:
    """A letter, digit, punctuation or symbol: never whitespace, a control or a combining mark."""
    return unicodedata.category(char)[0] in "LNPS"


def cut_rules(tokenizer: Tokenizer) -> CutRules:
    """Decide, from the tokenizer's components, whether line-break cuts are exact (module docstring)."""
    lstrip_starts, reason = _added_tokens(tokenizer)
    if reason is None:
        reason = _normalizer_refusal(_state(tokenizer.normalizer))
    kind = None
    if reason is None:
        kind, reason = _pre_tokenizer_kind(_state(tokenizer.pre_tokenizer))
    if reason is None:
        reason = _model_refusal(tokenizer)
    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()
    if reason is None:
        prefix, suffix, reason = _template(tokenizer)
    if reason is not None:
        return CutRules(refusal=reason)
    return CutRules(refusal=None, crlf=kind != "gpt2-regex", whitespace_splitter=kind == "whitespace",
                    prefix=prefix, suffix=suffix, lstrip_starts=lstrip_starts)


def _state(component: object | None) -> dict | None:
    """A tokenizer component's JSON (as in tokenizer.json); None when the tokenizer has none."""
    return None if component is None else json.loads(component.__getstate__())


def _added_tokens(tokenizer: Tokenizer) -> tuple[frozenset[str], str | None]:
    lstrip_starts = set()
    for token in tokenizer.get_added_tokens_decoder().values():
        if any(char.isspace() for char in token.content):
            return frozenset(), f"added token {token.content!r} contains whitespace, so it could span a line break"
        if token.lstrip:
            if token.normalized:
                return frozenset(), f"added token {token.content!r} strips whitespace on its left after normalizing"
            lstrip_starts.add(token.content[0])
    return frozenset(lstrip_starts), None


def _normalizer_refusal(spec: dict | None) -> str | None:
    if spec is None:
        return None
    kind = spec["type"]
    if kind == "Sequence":
        return next(filter(None, map(_normalizer_refusal, spec["normalizers"])), None)
    if kind in PER_CHARACTER_NORMALIZERS:
        return None
    if kind == "Replace" and len(spec["pattern"].get("String", "")) == 1:
        return None  # one character replaced by a string: still character by character
    if kind == "Prepend":
        return f"the normalizer Prepend adds {spec['prepend']!r} at the start of every piece"
    return f"the normalizer {kind} may look across a cut"


def _pre_tokenizer_kind(spec: dict | None) -> tuple[str | None, str | None]:
    """("whitespace" | "llama3-regex" | "gpt2-regex", None), or (None, why not)."""
    if spec is None:
        return None, "there is no pre-tokenizer, so the model sees the whole text at once"
    members = _flatten(spec)
    for member in members:
        if member["type"] not in PER_SPLIT_PRE_TOKENIZERS:
            return None, f"the pre-tokenizer {member['type']} is not analysed"
        if member["type"] == "Metaspace" and member.get("prepend_scheme") == "first":
            return None, ("the pre-tokenizer Metaspace with prepend_scheme 'first' prepends '▁' only at the start "
                          "of the text, which every piece would get")
    first = members[0]
    kind = first["type"]
    if kind in WHITESPACE_SPLITTERS:
        return "whitespace", None
    if (kind == "Split" and first["pattern"].get("Regex") == LLAMA3_SPLIT_REGEX and first["behavior"] == "Isolated"
            and not first["invert"]):
        return "llama3-regex", None
    if kind == "ByteLevel" and first["add_prefix_space"]:
        return None, "the pre-tokenizer ByteLevel with add_prefix_space adds a space at the start of every piece"
    if kind == "ByteLevel" and first.get("use_regex", True):
        return "gpt2-regex", None
    if kind == "Metaspace" and first.get("prepend_scheme") == "always":
        return None, "the pre-tokenizer Metaspace with prepend_scheme 'always' adds '▁' at the start of every piece"
    return None, f"the first pre-tokenizer ({_describe(first)}) is not known to split cleanly at line breaks"


def _flatten(spec: dict) -> list[dict]:
    if spec["type"] == "Sequence":
        return [member for inner in spec["pretokenizers"] for member in _flatten(inner)]
    return [spec]


def _describe(spec: dict) -> str:
    details = {k: v for k, v in spec.items() if k != "type"}
    return f"{spec['type']} {json.dumps(details, ensure_ascii=False)}" if details else spec["type"]


def _model_refusal(tokenizer: Tokenizer) -> str | None:
    kind = type(tokenizer.model).__name__
    if kind not in MODELS:
        return f"the model {kind} is not analysed"
    if kind == "BPE" and tokenizer.model.dropout:
        return "the BPE model has dropout, so its ids are random"
    return None


def _template(tokenizer: Tokenizer) -> tuple[tuple[int, ...], tuple[int, ...], str | None]:
    """The post-processor's constant (prefix, suffix), checked on probe texts; or why there is none."""
    parsed = _template_parts(_state(tokenizer.post_processor))
    if isinstance(parsed, str):
        return (), (), parsed
    prefix, suffix = parsed
    added = [t.content for t in tokenizer.get_added_tokens_decoder().values()][:8]
    # A closed vocabulary (WordLevel without an unknown token) cannot encode "x", but it encodes its own tokens.
    vocabulary = [tokenizer.id_to_token(i) for i in range(min(8, tokenizer.get_vocab_size()))]
    vocabulary = [token for token in vocabulary if token is not None]  # ids may have holes
    checked = 0
    for probe in ["x", "Hello, world!\nA second line.", *vocabulary, *(f"a {token} b" for token in added), ""]:
        try:
            with_template = tokenizer.encode(probe, add_special_tokens=True).ids
            bare = tokenizer.encode(probe, add_special_tokens=False).ids
        except Exception:  # tokenizers raises a bare Exception, e.g. for a word a WordLevel vocabulary lacks
            continue
        if with_template != [*prefix, *bare, *suffix]:
            return (), (), f"the post-processor does not add a constant prefix and suffix (probe {probe!r})"
        checked += bool(bare)
    if not checked:
        return (), (), "no probe text could check the post-processor"
    return tuple(prefix), tuple(suffix), None


def _template_parts(spec: dict | None) -> tuple[list[int], list[int]] | str:
    if spec is None or spec["type"] == "ByteLevel":
        return [], []
    kind = spec["type"]
    if kind in ("BertProcessing", "RobertaProcessing"):
        return [spec["cls"][1]], [spec["sep"][1]]
    if kind == "TemplateProcessing":
        single = spec["single"]
        sequences = [i for i, part in enumerate(single) if "Sequence" in part]
        if len(sequences) != 1:
            return "the post-processor's template does not hold the text exactly once"

        def ids(parts: list[dict]) -> list[int]:
            return [i for part in parts for i in spec["special_tokens"][part["SpecialToken"]["id"]]["ids"]]

        return ids(single[:sequences[0]]), ids(single[sequences[0] + 1:])
    if kind == "Sequence":
        prefix: list[int] = []
        suffix: list[int] = []
        for inner in spec["processors"]:  # applied in order: a later one wraps what the earlier ones made
            parts = _template_parts(inner)
            if isinstance(parts, str):
                return parts
            prefix, suffix = parts[0] + prefix, suffix + parts[1]
        return prefix, suffix
    return f"the post-processor {kind} is not analysed"


class Cutter:
    """Finds the cut points of long texts for one tokenizer (``CutRules`` plus the tokenizer's own check)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.rules = cut_rules(tokenizer)

    def cut_points(self, text: str, piece_chars: int = PIECE_CHARS) -> list[int]:
        """Increasing cut offsets, about ``piece_chars`` apart; [] when the tokenizer forbids cuts or none passes."""
        if self.rules.refusal is not None:
            return []
        cuts: list[int] = []
        rejected = 0
        start = 0
        while len(text) - start > piece_chars + piece_chars // 2:
            for cut in self._candidates(text, start + piece_chars):
                if self.is_exact_cut(text, cut):
                    cuts.append(cut)
                    start = cut
                    break
                rejected += 1
                if rejected >= MAX_REJECTED_CUTS:
                    return cuts
            else:
                return cuts  # no line break left that could be a cut
        return cuts

    def _candidates(self, text: str, position: int) -> Iterator[int]:
        """Offsets right after a line break between two visible characters, from ``position`` on."""
        newline = text.find("\n", position)
        while newline != -1 and newline + 1 < len(text):
            if self._shape_ok(text, newline + 1):
                yield newline + 1
            newline = text.find("\n", newline + 1)

    def _shape_ok(self, text: str, cut: int) -> bool:
        """``Y \\n X`` (or ``Y \\r\\n X``) with Y, X visible and X not the start of an lstrip token."""
        before = cut - 2
        if before >= 0 and text[before] == "\r":
            if not self.rules.crlf:
                return False
            before -= 1
        return (before >= 0 and cut < len(text) and text[cut - 1] == "\n" and visible(text[before])
                and visible(text[cut]) and text[cut] not in self.rules.lstrip_starts)

    def is_exact_cut(self, text: str, cut: int) -> bool:
        """The shape of the module docstring, and the tokenizer's own agreement on a window around ``cut``."""
        if self.rules.refusal is not None or not self._shape_ok(text, cut):
            return False
        left = text[max(0, cut - WINDOW_CHARS):cut]
        right = text[cut:cut + WINDOW_CHARS]
        normalizer = self.tokenizer.normalizer
        if normalizer is None:
            normalized, at = left + right, len(left)
        else:
            normalized_left = normalizer.normalize_str(left)
            normalized = normalizer.normalize_str(left + right)
            if normalized != normalized_left + normalizer.normalize_str(right):
                return False
            at = len(normalized_left)
        if not self._premise_holds(normalized, at):
            return False
        if any(start < at < end for _, (start, end) in self.tokenizer.pre_tokenizer.pre_tokenize_str(normalized)):
            return False
        encode = self.tokenizer.encode
        return (encode(left + right, add_special_tokens=False).ids
                == encode(left, add_special_tokens=False).ids + encode(right, add_special_tokens=False).ids)

    def _premise_holds(self, normalized: str, at: int) -> bool:
        """What the pre-tokenizer argument needs around the cut, on the text the pre-tokenizer really sees."""
        if not 0 < at < len(normalized):
            return False
        if self.rules.whitespace_splitter:
            return normalized[at - 1].isspace()
        return self._shape_ok(normalized, at)
