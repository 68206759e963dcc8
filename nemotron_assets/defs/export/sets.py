"""What an export holds: the committed files of every set the blend builds, one config each, by split.

    pool_<pool>       candidate pool <pool>    split train        pools/<pool>/part-NNNNN.parquet  (not when empty)
    sft_packed        packed chat SFT          train/validation/test   sft/<split>/shard_NNNNN.parquet
    jsonl_<dataset>   a transform dataset      train/validation/test   jsonl/<dataset>/<split>/shard_NNNNN.jsonl[.zst]

A file keeps its path under the blend's folder, and its receipt gives its size and sha256: nothing is read to list
it. Every output must be up to date by the one definition (core/records.py), or the export is ``NotReady``, naming
what to materialize. Our ``valid`` split is Hugging Face's ``validation``.

`describe` then reads what the card needs from the files: rows, the Arrow schema and the rows per license (a row's
own license, else its dataset's ``license:`` setting, else ``other``). Parquet footers give rows and schema; the
licenses come from one column (``source_license`` of a pool, ``license`` of the packed SFT's sample listing, which
counts samples); a JSONL file is parsed whole by pyarrow.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa
import pyarrow.ipc  # noqa: F401 - pa.ipc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.records import NotReady, output_path
from nemotron_assets.core.status import OutputState
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.downstream import Curation, downstream_states
from nemotron_assets.defs.jsonl.shard import current_shards, jsonl_datasets
from nemotron_assets.defs.sft.inputs import PackedSft
from nemotron_assets.defs.sft.status import sft_states
from nemotron_assets.formats.hf_card import CardConfig, SplitFiles
from nemotron_assets.sources.errors import InputError

HF_SPLIT = {"train": "train", "valid": "validation", "test": "test"}
OTHER = "other"


@dataclass(frozen=True)
class ExportedFile:
    path: str  # inside the export folder (and under the blend's folder): pools/tool_use/part-00000.parquet
    source: str  # relative to the storage root
    digest: dict  # {"bytes", "sha256"}, as its receipt records it


@dataclass(frozen=True)
class ExportSet:
    config: str
    description: str
    kind: Literal["pool", "sft", "jsonl"]
    splits: dict[str, tuple[ExportedFile, ...]]  # Hugging Face split -> its files, in order
    #: what else is read for the card (the packed SFT's sample listings): its path in the storage root -> sha256
    read: dict[str, str] = field(default_factory=dict)

    @property
    def file_format(self) -> str:
        return "json" if self.kind == "jsonl" else "parquet"

    def files(self) -> list[ExportedFile]:
        return [file for files in self.splits.values() for file in files]


def export_sets(store: Storage, blend: Blend, base: str) -> list[ExportSet]:
    """Every set of the blend under ``base``, pools first (in the blend's pool order), then the packed SFT, then the
    JSONL datasets in blend order. ``InputError`` when there is none, or when Parquet and JSONL sets would share
    the folder (``datasets`` reads one file format per folder: the first config's)."""
    sets = [*pool_sets(store, blend, base), *sft_sets(store, blend, base), *jsonl_sets(store, blend, base)]
    if not sets:
        raise InputError(f"blend {blend.name!r} has nothing to export: no candidate pool (curation:), packed SFT "
                         "(sft:) or JSONL dataset (transform:)")
    formats = {s.file_format: [x.config for x in sets if x.file_format == s.file_format] for s in sets}
    if len(formats) > 1:
        raise InputError(f"blend {blend.name!r} has Parquet sets ({', '.join(formats['parquet'])}) and JSONL sets "
                         f"({', '.join(formats['json'])}); datasets.load_dataset reads one file format per folder, "
                         "so one export cannot hold both: export them from two blends")
    return sets


def _require_done(states: list[OutputState], blend: str, asset: str) -> None:
    not_done = [f"{state.key} ({state.freshness.state.value}: {state.freshness.reason})" for state in states
                if not state.freshness.done]
    if not_done:
        raise NotReady(f"{len(not_done)} {asset} output(s) of {blend} are not up to date: {'; '.join(not_done[:5])}: "
                       f"materialize {blend} first")


def _in_export(base: str, relative: str) -> str:
    return relative.removeprefix(f"{base}/")


def _data_files(base: str, prefix: str, files: dict[str, dict]) -> list[tuple[str, ExportedFile]]:
    """(name, file) of the data a receipt lists: every file but the ``.meta/`` side files."""
    return [(name, ExportedFile(_in_export(base, output_path(prefix, name)), output_path(prefix, name), digest))
            for name, digest in sorted(files.items()) if not name.startswith(".meta/")]


def pool_sets(store: Storage, blend: Blend, base: str) -> list[ExportSet]:
    if not blend.pools():
        return []
    states = [s for s in downstream_states(store, Curation.of(blend), base) if s.asset == "candidate_pool"]
    _require_done(states, blend.name, "candidate_pool")
    return [ExportSet(f"pool_{state.key}", f"candidate pool `{state.key}`", "pool",
                      {"train": tuple(f for _, f in _data_files(base, state.prefix, state.freshness.receipt.files))})
            for state in states if state.freshness.receipt.stats["rows"]]  # datasets cannot load an empty split


def sft_sets(store: Storage, blend: Blend, base: str) -> list[ExportSet]:
    """The packed Parquet bins per split. The card counts their samples by license: each bin's sample listing
    (``.meta/``) names the samples, whose licenses are in the ``sft_samples`` files; both are in ``read``."""
    if blend.sft is None:
        return []
    states = sft_states(store, PackedSft.of(blend), base)
    packed = [s for s in states if s.asset == "sft_packed"]
    samples = [s for s in states if s.asset == "sft_samples"]
    _require_done(packed + samples, blend.name, "packed SFT")
    splits: dict[str, list[ExportedFile]] = {}
    read = {}
    for state in packed + samples:
        for name, digest in state.freshness.receipt.files.items():
            if name.startswith(".meta/") or name.endswith(".arrow"):
                read[output_path(state.prefix, name)] = digest["sha256"]
    for state in packed:
        for _, file in _data_files(base, state.prefix, state.freshness.receipt.files):
            splits.setdefault(HF_SPLIT[state.key.split("/")[0]], []).append(file)
    ordered = {split: tuple(splits[split]) for split in HF_SPLIT.values() if split in splits}
    return [ExportSet("sft_packed", f"packed chat SFT, bins of {blend.sft.pack_size:,} positions", "sft", ordered,
                      read)] if ordered else []


def jsonl_sets(store: Storage, blend: Blend, base: str) -> list[ExportSet]:
    datasets = jsonl_datasets(blend)
    if not datasets:
        return []
    by_dataset: dict[str, dict[str, list[ExportedFile]]] = {name: {} for name in datasets}
    for key, receipt in current_shards(store, datasets, base):  # NotReady names the shards that are not up to date
        prefix = f"{base}/jsonl/{key.dataset}/shard_{key.index:05d}"
        for name, file in _data_files(base, prefix, receipt.files):
            by_dataset[key.dataset].setdefault(HF_SPLIT[name.split("/")[0]], []).append(file)
    return [ExportSet(f"jsonl_{name}", f"`{name}` as JSONL ({datasets[name].transform.name})", "jsonl",
                      {split: tuple(splits[split]) for split in HF_SPLIT.values() if split in splits})
            for name, splits in by_dataset.items() if splits]


# --- what the card says of a set -----------------------------------------------------------------------------------
def describe(store: Storage, blend: Blend, export_set: ExportSet) -> CardConfig:
    """The set's card config: rows, bytes and files per split, its columns (the files' schemas unified), and its
    rows per license."""
    settings = {entry.name: entry.license for entry in blend.entries()}
    licenses: Counter = Counter()
    schemas, splits = [], []
    for split, files in export_set.splits.items():
        rows = data_bytes = 0
        for file in files:
            if export_set.kind == "jsonl":
                table = _jsonl_table(store, file)
                rows, data_bytes = rows + table.num_rows, data_bytes + table.get_total_buffer_size()
                schemas.append(table.schema)
                dataset = export_set.config.removeprefix("jsonl_")
                own = (table.column("license").to_pylist() if "license" in table.column_names
                       and pa.types.is_string(table.schema.field("license").type) else [None] * table.num_rows)
                licenses.update(own_or_setting(value, dataset, settings) for value in own)
                continue
            with store.open(file.source) as stream:
                metadata = pq.ParquetFile(stream).metadata
                schemas.append(metadata.schema.to_arrow_schema())
            rows += metadata.num_rows
            data_bytes += sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
            if export_set.kind == "pool":
                licenses.update(_licenses(store, file.source, "source_license", settings))
        splits.append(SplitFiles(split, tuple(file.path for file in files), rows, data_bytes,
                                 sum(file.digest["bytes"] for file in files)))
    if export_set.kind == "sft":
        licenses.update(_sample_licenses(store, export_set.read, settings))
    try:
        schema = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InputError(f"{export_set.config}: its files' columns do not agree ({exc}); datasets could not load "
                         "them as one config") from None
    return CardConfig(export_set.config, export_set.description, tuple(splits), schema, dict(licenses))


def own_or_setting(value: str | None, dataset: str, settings: dict[str, str | None]) -> str:
    """A row's license: its own, else its dataset's ``license:`` setting, else ``other``."""
    return (value or "").strip() or settings.get(dataset) or OTHER


def _licenses(store: Storage, relative: str, column: str, settings: dict[str, str | None]) -> Counter:
    with store.open(relative) as stream:
        table = pq.read_table(stream, columns=["dataset", column])
    return Counter(own_or_setting(value, dataset, settings)
                   for dataset, value in zip(table.column("dataset").to_pylist(), table.column(column).to_pylist()))


def _sample_licenses(store: Storage, read: dict[str, str], settings: dict[str, str | None]) -> Counter:
    """The packed samples by license: each listed sample's (dataset, id) looked up in the sample files."""
    own: dict[tuple[str, str], str | None] = {}
    for relative in (path for path in read if path.endswith(".arrow")):
        with store.open(relative) as stream:
            table = pa.ipc.open_file(stream).read_all().select(["dataset", "id", "license"])
        own.update(((d, i), value) for d, i, value in zip(*(table.column(c).to_pylist() for c in table.column_names)))
    counted: Counter = Counter()
    for relative in (path for path in read if path.endswith(".parquet")):
        with store.open(relative) as stream:
            table = pq.read_table(stream, columns=["dataset", "id"])
        counted.update(own_or_setting(own.get((d, i)), d, settings)
                       for d, i in zip(table.column("dataset").to_pylist(), table.column("id").to_pylist()))
    return counted


def _jsonl_table(store: Storage, file: ExportedFile) -> pa.Table:
    data = store.read_bytes(file.source)
    if file.path.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    try:
        return pa_json.read_json(pa.BufferReader(data))
    except pa.ArrowInvalid as exc:
        raise InputError(f"{store.url(file.source)}: not JSONL that datasets can read: {exc}") from None
