"""JSONL for RL and SFT: row transforms, holdout routing, shard files and the NeMo-RL manifest.

A dataset's ``transform:`` turns each source row into one output row (`parse_transform`)::

    nemotron_rl   {"messages": row.responses_create_params.input, "tools": row.responses_create_params.tools
                   (only when non-empty), then every other top-level field of the row, in its order}; the other
                   request parameters (temperature, ...) are the RL environment's business and are not carried
    openai_chat   {"messages": row.messages, "tools": row.tools (only when non-empty)}
    sharegpt      {"system": row.system (only when present), "conversations": row.conversations}
    passthrough   the row unchanged
    {name: sft, input: q, output: a, system: s}   {"input": row.q, "output": row.a, "system": row.s (when present)}
                                                  (Megatron-Bridge GPTSFTDataset's input/output records)
    {name: select, fields: [a, b]}                {"a": row.a, "b": row.b}
    {name: rename, map: {new: old}}               {"new": row.old, ...}: only the mapped fields, as NVIDIA's
                                                  nemotron.data_prep ``rename`` does

A row a transform cannot take is dropped and counted under a reason, never lost silently: ``missing:<field>``,
``not_a_list:<field>``, ``not_an_object:<field>``, ``not_a_string:<field>``, ``empty:<field>``,
``invalid_message:<field>`` (an entry that is not an object, a chat message without a string ``role``, or a ShareGPT
turn without ``from``/``value``), ``conflict:<field>`` (``nemotron_rl`` would overwrite a top-level ``messages`` or
``tools`` of the row) and ``unserializable`` (a value JSON cannot hold, such as bytes). The first few drops keep
their row number as examples.

**Splits** (`nemotron_assets.formats.splits`): each output row goes to train, valid or test by the holdout hash of its
split key: the first user message (``messages`` with role ``user``, a ShareGPT turn from ``human``/``user``, or
``sft``'s input), else the whole output row as canonical JSON. A dataset listed under the blend's ``valid:`` or
``test:`` goes wholly there.

**Files**: ``<dataset>/<split>/shard_NNNNN.jsonl`` (or ``.jsonl.zst`` with ``compression: zstd``) under
``<root>/<blend>/jsonl/``, one per source shard and split that received rows; one JSON object per line, written by
orjson in the row's key order, so the same rows give byte-identical files (zstd level 3, one thread, with a content
checksum). ``manifest.json`` lists, per split, the files in dataset then shard order, for NeMo-RL
(`jsonl_manifest`).
"""

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import orjson
import zstandard

from nemotron_assets.formats.splits import SPLITS, Holdout, Split, assign_split, canonical_json, first_user_text

Compression = Literal["zstd"] | None
#: The version of what these transforms and the writer produce: in every JSONL shard receipt's inputs, bumped
#: whenever the bytes written for the same rows and settings change, so that older shards become stale.
FORMAT_VERSION = "jsonl/1"
ZSTD_LEVEL = 3
MAX_EXAMPLES = 5
SIMPLE_TRANSFORMS = ("nemotron_rl", "openai_chat", "sharegpt", "passthrough")
_OPTIONS = {"sft": {"input", "output", "system"}, "select": {"fields"}, "rename": {"map"}}


