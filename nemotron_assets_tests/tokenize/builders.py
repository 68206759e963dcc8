"""Tokenizers built in the tests, Megatron's rules written out, and long texts with tricky line breaks.

Every expected id in the tokenizer tests comes from here: the tokenizer *file* loaded with the ``tokenizers``
library (``Tokenizer.from_file``) and Megatron-LM's ``tools/preprocess_data.py --append-eod`` rules, never from
an object the code under test built. Megatron's rules:

- ids = the Hugging Face tokenizer called on the text with special tokens on (its post-processor adds
  BERT's ``[CLS] ... [SEP]`` or a BOS template); transformers ignores padding/truncation saved in
  tokenizer.json, so the reference does too;
- empty ids: an empty document, no EOD; otherwise ids + [eod];
- eod: the config's ``eos_token``; only a tokenizer without one falls back to ``sep_token``
  (megatron/core/tokenizers/text/libraries/huggingface_tokenizer.py in Megatron-LM).
"""

import json
import random
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.reference_data import read_texts

CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world, hello tokenizers", "numbers 12345 and café"]
SAMPLE_DATA = REPO / "blends" / "sample_data"


# --- Megatron's rules ------------------------------------------------------------------------------------

def reference(tokenizer_json: Path) -> Tokenizer:
    """The tokenizer file as ``tokenizers`` loads it, padding/truncation off as transformers (and Megatron) has."""
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def megatron_documents(tokenizer: Tokenizer, texts: list[str], eod: int | None) -> list[list[int]]:
    documents = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=True).ids
        documents.append(ids + [eod] if ids and eod is not None else ids)
    return documents


def split(ids: np.ndarray, lengths: np.ndarray) -> list[list[int]]:
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [[int(i) for i in ids[a:b]] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


# --- tokenizers built here ---------------------------------------------------------------------------------

def save(tokenizer: Tokenizer, folder: Path, **config) -> Path:
    """A Hugging Face-style tokenizer folder: tokenizer.json, plus tokenizer_config.json if config is given."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    if config:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def word_level() -> Tokenizer:
    """4 tokens, split on whitespace: "a b" -> [1, 2]."""
    tokenizer = Tokenizer(models.WordLevel({"<eos>": 0, "a": 1, "b": 2, "c": 3}, unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def trained_bpe(bos_template: bool = False, corpus: list[str] | None = None, vocab_size: int = 300,
                specials: tuple[str, ...] = ("<s>", "</s>")) -> Tokenizer:
    """A real byte-level BPE (GPT-2's regex) trained here; ``specials`` get ids 0, 1, ... in order.

    ``bos_template``: a post-processor that puts ``<s>`` (id 0) before every text."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus or CORPUS * 20, trainer)
    if bos_template:
        tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return tokenizer


def small_tokenizer(folder) -> str:
    """A byte-level BPE trained here (loads in milliseconds), saved as a tokenizer.json."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_start|>", "<|im_end|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(["hello world, the assistant answers the user"] * 20, trainer)
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


def bert_like() -> Tokenizer:
    """WordPiece whose post-processor wraps every text in [CLS] ... [SEP], as BERT's does."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5, "##s": 6}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tokenizer


def unigram_metaspace(prepend_scheme: str, split_whitespace_first: bool = False) -> Tokenizer:
    """A SentencePiece-style Unigram trained here on the sample data; ``<unk>`` 0, ``</s>`` 1.

    Metaspace replaces spaces with ``▁`` and, with ``prepend_scheme="first"``, puts one before the first word
    of the text only; ``split_whitespace_first`` splits at whitespace (line breaks included) before it."""
    tokenizer = Tokenizer(models.Unigram())
    metaspace = pre_tokenizers.Metaspace(prepend_scheme=prepend_scheme)
    tokenizer.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), metaspace])
                               if split_whitespace_first else metaspace)
    tokenizer.decoder = decoders.Metaspace(prepend_scheme=prepend_scheme)
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["<unk>", "</s>"], unk_token="<unk>",
                                      show_progress=False)
    tokenizer.train_from_iterator(sample_texts()[:40], trainer)
    return tokenizer


# --- real text, and long texts with tricky line breaks -------------------------------------------------------

def sample_texts() -> list[str]:
    """Every document of the bundled sample blend (wiki, reference, code, valid, test), in a fixed order."""
    texts: list[str] = []
    for path in sorted((SAMPLE_DATA / "wiki").glob("*.jsonl")):
        texts += read_texts(path)
    texts += read_texts(SAMPLE_DATA / "reference.jsonl.gz", "content")
    texts += read_texts(SAMPLE_DATA / "code.parquet")
    texts += read_texts(SAMPLE_DATA / "valid.jsonl.zst")
    texts += read_texts(SAMPLE_DATA / "test.jsonl")
    return texts


# Content that is hard for a cut right after a line break: whitespace runs and CRLF around it, digit runs,
# special-token literals of every tokenizer in the suite glued to the line break, combining marks after it.
TRICKY = [
    "\r\n", "\r\nSecond line after CRLF.\r\n", "\n\n\n", "   \n", "\n   indented\n", "\t\n\t", " \n ", "\n",
    "1234567890" * 7, "\n" + "9" * 40 + "\n", "3.14159\n2.71828\n",
    "<|end_of_text|>", "\n<|begin_of_text|>", "<|end_of_text|>\n", "\n<|end_of_text|>\nX",
    "[SEP]\n[CLS]", "\n[SEP]", "[CLS]\n", "</s>\n<s>", "\n</s>", "<s>\n", "<mask>", "\n<mask>",
    "\ne\u0301galité", "\n\u0301orphan mark", "e\u0301\n", "\n\u00a0nbsp line", "\u2028", "\u0085", "\x0c\n",
    "\n日本語の行\n", "\n😀 emoji line\n", "\n👩‍👩‍👧\n", "'s\n't", "don't\nwon't", ".\n.", "!!\n??", "}\n}",
    "\nΣΑΣ\nσ", "\nİstanbul\n",
]


def long_text(chars: int, seed: int) -> str:
    """About ``chars`` characters of real text (the sample data) with ``TRICKY`` pieces at random line breaks."""
    rng = random.Random(seed)
    paragraphs = [t for text in sample_texts() for t in text.split("\n") if t]
    out: list[str] = []
    size = 0
    while size < chars:
        piece = rng.choice(paragraphs)
        if rng.random() < 0.3:
            piece = rng.choice(TRICKY) + piece if rng.random() < 0.5 else piece + rng.choice(TRICKY)
        piece += "\r\n" if rng.random() < 0.1 else "\n"
        out.append(piece)
        size += len(piece)
    return "".join(out)
