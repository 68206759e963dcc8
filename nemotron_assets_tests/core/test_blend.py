"""The blend file (blend.py): both layouts, YAML and JSON, validation that names the key and the file."""

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemotron_assets.core.blend import (
    Blend,
    DatasetEntry,
    UnknownBlend,
    load_blend,
    load_blend_folder,
    parse_size,
)
from nemotron_assets.sources.errors import InputError

REPO = Path(__file__).resolve().parents[2]

PER_SPLIT_YAML = """\
tokenizer_model: llama3
shard_size: 64MB
train:
  - {name: wiki, path: data/wiki/*.jsonl, weight: 0.7}
  - name: code
    path: hf://org/code
    subset: python
    weight: 0.3
    text_field: content
valid:
  - {name: wiki_valid, path: data/wiki_valid.jsonl}
"""


def write(folder: Path, name: str, content: str | dict) -> Path:
    path = folder / name
    path.write_text(json.dumps(content) if isinstance(content, dict) else content, encoding="utf-8")
    return path


def load_error(path: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        load_blend(path)
    assert caught.value.path == str(path)
    return caught.value


def test_yaml_per_split_blend(tmp_path):
    blend = load_blend(write(tmp_path, "mix.yaml", PER_SPLIT_YAML))
    assert blend.name == "mix"
    assert {split: [(e.name, e.weight) for e in entries] for split, entries in blend.splits().items()} == {
        "train": [("wiki", 0.7), ("code", 0.3)], "valid": [("wiki_valid", 1.0)]}
    code = blend.entry("code")
    assert (code.path, code.subset, code.text_field) == ("hf://org/code", "python", "content")
    assert blend.entry("wiki").text_field == "text"
    assert blend.split_of("wiki_valid") == "valid"
    assert blend.shard_size_bytes == 64_000_000


def test_json_flat_blend_is_the_train_split(tmp_path):
    path = write(tmp_path, "flat.json", {"datasets": [{"name": "a", "path": "a.jsonl"},
                                                      {"name": "b", "path": "b.parquet", "weight": 2.5}]})
    blend = load_blend(path)
    assert blend.name == "flat"
    assert list(blend.splits()) == ["train"]
    assert [(e.name, e.weight) for e in blend.splits()["train"]] == [("a", 1.0), ("b", 2.5)]
    assert blend.split_of("b") == "train"


def test_yaml_and_json_forms_give_the_same_blend(tmp_path):
    import yaml

    from_yaml = load_blend(write(tmp_path, "same.yaml", PER_SPLIT_YAML))
    from_json = load_blend(write(tmp_path, "same.json", yaml.safe_load(PER_SPLIT_YAML)))
    assert from_yaml == from_json


def test_name_defaults_to_the_file_stem_and_can_be_set(tmp_path):
    (tmp_path / "a").mkdir()
    assert load_blend(write(tmp_path / "a", "pretrain_v2.yml", "datasets: [{name: x, path: x.jsonl}]")).name == \
        "pretrain_v2"
    assert load_blend(write(tmp_path, "other.yaml", "name: chosen\ndatasets: [{name: x, path: x.jsonl}]")).name == \
        "chosen"


def test_unknown_dataset_key_names_the_key_and_the_file(tmp_path):
    path = write(tmp_path, "typo.yaml", "train:\n  - {name: wiki, path: w.jsonl, wieght: 0.5}\n")
    error = load_error(path)
    assert str(error).startswith(f"{path}: ")
    assert "train.0.wieght: unknown key" in str(error)


def test_unknown_top_level_key_names_the_key_and_the_file(tmp_path):
    path = write(tmp_path, "typo.json", {"shard_sise": "1MB", "datasets": [{"name": "a", "path": "a.jsonl"}]})
    assert str(load_error(path)).startswith(f"{path}: shard_sise: unknown key")


@pytest.mark.parametrize("name", ["../x", "..", "a/b", "Wiki", ".hidden", "a..b", "", "x y", "-x"])
def test_unsafe_dataset_names_are_rejected(tmp_path, name):
    path = write(tmp_path, "names.json", {"datasets": [{"name": name, "path": "a.jsonl"}]})
    message = str(load_error(path))
    assert f"dataset name {name!r} must match" in message
    assert "datasets.0.name" in message


@pytest.mark.parametrize("name", ["wiki", "wiki_v2", "a.b-c", "0", "_x"])
def test_safe_dataset_names_are_accepted(name):
    assert DatasetEntry(name=name, path="x.jsonl").name == name


def test_duplicate_dataset_names_are_rejected_across_splits(tmp_path):
    path = write(tmp_path, "dup.yaml", "train: [{name: a, path: x.jsonl}]\ntest: [{name: a, path: y.jsonl}]\n")
    assert "dataset name 'a' appears twice" in str(load_error(path))


def test_both_layouts_at_once_are_rejected(tmp_path):
    path = write(tmp_path, "both.yaml", "datasets: [{name: a, path: x.jsonl}]\ntrain: [{name: b, path: y.jsonl}]\n")
    assert "use either 'datasets' or per-split" in str(load_error(path))


@pytest.mark.parametrize("body", ["tokenizer_model: llama3\n", "datasets: []\n", "train: []\nvalid: []\n"])
def test_a_blend_without_datasets_is_rejected(tmp_path, body):
    assert "lists no datasets" in str(load_error(write(tmp_path, "none.yaml", body)))


@pytest.mark.parametrize(
    ("entry", "where"),
    [({"name": "a", "path": "x", "weight": -0.1}, "datasets.0.weight"),
     ({"name": "a", "path": "x", "format": "csv"}, "datasets.0.format"),
     ({"name": "a"}, "datasets.0.path"),
     ({"name": "a", "path": "x", "num_shards": 0}, "datasets.0.num_shards")],
)
def test_invalid_entry_values_name_the_field(tmp_path, entry, where):
    assert f"{where}: " in str(load_error(write(tmp_path, "bad.json", {"datasets": [entry]})))


def test_invalid_shard_size_names_the_setting(tmp_path):
    path = write(tmp_path, "size.yaml", "shard_size: lots\ndatasets: [{name: a, path: x.jsonl}]\n")
    assert "shard_size: " in str(load_error(path))
    assert "not a size: 'lots'" in str(load_error(path))


def test_invalid_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "broken.yaml", "datasets:\n  - name: a\n    path: [unclosed\n  - name: b\n")
    error = load_error(path)
    assert error.line is not None and error.line >= 3
    assert str(error).startswith(f"{path}:{error.line}: invalid YAML")


