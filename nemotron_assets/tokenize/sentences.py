"""Sentences as Megatron's ``preprocess_data.py --split-sentences [--lang L] [--keep-newlines]`` cuts them.

Megatron asks NLTK for ``tokenizers/punkt/<lang>.pickle``; NLTK 3.9 and later serve that name from the
``punkt_tab`` data (``tokenizers/punkt_tab/<lang>/``: four tab files of parameters), and with ``--keep-newlines``
Megatron rebuilds the splitter from those parameters with a variant of punkt's language variables whose pattern
lets a sentence end keep the whitespace after it (``\\s*`` where punkt has ``\\s+``), so newlines between sentences
stay in the text. A document is split in pieces of at most 1,000,000 characters, each piece on its own, and the
sentences of all pieces are the document's.

The data cannot be downloaded here: it is read from a local folder, the first of these that holds the language's
model: the ``punkt_tab`` copy the package ``llama-index-core`` ships (``llama_index/core/_static/nltk_cache``,
found from its installed files; the package is never imported), then every folder of NLTK's own search path
(``NLTK_DATA``, ``~/nltk_data``, ...). ``punkt_identity`` is what of it decides the sentences: the NLTK version
and the sha256 of the model's files.
"""

import functools
import hashlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.sources.errors import InputError

MEGATRON_PIECE_CHARS = 1_000_000  # preprocess_data.py Encoder.split: max_len
MODEL_FILES = ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab")
PACKAGE_WITH_DATA = "llama-index-core"
PACKAGE_DATA_FOLDER = "llama_index/core/_static/nltk_cache"


def punkt_roots() -> list[Path]:
    """The folders searched for ``tokenizers/punkt_tab/<language>/``, in order."""
    roots = []
    try:
        roots.append(Path(str(importlib.metadata.distribution(PACKAGE_WITH_DATA).locate_file(PACKAGE_DATA_FOLDER))))
    except importlib.metadata.PackageNotFoundError:
        pass
    return roots + [Path(folder) for folder in _nltk().data.path]


def _nltk():
    try:
        import nltk
        import nltk.data
        import nltk.tokenize.punkt
    except ImportError:
        raise InputError("split_sentences needs NLTK: install nemotron_assets[sentences]",
                         field="split_sentences") from None
    return nltk


def punkt_model_dir(language: str) -> Path:
    """The folder of ``language``'s punkt model; an ``InputError`` on the blend's ``sentence_language`` naming every
    folder searched when none has it."""
    if not language or not all(char.isalnum() or char in "-_" for char in language):
        raise InputError(f"{language!r} is not a punkt language name (letters, digits, - and _)",
                         field="sentence_language")
    roots = punkt_roots()
    for root in roots:
        folder = root / "tokenizers" / "punkt_tab" / language
        if all((folder / name).is_file() for name in MODEL_FILES):
            return folder
    raise InputError(f"no punkt_tab data for language {language!r} (looked for tokenizers/punkt_tab/{language}/ "
                     f"in {', '.join(str(root) for root in roots)}); install the package {PACKAGE_WITH_DATA} or put "
                     "NLTK's punkt_tab data in one of those folders", field="sentence_language")


def punkt_identity(language: str, keep_newlines: bool) -> dict:
    """What decides the sentences: the language, ``keep_newlines``, NLTK's version and the model's files."""
    folder = punkt_model_dir(language)
    stamps = tuple((folder / name).stat().st_mtime_ns for name in MODEL_FILES)
    return {"language": language, "keep_newlines": keep_newlines, "nltk": importlib.metadata.version("nltk"),
            "punkt_tab_sha256": _model_sha256(folder, stamps)}


@functools.lru_cache(maxsize=16)
def _model_sha256(folder: Path, stamps: tuple[int, ...]) -> str:
    """The sha256 of a model's files, read again only when one of them was modified (``stamps``): every shard's
    up-to-date test asks for it."""
    digest = hashlib.sha256()
    for name in MODEL_FILES:
        digest.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class SentenceSplitter:
    """Splits a document into sentences exactly as Megatron's ``Encoder.split`` does."""

    punkt: object  # nltk's PunktSentenceTokenizer

    @classmethod
    def load(cls, language: str, keep_newlines: bool) -> "SentenceSplitter":
        folder = punkt_model_dir(language)  # NLTK is there: punkt_roots imported it
        from nltk.tabdata import PunktDecoder
        from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

        # The parameters as nltk.tokenize.punkt.load_punkt_params reads them; opened here because NLTK's own
        # opener refuses folders outside its search path.
        params, decode = PunktParameters(), PunktDecoder()
        with open(folder / "collocations.tab", encoding="utf-8") as f:
            params.collocations = set(decode.tab2tups(f))
        with open(folder / "sent_starters.txt", encoding="utf-8") as f:
            params.sent_starters = decode.txt2set(f)
        with open(folder / "abbrev_types.txt", encoding="utf-8") as f:
            params.abbrev_types = decode.txt2set(f)
        with open(folder / "ortho_context.tab", encoding="utf-8") as f:
            params.ortho_context = decode.tab2intdict(f)
        return cls(PunktSentenceTokenizer(params, lang_vars=_newline_keeping_vars() if keep_newlines else None))

    def split(self, text: str) -> list[str]:
        return [sentence for start in range(0, len(text), MEGATRON_PIECE_CHARS)
                for sentence in self.punkt.tokenize(text[start:start + MEGATRON_PIECE_CHARS])]


def _newline_keeping_vars():
    """Punkt's language variables with the sentence-end pattern Megatron uses for ``--keep-newlines``: the
    whitespace after a sentence end is optional (``\\s*``) and the next token any non-space run (``\\S+``)."""
    from nltk.tokenize.punkt import PunktLanguageVars

    class KeepNewlines(PunktLanguageVars):
        _period_context_fmt = r"""
        \S*                          # some word material
        %(SentEndChars)s             # a potential sentence ending
        \s*                          # the whitespace after it, which may be none
        (?=(?P<after_tok>
            %(NonWord)s              # either other punctuation
            |
            (?P<next_tok>\S+)        # or the next token
        ))"""

    return KeepNewlines()
