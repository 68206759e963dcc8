"""The dataset card of a Hugging Face folder: ``README.md``, a YAML header between ``---`` lines, then Markdown.

The header is what ``datasets.load_dataset(folder, config)`` and the Hub read::

    ---
    pretty_name: posttrain_sample
    license: [cc-by-4.0, other]                  # every license of the rows, sorted
    configs:                                     # one per set: its files per split (paths in the folder)
    - config_name: pool_tool_use
      data_files:
      - {split: train, path: [pools/tool_use/part-00000.parquet]}
    dataset_info:                                # per config: the columns and the rows per split
    - config_name: pool_tool_use
      features: [...]                            # datasets' YAML form of the files' Arrow schema
      splits:
      - {name: train, num_bytes: 51234, num_examples: 8}
      download_size: 24542                       # bytes of the files as stored
      dataset_size: 51234
    ---

``features`` are written because a JSONL config's files may not share one inferred schema (a row of the valid split
with a field the train split lacks): ``datasets`` then casts every file to the card's columns instead of the first
file's. ``num_examples`` are the rows ``datasets`` counts, and it checks them when it loads. ``num_bytes`` is the
uncompressed size of the data (Parquet: its row groups' ``total_byte_size``; JSONL: the decompressed lines).

The body repeats the counts in a table with each config's rows per license. ``datasets`` is needed only to write the
features (the ``export`` extra); nothing here reads or writes a data file.
"""

from dataclasses import dataclass

import pyarrow as pa
import yaml

from nemotron_assets.sources.errors import InputError


@dataclass(frozen=True)
class SplitFiles:
    """One split of a config: its files (paths inside the folder, ``/``-separated), rows and sizes."""

    name: str  # a Hugging Face split name: train, validation, test
    paths: tuple[str, ...]
    rows: int
    data_bytes: int  # uncompressed
    stored_bytes: int


@dataclass(frozen=True)
class CardConfig:
    """One config of the folder: what it is, its splits, its columns and its rows per license."""

    name: str
    description: str
    splits: tuple[SplitFiles, ...]
    schema: pa.Schema
    licenses: dict[str, int]  # license -> rows (or samples, for packed SFT)


def card_text(title: str, configs: list[CardConfig], summary: str = "") -> str:
    """The whole README.md for ``configs``, in their order."""
    licenses = sorted({name for config in configs for name in config.licenses})
    header = {
        "pretty_name": title,
        "license": licenses,
        "configs": [{"config_name": config.name,
                     "data_files": [{"split": split.name, "path": list(split.paths)} for split in config.splits]}
                    for config in configs],
        "dataset_info": [_dataset_info(config) for config in configs],
    }
    yaml_text = yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{yaml_text}---\n\n{_body(title, configs, summary)}"


def _dataset_info(config: CardConfig) -> dict:
    return {
        "config_name": config.name,
        "features": _features_yaml(config.schema),
        "splits": [{"name": split.name, "num_bytes": split.data_bytes, "num_examples": split.rows}
                   for split in config.splits],
        "download_size": sum(split.stored_bytes for split in config.splits),
        "dataset_size": sum(split.data_bytes for split in config.splits),
    }


def _features_yaml(schema: pa.Schema) -> list:
    """The features of ``schema`` as ``datasets`` writes them in a card (its DatasetInfosDict, the form
    ``push_to_hub`` writes)."""
    try:
        from datasets import DatasetInfo, Features
        from datasets.info import DatasetInfosDict
    except ImportError:
        raise InputError("the dataset card's features are written by Hugging Face datasets: install the export "
                         "extra (pip install 'nemotron_assets[export]')") from None
    from huggingface_hub import DatasetCardData

    card_data = DatasetCardData()
    DatasetInfosDict({"default": DatasetInfo(features=Features.from_arrow_schema(schema))}
                     ).to_dataset_card_data(card_data)
    return card_data.to_dict()["dataset_info"]["features"]


def _body(title: str, configs: list[CardConfig], summary: str) -> str:
    lines = [f"# {title}", ""]
    if summary:
        lines += [summary, ""]
    lines += ["| config | what | split | rows | files |", "|---|---|---|---:|---:|"]
    for config in configs:
        for split in config.splits:
            lines.append(f"| `{config.name}` | {config.description} | {split.name} | {split.rows:,} | "
                         f"{len(split.paths)} |")
    lines += ["", "Rows by license (the rows' own `license`, else the dataset's `license:` setting, else `other`; "
              "packed SFT counts samples):", "", "| config | license | rows |", "|---|---|---:|"]
    for config in configs:
        for name, rows in sorted(config.licenses.items()):
            lines.append(f"| `{config.name}` | {name} | {rows:,} |")
    first = configs[0].name if configs else "CONFIG"
    lines += ["", "```python", "import datasets", f"datasets.load_dataset(FOLDER_OR_REPO_ID, {first!r})", "```", ""]
    return "\n".join(lines)