def test_invalid_yaml_indentation_names_the_line(tmp_path):
    path = write(tmp_path, "indent.yaml", "tokenizer_model: llama3\nadd_eos: true\n  shard_size: 1MB\n")
    error = load_error(path)
    assert error.line == 3
    assert str(error).startswith(f"{path}:3: invalid YAML")


def test_invalid_json_names_the_line(tmp_path):
    path = write(tmp_path, "broken.json", '{\n  "datasets": [\n    {"name": "a",, "path": "x"}\n  ]\n}\n')
    error = load_error(path)
    assert error.line == 3
    assert str(error).startswith(f"{path}:3: invalid JSON")


def test_missing_blend_file(tmp_path):
    assert str(load_error(tmp_path / "nope.yaml")) == f"{tmp_path / 'nope.yaml'}: blend file does not exist"


@pytest.mark.parametrize("body", ["- a\n- b\n", "", "just text\n"])
def test_blend_file_must_be_a_mapping(tmp_path, body):
    assert "must hold a mapping" in str(load_error(write(tmp_path, "list.yaml", body)))


def test_blend_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"tokenizer_model: caf\xe9\n")
    assert "not UTF-8 text" in str(load_error(path))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("256MB", 256_000_000), ("1GiB", 2**30), (1000, 1000), ("1000", 1000), ("48KB", 48_000), ("64k", 64_000),
     ("2 mib", 2 * 2**20), ("1.5GB", 1_500_000_000), ("0.5KiB", 512), ("1TB", 10**12), ("3Ti", 3 * 2**40),
     ("7b", 7), (" 12 MB ", 12_000_000), ("1.001KB", 1001), ("4.35MB", 4_350_000), ("0.123MB", 123_000),
     ("2.675kB", 2675)],
)
def test_parse_size(value, expected):
    assert parse_size(value) == expected