class Skip(Exception):
    """A row the transform cannot take; ``reason`` is the metadata key it is counted under."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Transform:
    """A parsed ``transform:`` setting; the fields after ``name`` are the options of sft, select and rename."""

    name: str
    input: str = "input"
    output: str = "output"
    system: str | None = None
    fields: tuple[str, ...] = ()
    mapping: tuple[tuple[str, str], ...] = ()  # (new, old) pairs, in the order given

    def apply(self, row: Mapping[str, Any]) -> dict:
        """The output row, or `Skip` with the reason the row cannot be taken."""
        if self.name == "nemotron_rl":
            return _nemotron_rl(row)
        if self.name == "openai_chat":
            out = {"messages": _messages(row, "messages")}
            tools = _tools(row, "tools")
            return out | ({"tools": tools} if tools else {})
        if self.name == "sharegpt":
            return _sharegpt(row)
        if self.name == "passthrough":
            return dict(row)
        if self.name == "sft":
            out = {"input": _string(row, self.input), "output": _string(row, self.output)}
            if self.system is not None and row.get(self.system) is not None:
                out["system"] = _string(row, self.system)
            return out
        if self.name == "select":
            return {name: _required(row, name) for name in self.fields}
        if self.name == "rename":
            return {new: _required(row, old) for new, old in self.mapping}
        raise AssertionError(f"unhandled transform {self.name}")  # parse_transform admits no other name

    def spec(self) -> dict:
        """The transform as JSON, for receipts: the same for the same transform however the blend spells it, and
        different whenever the output differs (``rename``'s pairs keep their order: it is the output key order)."""
        options = {"sft": {"input": self.input, "output": self.output, "system": self.system},
                   "select": {"fields": list(self.fields)},
                   "rename": {"map": [[new, old] for new, old in self.mapping]}}
        return {"name": self.name, **options.get(self.name, {})}

    def split_key(self, out: Mapping[str, Any]) -> str:
        """The text an output row's holdout split depends on (module docstring)."""
        if self.name == "sft":
            return out["input"]
        if self.name == "sharegpt":
            for turn in out["conversations"]:
                if str(turn["from"]).lower() in ("human", "user"):
                    value = turn["value"]
                    return value if isinstance(value, str) else canonical_json(value)
        messages = out.get("messages")
        if isinstance(messages, list):
            text = first_user_text(messages)
            if text is not None:
                return text
        return canonical_json(out)


def parse_transform(spec: str | Mapping[str, Any]) -> Transform:
    """A ``transform:`` value from a blend: a name, or a mapping with ``name`` and that transform's options."""
    if isinstance(spec, str):
        if spec not in SIMPLE_TRANSFORMS:
            raise ValueError(f"unknown transform {spec!r}: expected one of {', '.join(SIMPLE_TRANSFORMS)}, "
                             "or a mapping with name sft, select or rename")
        return Transform(spec)
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise ValueError(f"a transform is a name or a mapping with a 'name', got {spec!r}")
    name = spec["name"]
    options = {key: value for key, value in spec.items() if key != "name"}
    if name in SIMPLE_TRANSFORMS and not options:
        return Transform(name)
    if name not in _OPTIONS:
        raise ValueError(f"transform {name!r} takes no options" if name in SIMPLE_TRANSFORMS
                         else f"unknown transform {name!r}")
    unknown = set(options) - _OPTIONS[name]
    if unknown:
        raise ValueError(f"transform {name!r}: unknown option(s) {sorted(unknown)}; "
                         f"allowed: {sorted(_OPTIONS[name])}")
    if name == "sft":
        for key in ("input", "output", "system"):
            if key in options and not isinstance(options[key], str):
                raise ValueError(f"transform 'sft': {key} must be a field name, got {options[key]!r}")
        return Transform("sft", input=options.get("input", "input"), output=options.get("output", "output"),
                         system=options.get("system"))
    if name == "select":
        fields = options.get("fields")
        if not (isinstance(fields, list) and fields and all(isinstance(f, str) for f in fields)):
            raise ValueError(f"transform 'select': fields must be a non-empty list of field names, got {fields!r}")
        if len(set(fields)) != len(fields):
            raise ValueError(f"transform 'select': fields repeat a name: {fields}")
        return Transform("select", fields=tuple(fields))
    mapping = options.get("map")
    if not (isinstance(mapping, Mapping) and mapping
            and all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items())):
        raise ValueError(f"transform 'rename': map must be a non-empty mapping new_name: old_name, got {mapping!r}")
    return Transform("rename", mapping=tuple(mapping.items()))


