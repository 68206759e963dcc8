"""From texts to Megatron documents: tokenize, then optional BOS, truncation, and the EOD.

Megatron's ``preprocess_data.py --append-eod`` does, per document: ids = tokenizer(text) with the
post-processor on; if ids is empty the document is empty (no sequence, no EOD); else ids + [eod]. We do the
same on whole batches with numpy; a text longer than ``long_documents.LONG_DOCUMENT_CHARS`` is encoded in
pieces with exactly the same ids (``cuts.py`` says where it may be cut and why). ``add_bos`` (off by
default, as in Megatron) prepends BOS to non-empty documents whose tokenization does not already start
with it; ``max_doc_tokens`` truncates so a document has at most that many tokens with the EOD still last.

With ``split_sentences`` (Megatron's ``--split-sentences``) a document is first cut into sentences
(tokenize/sentences.py), each sentence is tokenized on its own (post-processor on, as Megatron calls the tokenizer
once per sentence) and becomes one sequence; a sentence without ids is left out, and the EOD goes at the end of the
document's last sequence. A document without any id stays empty.

A SentencePiece or TikTokenizer model file (``ModelFileTokenizer``) goes through the same steps with Megatron's
ids for it (model_files.py).
"""

import json
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.cuts import Cutter
from nemotron_assets.tokenize.encoders import Encoder, HFEncoder, choose_encoder, parse_tokenizer
from nemotron_assets.tokenize.loading import TokenizerFiles, locate_any_tokenizer
from nemotron_assets.tokenize.long_documents import LONG_DOCUMENT_CHARS, LongDocuments, encode_texts
from nemotron_assets.tokenize.model_files import (
    ModelFile,
    SentencePieceEncoder,
    TiktokenEncoder,
    TiktokenSettings,
    sentencepiece_processor,
    tiktoken_encoding,
)
from nemotron_assets.tokenize.sentences import SentenceSplitter


@dataclass(frozen=True)
class DocumentOptions:
    add_bos: bool = False
    add_eos: bool = True
    eod_token: str | None = None
    max_doc_tokens: int | None = None
    backend: str = "auto"  # auto | hf | fastokens
    split_sentences: bool = False
    sentence_language: str = "english"  # the punkt model (Megatron's --lang)
    keep_newlines: bool = False