@given(millis=st.integers(1, 10**9), unit=st.sampled_from([("KB", 10**3), ("MB", 10**6), ("GB", 10**9),
                                                            ("MiB", 2**20), ("GiB", 2**30)]))
def test_parse_size_of_a_decimal_with_three_fraction_digits_is_exact(millis, unit):
    suffix, multiplier = unit
    assert parse_size(f"{millis // 1000}.{millis % 1000:03d}{suffix}") == millis * multiplier // 1000


@pytest.mark.parametrize("value", ["abc", "-1", "1.5XB", "MB", "", "1 2MB", "ib", "5ib", 0, -3, "0MB", "0.0001B"])
def test_parse_size_rejects(value):
    with pytest.raises(ValueError, match="not a size|must be positive"):
        parse_size(value)


def test_blend_model_validates_directly():
    blend = Blend(name="direct", datasets=[DatasetEntry(name="a", path="a.jsonl", num_shards=2)], num_shards=5)
    assert blend.shard_count_override(blend.entry("a")) == 2
    with pytest.raises(KeyError, match="no dataset 'missing'"):
        blend.entry("missing")


def test_a_second_file_with_the_same_blend_name_is_broken_and_the_first_loads(tmp_path):
    write(tmp_path, "a.yaml", "name: same\ndatasets: [{name: x, path: x.jsonl}]\n")
    write(tmp_path, "b.json", {"name": "same", "datasets": [{"name": "y", "path": "y.jsonl"}]})
    folder = load_blend_folder(tmp_path)
    assert [blend.entries()[0].name for _, blend in folder.blends] == ["x"]
    [broken] = folder.broken
    assert broken.path == tmp_path / "b.json" and "blend name 'same' is also used by" in str(broken.error)


def test_one_broken_blend_file_is_reported_as_that_blend_and_the_others_load(tmp_path):
    write(tmp_path, "good.yaml", "datasets: [{name: x, path: x.jsonl}]\n")
    write(tmp_path, "typo.yaml", "datasets: [{name: x, path: x.jsonl, wieght: 2}]\n")
    write(tmp_path, "bad.json", "{not json")
    folder = load_blend_folder(tmp_path)
    assert [blend.name for _, blend in folder.blends] == ["good"]
    assert [b.name for b in folder.broken] == ["bad", "typo"]
    assert folder.find("good")[1].name == "good"
    with pytest.raises(InputError, match=r"typo\.yaml.*wieght: unknown key"):
        folder.find("typo")
    with pytest.raises(InputError, match=r"bad\.json:1: invalid JSON"):
        folder.find("bad")
    with pytest.raises(UnknownBlend, match="no blend 'nosuch' \\(blends: bad, good, typo\\)"):
        folder.find("nosuch")


def test_a_blend_folder_is_sorted_and_ignores_other_files(tmp_path):
    write(tmp_path, "b.yaml", "datasets: [{name: x, path: x.jsonl}]\n")
    write(tmp_path, "a.json", {"datasets": [{"name": "y", "path": "y.jsonl"}]})
    write(tmp_path, "notes.txt", "not a blend")
    assert [blend.name for _, blend in load_blend_folder(tmp_path).blends] == ["a", "b"]


def test_bundled_sample_blend_loads():
    blend = load_blend(REPO / "blends" / "sample.yaml")
    assert blend.name == "sample"
    assert set(blend.splits()) <= {"train", "valid", "test"}
    assert len({e.name for e in blend.entries()}) == len(blend.entries())