# --- the transforms' field rules -------------------------------------------------------------------------------------


def _required(row: Mapping[str, Any], name: str, where: str | None = None) -> Any:
    if name not in row:
        raise Skip(f"missing:{where or name}")
    return row[name]


def _string(row: Mapping[str, Any], name: str) -> str:
    value = _required(row, name)
    if not isinstance(value, str):
        raise Skip(f"not_a_string:{name}")
    return value


def _messages(container: Mapping[str, Any], name: str, where: str | None = None, roles: bool = True) -> list:
    """A non-empty list of objects; with ``roles`` each must have a string ``role`` (chat messages). Responses-API
    input (``nemotron_rl``) may also hold items without a role, such as function calls and their outputs."""
    where = where or name
    messages = _required(container, name, where)
    if not isinstance(messages, list):
        raise Skip(f"not_a_list:{where}")
    if not messages:
        raise Skip(f"empty:{where}")
    if not all(isinstance(m, Mapping) and (not roles or isinstance(m.get("role"), str)) for m in messages):
        raise Skip(f"invalid_message:{where}")
    return messages


def _tools(container: Mapping[str, Any], name: str, where: str | None = None) -> list | None:
    tools = container.get(name)
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise Skip(f"not_a_list:{where or name}")
    return tools or None


def _nemotron_rl(row: Mapping[str, Any]) -> dict:
    params = _required(row, "responses_create_params")
    if not isinstance(params, Mapping):
        raise Skip("not_an_object:responses_create_params")
    out = {"messages": _messages(params, "input", "responses_create_params.input", roles=False)}
    tools = _tools(params, "tools", "responses_create_params.tools")
    if tools:
        out["tools"] = tools
    for key, value in row.items():
        if key == "responses_create_params":
            continue
        if key in ("messages", "tools"):
            raise Skip(f"conflict:{key}")
        out[key] = value
    return out


def _sharegpt(row: Mapping[str, Any]) -> dict:
    turns = _required(row, "conversations")
    if not isinstance(turns, list):
        raise Skip("not_a_list:conversations")
    if not turns:
        raise Skip("empty:conversations")
    if not all(isinstance(t, Mapping) and isinstance(t.get("from"), str) and "value" in t for t in turns):
        raise Skip("invalid_message:conversations")
    return ({"system": row["system"]} if row.get("system") is not None else {}) | {"conversations": turns}


# --- shard files -----------------------------------------------------------------------------------------------------


def jsonl_name(index: int, compression: Compression) -> str:
    return f"shard_{index:05d}.jsonl" + (".zst" if compression == "zstd" else "")


class _LineFile:
    """One output file, plain or zstd, with its sha256 and size computed as it is written."""

    def __init__(self, path: Path, compression: Compression) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.rows = path, 0
        self._raw: BinaryIO = open(path, "wb")
        self._out: BinaryIO = self._raw
        if compression == "zstd":
            compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, threads=0)
            self._out = compressor.stream_writer(self._raw, closefd=False)

    def write(self, line: bytes) -> None:
        self._out.write(line)
        self.rows += 1

    def close(self) -> None:
        if self._out is not self._raw:
            self._out.close()  # ends the zstd frame
        self._raw.close()


@dataclass
class JsonlShardStats:
    """One source shard's JSONL output: rows read, rows per split, drops by reason, the files written."""

    dataset: str
    shard: int
    transform: str
    compression: Compression = None
    rows_in: int = 0
    rows: Counter = field(default_factory=Counter)  # split -> rows written
    dropped: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    files: dict[str, dict] = field(default_factory=dict)  # split -> {"path" (relative to the dataset), bytes, sha256}

    def as_dict(self) -> dict:
        return {"dataset": self.dataset, "shard": self.shard, "transform": self.transform,
                "compression": self.compression, "rows_in": self.rows_in,
                "rows": {s: self.rows[s] for s in SPLITS if self.rows[s]},
                "dropped": dict(sorted(self.dropped.items())), "dropped_examples": self.examples, "files": self.files}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> "JsonlShardStats":
        """The stats ``as_dict`` gave (as a receipt stores them)."""
        return JsonlShardStats(data["dataset"], data["shard"], data["transform"], data["compression"],
                               data["rows_in"], Counter(data["rows"]), Counter(data["dropped"]),
                               list(data["dropped_examples"]), dict(data["files"]))