class LoadedTokenizer:
    """A tokenizer ready to turn text batches into documents, plus the facts the writer needs."""

    def __init__(self, files: TokenizerFiles, options: DocumentOptions) -> None:
        self.files = files
        self.options = options
        parsed = parse_tokenizer(files.tokenizer_json.read_text(encoding="utf-8"), str(files.tokenizer_json),
                                 with_fast=options.backend != "hf")
        self.reference = parsed.reference
        self.vocab_size = self.reference.get_vocab_size(with_added_tokens=True)
        self.eod_id = self._eod_id() if options.add_eos else None
        self.bos_id = self._token_id(files.bos_token, "bos_token") if options.add_bos else None
        self.encoder, self.backend_reason = choose_encoder(parsed, options.backend)
        self.hf = HFEncoder(self.reference)
        self.cutter = Cutter(self.reference)  # where long texts may be cut, or why not (cutter.rules.refusal)
        self.bos_already_added = bool(self.bos_id is not None and self._post_processor_adds(self.bos_id))
        self._check_truncation()
        self.splitter = sentence_splitter(options)

    @property
    def backend(self) -> str:
        return self.encoder.name

    def use_reference(self, reason: str) -> None:
        """Switch to hf-tokenizers (after a fast backend disagreed on real data)."""
        self.encoder = self.hf
        self.backend_reason = reason

    def _eod_id(self) -> int:
        for source, token in (("eod_token", self.options.eod_token), ("eos_token", self.files.eos_token),
                              ("sep_token", self.files.sep_token)):
            if token is not None:
                return self._token_id(token, source)
        raise InputError(
            "add_eos is on but the tokenizer config names no eos_token (or sep_token); set eod_token in "
            "the blend", path=str(self.files.tokenizer_json), field="eod_token")

    def _token_id(self, token: str | None, what: str) -> int:
        token_id = self.reference.token_to_id(token) if token is not None else None
        if token_id is None:
            raise InputError(f"{what} {token!r} is not in the vocabulary", path=str(self.files.tokenizer_json),
                             field=what)
        return token_id

    def _post_processor_adds(self, token_id: int) -> bool:
        ids = self.reference.encode("x", add_special_tokens=True).ids
        return bool(ids) and ids[0] == token_id

    def _check_truncation(self) -> None:
        limit = self.options.max_doc_tokens
        extra = (self.eod_id is not None) + (self.bos_id is not None and not self.bos_already_added)
        if limit is not None and limit <= extra:
            raise InputError(f"max_doc_tokens={limit} leaves no room for text next to BOS/EOD",
                             field="max_doc_tokens")

    def fingerprint(self) -> str:
        """Everything that changes the output ids, for deciding whether a shard is up to date."""
        return json.dumps({"tokenizer_sha256": self.files.sha256, "vocab": self.vocab_size,
                           "eod": self.eod_id, "bos": self.bos_id, "bos_added": self.bos_already_added,
                           "max_doc_tokens": self.options.max_doc_tokens}, sort_keys=True)

    def documents(self, texts: Sequence[str], encoder: Encoder | None = None,
                  long_documents: LongDocuments | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(flat ids, lengths) of the finished documents; length 0 marks an empty document.

        ``long_documents`` counts the texts encoded in pieces and those encoded whole (with the reason)."""
        ids, lengths = encode_texts(texts, encoder or self.encoder, self.cutter, long_documents)
        return assemble_documents(ids, lengths, bos_id=None if self.bos_already_added else self.bos_id,
                                  eod_id=self.eod_id, max_doc_tokens=self.options.max_doc_tokens)


    def sentence_documents(self, texts: Sequence[str], encoder: Encoder | None = None,
                           long_documents: LongDocuments | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(flat ids, sequence lengths, sequences per document) of the documents cut into sentences
        (``split_sentences``); a document with no sequence is empty."""
        return sentence_documents(self.splitter, texts, self.eod_id, lambda sentences: encode_texts(
            sentences, encoder or self.encoder, self.cutter, long_documents))


def sentence_splitter(options: DocumentOptions) -> SentenceSplitter | None:
    """The punkt splitter of ``split_sentences`` (its language, ``keep_newlines``), or None when it is off."""
    return SentenceSplitter.load(options.sentence_language, options.keep_newlines) if options.split_sentences else None


def sentence_documents(splitter: SentenceSplitter, texts: Sequence[str], eod_id: int | None, encode
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut each text into sentences, ``encode`` them all in one call, and assemble the documents' sequences."""
    sentences = [splitter.split(text) for text in texts]
    ids, lengths = encode([sentence for document in sentences for sentence in document])
    return assemble_sentences(ids, lengths, np.array([len(d) for d in sentences], dtype=np.int64), eod_id)


def assemble_sentences(ids: np.ndarray, lengths: np.ndarray, sentences: np.ndarray, eod_id: int | None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sentences without ids dropped, the EOD after each document's last sentence: (flat ids, sequence lengths,
    sequences per document). ``lengths``: ids per sentence; ``sentences``: sentences per document."""
    ids = np.asarray(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        ids = ids.astype(np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    document = np.repeat(np.arange(len(sentences)), sentences)
    kept = lengths > 0
    sequence_lengths, sequences = lengths[kept], np.bincount(document[kept], minlength=len(sentences))
    if eod_id is not None and len(sequence_lengths):
        last = np.cumsum(sequences)[sequences > 0] - 1  # each non-empty document's last sequence
        ids = np.insert(ids, np.cumsum(sequence_lengths)[last], eod_id)
        sequence_lengths[last] += 1
    return ids, sequence_lengths, sequences


def assemble_documents(ids: np.ndarray, lengths: np.ndarray, bos_id: int | None, eod_id: int | None,
                       max_doc_tokens: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Add BOS/EOD to non-empty documents and truncate, vectorised over the batch.

    The ids keep their integer dtype (fastokens gives uint32, hf-tokenizers int64): a huge document's ids are
    not widened to a second, twice as large copy."""
    ids = np.asarray(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        ids = ids.astype(np.int64)  # e.g. an empty float array built from an empty list
    lengths = np.asarray(lengths, dtype=np.int64)
    nonempty = lengths > 0
    if max_doc_tokens is not None:
        room = max_doc_tokens - (eod_id is not None) - (bos_id is not None)
        keep = np.minimum(lengths, room)
        if np.any(keep < lengths):
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            position = np.arange(len(ids)) - np.repeat(starts, lengths)
            ids = ids[position < np.repeat(keep, lengths)]
            lengths = keep
    ends = np.cumsum(lengths)
    if eod_id is not None:
        ids = np.insert(ids, ends[nonempty], eod_id)
        lengths = lengths + nonempty
    if bos_id is not None:
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        ids = np.insert(ids, starts[nonempty], bos_id)
        lengths = lengths + nonempty
    return ids, lengths


class ModelFileTokenizer:
    """A SentencePiece or TikTokenizer model file, ready to turn text batches into documents as Megatron does.

    Its own library is the one backend (nothing faster to cross-check), and a long text is encoded whole, as
    Megatron encodes it: the cuts of cuts.py are proven for tokenizer.json components only."""

    WHOLE = "a SentencePiece or TikTokenizer model encodes a text whole"

    def __init__(self, files: ModelFile, options: DocumentOptions) -> None:
        self.files = files
        self.options = options
        if options.backend == "fastokens":
            raise InputError(f"tokenizer backend fastokens needs a tokenizer.json, not a {files.kind} model",
                             path=str(files.path), field="tokenizer_backend")
        if files.kind == "sentencepiece":
            processor = sentencepiece_processor(files.path)
            self.encoder = SentencePieceEncoder(processor)
            self.vocab_size = processor.get_piece_size()
            self._piece_id = processor.piece_to_id
            self._piece = processor.id_to_piece
            eos_id, bos_id = processor.eos_id(), processor.bos_id()
        else:
            encoding = tiktoken_encoding(files.path, files.tiktoken or TiktokenSettings())
            specials = (files.tiktoken or TiktokenSettings()).special_tokens()
            self.encoder = TiktokenEncoder(encoding)
            self.vocab_size = files.vocab_size()
            self._piece_id = lambda token: specials.index(token) if token in specials else -1
            self._piece = lambda token_id: specials[token_id]
            eos_id, bos_id = specials.index("</s>"), specials.index("<s>")
        self.hf = self.encoder  # the reference: there is no second backend
        self.backend_reason = f"{files.kind} model file"
        self.eod_id = self._eod_id(eos_id) if options.add_eos else None
        self.bos_id = self._bos_id(bos_id) if options.add_bos else None
        if options.max_doc_tokens is not None and options.max_doc_tokens <= (self.eod_id is not None) + (
                self.bos_id is not None):
            raise InputError(f"max_doc_tokens={options.max_doc_tokens} leaves no room for text next to BOS/EOD",
                             field="max_doc_tokens")
        self.splitter = sentence_splitter(options)

    @property
    def backend(self) -> str:
        return self.encoder.name

    def _eod_id(self, eos_id: int) -> int:
        if self.options.eod_token is not None:
            return self._token_id(self.options.eod_token, "eod_token")
        if eos_id < 0:
            raise InputError(f"add_eos is on but the {self.files.kind} model has no EOS; set eod_token in the blend",
                             path=str(self.files.path), field="eod_token")
        return eos_id

    def _bos_id(self, bos_id: int) -> int:
        if bos_id < 0:
            raise InputError(f"add_bos is on but the {self.files.kind} model has no BOS", path=str(self.files.path),
                             field="add_bos")
        return bos_id

    def _token_id(self, token: str, what: str) -> int:
        token_id = self._piece_id(token)
        if token_id < 0 or self._piece(token_id) != token:
            raise InputError(f"{what} {token!r} is not in the vocabulary", path=str(self.files.path), field=what)
        return token_id

    def documents(self, texts: Sequence[str], encoder: Encoder | None = None,
                  long_documents: LongDocuments | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(flat ids, lengths) of the finished documents; length 0 marks an empty document."""
        if long_documents is not None:
            long = sum(len(text) > LONG_DOCUMENT_CHARS for text in texts)
            if long:
                long_documents.whole[self.WHOLE] = long_documents.whole.get(self.WHOLE, 0) + long
        ids, lengths = (encoder or self.encoder).encode(texts)
        return assemble_documents(ids, lengths, bos_id=self.bos_id, eod_id=self.eod_id,
                                  max_doc_tokens=self.options.max_doc_tokens)

    def sentence_documents(self, texts: Sequence[str], encoder: Encoder | None = None,
                           long_documents: LongDocuments | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As ``LoadedTokenizer.sentence_documents``, each sentence encoded whole."""
        return sentence_documents(self.splitter, texts, self.eod_id, (encoder or self.encoder).encode)


def load_tokenizer(spec: str, revision: str | None, options: DocumentOptions,
                   tiktoken: TiktokenSettings = TiktokenSettings()) -> "LoadedTokenizer | ModelFileTokenizer":
    files = locate_any_tokenizer(spec, revision, tiktoken)
    if isinstance(files, ModelFile):
        return ModelFileTokenizer(files, options)
    return LoadedTokenizer(files, options)


_LOADED: dict[tuple, Future] = {}  # (spec, ..., file identity) -> the tokenizer being loaded or loaded
_LOADED_LOCK = threading.Lock()
_KEEP_LOADED = 4


def cached_tokenizer(spec: str, revision: str | None, options: DocumentOptions,
                     tiktoken: TiktokenSettings = TiktokenSettings()) -> "LoadedTokenizer | ModelFileTokenizer":
    """One loaded tokenizer per process, setting and tokenizer file content: loading Llama-3 costs about a second,
    and a file replaced between two builds in one process (the Python API) is loaded again, as it is now.

    Safe to call from several threads: a second caller waits for the first one's load instead of loading again.
    A failed load is not kept: the callers waiting for it get its error, and the next call tries again."""
    identity = locate_any_tokenizer(spec, revision, tiktoken).identity()  # the file's sha256: hashed once per version
    key = (spec, revision, options, tiktoken, json.dumps(identity, sort_keys=True))
    with _LOADED_LOCK:
        loading = _LOADED.get(key)
        mine = loading is None
        if mine:
            loading = _LOADED[key] = Future()
            for old in list(_LOADED)[:-_KEEP_LOADED]:
                del _LOADED[old]
    if not mine:
        return loading.result()
    try:
        loading.set_result(load_tokenizer(spec, revision, options, tiktoken))
    except BaseException as exc:
        loading.set_exception(exc)
        with _LOADED_LOCK:
            if _LOADED.get(key) is loading:
                del _LOADED[key]
    return loading.result()