def write_jsonl_shard(rows: Iterable[tuple[int | str, Mapping[str, Any]]], transform: Transform, out_dir: Path, *,
                      dataset: str, shard: int, holdout: Holdout | None, fixed_split: Split | None = None,
                      compression: Compression = None) -> JsonlShardStats:
    """Transform one source shard's ``(row, row data)`` pairs into ``out_dir/<split>/shard_NNNNN.jsonl[.zst]``.

    A row is named by its number or by a location (``data/rl.jsonl:4``), which the examples of dropped rows quote.
    ``out_dir`` is the dataset's local staging folder; only splits that receive rows get a file.
    """
    if compression not in (None, "zstd"):
        raise ValueError(f"compression must be zstd or none, got {compression!r}")
    stats = JsonlShardStats(dataset, shard, transform.name, compression)
    files: dict[str, _LineFile] = {}
    try:
        for row_number, row in rows:
            stats.rows_in += 1
            try:
                out = transform.apply(row)
                line = orjson.dumps(out) + b"\n"
            except Skip as skip:
                _drop(stats, skip.reason, row_number)
                continue
            except orjson.JSONEncodeError:
                _drop(stats, "unserializable", row_number)
                continue
            split = assign_split(transform.split_key(out), holdout, fixed_split)
            if split not in files:
                files[split] = _LineFile(out_dir / split / jsonl_name(shard, compression), compression)
            files[split].write(line)
            stats.rows[split] += 1
    finally:
        for handle in files.values():
            handle.close()
    for split in SPLITS:
        if split in files:
            path = files[split].path
            stats.files[split] = {"path": f"{split}/{path.name}", "bytes": path.stat().st_size,
                                  "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    return stats


def _drop(stats: JsonlShardStats, reason: str, row: int | str) -> None:
    stats.dropped[reason] += 1
    if len(stats.examples) < MAX_EXAMPLES:
        stats.examples.append(f"{row if isinstance(row, str) else f'row {row}'}: {reason}")


def jsonl_manifest(shards: Sequence[JsonlShardStats]) -> dict:
    """``jsonl/manifest.json``: per split the files (relative to ``jsonl/``) in dataset then shard order, and counts
    per dataset (its transform and compression, rows read, written per split, dropped by reason)."""
    ordered = sorted(shards, key=lambda s: (s.dataset, s.shard))
    manifest: dict[str, Any] = {"format": "jsonl"}
    for split in SPLITS:
        manifest[split] = [f"{s.dataset}/{s.files[split]['path']}" for s in ordered if split in s.files]
    datasets: dict[str, dict] = {}
    for s in ordered:
        entry = datasets.setdefault(s.dataset, {"transform": s.transform, "compression": s.compression,
                                                "rows_in": 0, "rows": Counter(), "dropped": Counter()})
        entry["rows_in"] += s.rows_in
        entry["rows"].update(s.rows)
        entry["dropped"].update(s.dropped)
    manifest["rows"] = {split: sum(d["rows"][split] for d in datasets.values()) for split in SPLITS}
    manifest["datasets"] = {name: {"transform": d["transform"], "compression": d["compression"],
                                   "rows_in": d["rows_in"],
                                   "rows": {split: d["rows"][split] for split in SPLITS},
                                   "dropped": dict(sorted(d["dropped"].items()))}
                            for name, d in datasets.items()}
    return manifest
