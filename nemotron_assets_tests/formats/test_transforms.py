"""JSONL transforms (nemotron_assets/formats/transforms.py): golden outputs per transform, drop reasons, split
routing (same prompt -> same split, adding rows moves none), files read back with pyarrow's own zstd decoder, and
the NeMo-RL manifest."""

import hashlib
import json

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemotron_assets.formats.splits import Holdout, holdout_split
from nemotron_assets.formats.transforms import (
    Skip,
    jsonl_manifest,
    parse_transform,
    write_jsonl_shard,
)

RL_ROW = {
    "uuid": "u1",
    "responses_create_params": {"input": [{"role": "user", "content": "2+2?"}],
                                "tools": [{"type": "function", "name": "calc"}], "temperature": 1.0},
    "expected_answer": "4",
    "agent_ref": {"name": "math"},
}


def apply(spec, row):
    return parse_transform(spec).apply(row)


def skip_reason(spec, row) -> str:
    with pytest.raises(Skip) as caught:
        apply(spec, row)
    return caught.value.reason


# --- each transform --------------------------------------------------------------------------------------------------


def test_nemotron_rl_emits_messages_and_tools_and_keeps_every_other_field():
    out = apply("nemotron_rl", RL_ROW)
    assert out == {"messages": [{"role": "user", "content": "2+2?"}],
                   "tools": [{"type": "function", "name": "calc"}],
                   "uuid": "u1", "expected_answer": "4", "agent_ref": {"name": "math"}}
    assert list(out) == ["messages", "tools", "uuid", "expected_answer", "agent_ref"]


def test_nemotron_rl_takes_responses_input_items_without_a_role():
    items = [{"role": "user", "content": "weather?"}, {"type": "function_call", "name": "w", "arguments": "{}"},
             {"type": "function_call_output", "output": "sunny"}]
    out = apply("nemotron_rl", {"responses_create_params": {"input": items}})
    assert out == {"messages": items}
    assert parse_transform("nemotron_rl").split_key(out) == "weather?"


def test_openai_chat_messages_need_a_role():
    assert skip_reason("openai_chat", {"messages": [{"content": "no role"}]}) == "invalid_message:messages"


def test_nemotron_rl_leaves_out_empty_tools():
    row = {"responses_create_params": {"input": [{"role": "user", "content": "hi"}], "tools": []}, "id": 3}
    assert apply("nemotron_rl", row) == {"messages": [{"role": "user", "content": "hi"}], "id": 3}


@pytest.mark.parametrize("row, reason", [
    ({"x": 1}, "missing:responses_create_params"),
    ({"responses_create_params": "text"}, "not_an_object:responses_create_params"),
    ({"responses_create_params": {}}, "missing:responses_create_params.input"),
    ({"responses_create_params": {"input": "hi"}}, "not_a_list:responses_create_params.input"),
    ({"responses_create_params": {"input": []}}, "empty:responses_create_params.input"),
    ({"responses_create_params": {"input": ["just text"]}}, "invalid_message:responses_create_params.input"),
    ({"responses_create_params": {"input": [{"role": "user"}], "tools": {}}},
     "not_a_list:responses_create_params.tools"),
    ({"responses_create_params": {"input": [{"role": "user"}]}, "messages": []}, "conflict:messages"),
])
def test_nemotron_rl_drop_reasons(row, reason):
    assert skip_reason("nemotron_rl", row) == reason


def test_openai_chat():
    row = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "tools": [],
           "uuid": "x"}
    assert apply("openai_chat", row) == {"messages": row["messages"]}
    assert apply("openai_chat", {**row, "tools": [{"t": 1}]})["tools"] == [{"t": 1}]
    assert skip_reason("openai_chat", {"conversations": []}) == "missing:messages"


def test_sharegpt():
    turns = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]
    assert apply("sharegpt", {"conversations": turns, "x": 1}) == {"conversations": turns}
    assert apply("sharegpt", {"conversations": turns, "system": "s"}) == {"system": "s", "conversations": turns}
    assert skip_reason("sharegpt", {"conversations": [{"from": "human"}]}) == "invalid_message:conversations"


def test_sft_maps_named_fields_to_input_output_and_system():
    spec = {"name": "sft", "input": "q", "output": "a", "system": "s"}
    assert apply(spec, {"q": "Q", "a": "A", "s": "S", "z": 0}) == {"input": "Q", "output": "A", "system": "S"}
    assert apply(spec, {"q": "Q", "a": "A"}) == {"input": "Q", "output": "A"}
    assert apply({"name": "sft"}, {"input": "Q", "output": "A"}) == {"input": "Q", "output": "A"}
    assert skip_reason(spec, {"q": "Q"}) == "missing:a"
    assert skip_reason(spec, {"q": ["Q"], "a": "A"}) == "not_a_string:q"


def test_select_rename_passthrough():
    row = {"a": 1, "b": [2], "c": None}
    assert apply({"name": "select", "fields": ["c", "a"]}, row) == {"c": None, "a": 1}
    assert skip_reason({"name": "select", "fields": ["a", "d"]}, row) == "missing:d"
    assert apply({"name": "rename", "map": {"x": "a", "y": "b"}}, row) == {"x": 1, "y": [2]}
    assert skip_reason({"name": "rename", "map": {"x": "q"}}, row) == "missing:q"
    assert apply("passthrough", row) == row and apply({"name": "passthrough"}, row) == row


@pytest.mark.parametrize("spec, match", [
    ("chatml", "unknown transform"), ({"name": "sft", "prompt": "q"}, "unknown option"),
    ({"name": "select", "fields": []}, "non-empty list"), ({"name": "select", "fields": ["a", "a"]}, "repeat"),
    ({"name": "rename", "map": {"x": 1}}, "new_name: old_name"), ({"name": "nemotron_rl", "x": 1}, "takes no options"),
    ({"fields": ["a"]}, "a 'name'"), ({"name": "sft", "input": 3}, "field name"),
])
def test_bad_transform_settings_are_refused(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_transform(spec)


# --- split keys ------------------------------------------------------------------------------------------------------


def test_split_keys_per_transform():
    assert parse_transform("nemotron_rl").split_key(apply("nemotron_rl", RL_ROW)) == "2+2?"
    turns = {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}]}
    assert parse_transform("sharegpt").split_key(apply("sharegpt", turns)) == "q"
    assert parse_transform({"name": "sft", "input": "q", "output": "a"}).split_key({"input": "Q", "output": "A"}) \
        == "Q"
    # no user message: the whole output row, canonical JSON
    assert parse_transform("passthrough").split_key({"b": 1, "a": "é"}) == '{"a":"é","b":1}'


# --- shard files -----------------------------------------------------------------------------------------------------


def read_lines(path) -> list[dict]:
    """Read a written file back with pyarrow's own zstd decoder (not the zstandard package that wrote it)."""
    compression = "zstd" if path.suffix == ".zst" else None
    with pa.input_stream(str(path), compression=compression) as stream:
        data = stream.read()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.split(b"\n")[:-1]]  # JSONL lines end at \n only


def rl_rows(n: int, prompts: int | None = None):
    for i in range(n):
        prompt = f"problem {i % prompts if prompts else i}"
        yield i, {"responses_create_params": {"input": [{"role": "user", "content": prompt}]}, "answer": i}


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_rows_go_to_their_holdout_split_files(tmp_path, compression):
    holdout = Holdout(valid=0.2, test=0.1, seed=42)
    stats = write_jsonl_shard(rl_rows(500), parse_transform("nemotron_rl"), tmp_path, dataset="rl", shard=3,
                              holdout=holdout, compression=compression)
    suffix = ".jsonl.zst" if compression else ".jsonl"
    seen = 0
    for split in ("train", "valid", "test"):
        path = tmp_path / split / f"shard_00003{suffix}"
        rows = read_lines(path)
        assert len(rows) == stats.rows[split] > 0
        assert all(holdout_split(r["messages"][0]["content"], holdout) == split for r in rows)
        assert stats.files[split] == {"path": f"{split}/shard_00003{suffix}", "bytes": path.stat().st_size,
                                      "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        seen += len(rows)
    assert seen == stats.rows_in == 500 and not stats.dropped
    assert 0.15 < stats.rows["valid"] / 500 < 0.25


def test_every_solution_of_one_problem_lands_in_the_same_split(tmp_path):
    write_jsonl_shard(rl_rows(300, prompts=20), parse_transform("nemotron_rl"), tmp_path, dataset="rl", shard=0,
                      holdout=Holdout(valid=0.3, test=0.3, seed=1))
    where = {}
    for split in ("train", "valid", "test"):
        for row in read_lines(tmp_path / split / "shard_00000.jsonl") if (tmp_path / split).exists() else []:
            where.setdefault(row["messages"][0]["content"], set()).add(split)
    assert len(where) == 20 and all(len(splits) == 1 for splits in where.values())


@given(extra=st.lists(st.text(min_size=1), max_size=20))
def test_adding_rows_never_moves_one(tmp_path_factory, extra):
    holdout = Holdout(valid=0.25, test=0.25, seed=9)
    transform = parse_transform({"name": "sft", "input": "q", "output": "a"})
    base = [(i, {"q": f"question {i}", "a": "x"}) for i in range(60)]
    more = base + [(60 + i, {"q": text, "a": "y"}) for i, text in enumerate(extra)]

    def splits_of(rows):
        out = tmp_path_factory.mktemp("jsonl")
        write_jsonl_shard(rows, transform, out, dataset="d", shard=0, holdout=holdout)
        return {r["input"]: split for split in ("train", "valid", "test") if (out / split).exists()
                for r in read_lines(out / split / "shard_00000.jsonl")}

    before, after = splits_of(base), splits_of(more)
    assert all(after[q] == split for q, split in before.items())


def test_dropped_rows_are_counted_by_reason_with_examples(tmp_path):
    rows = [(0, RL_ROW), (1, {"x": 1}), (2, {"responses_create_params": {"input": []}}), (3, {"x": 2}),
            (4, {**RL_ROW, "blob": b"\x00"})]
    stats = write_jsonl_shard(rows, parse_transform("nemotron_rl"), tmp_path, dataset="rl", shard=0, holdout=None)
    assert stats.dropped == {"missing:responses_create_params": 2, "empty:responses_create_params.input": 1,
                             "unserializable": 1}
    assert stats.examples == ["row 1: missing:responses_create_params", "row 2: empty:responses_create_params.input",
                              "row 3: missing:responses_create_params", "row 4: unserializable"]
    assert stats.rows == {"train": 1} and list(stats.files) == ["train"]
    assert stats.rows_in == 5 == sum(stats.rows.values()) + sum(stats.dropped.values())


def test_a_dataset_listed_under_valid_goes_wholly_there(tmp_path):
    stats = write_jsonl_shard(rl_rows(50), parse_transform("nemotron_rl"), tmp_path, dataset="rl", shard=0,
                              holdout=Holdout(valid=0.01, test=0.01, seed=0), fixed_split="valid")
    assert stats.rows == {"valid": 50} and sorted(p.name for p in tmp_path.iterdir()) == ["valid"]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_same_rows_give_byte_identical_files(tmp_path, compression):
    digests = []
    for name in ("a", "b"):
        stats = write_jsonl_shard(rl_rows(200), parse_transform("nemotron_rl"), tmp_path / name, dataset="rl",
                                  shard=1, holdout=Holdout(valid=0.5, seed=3), compression=compression)
        digests.append({split: f["sha256"] for split, f in stats.files.items()})
    assert digests[0] == digests[1]


def test_lines_are_orjson_in_row_key_order(tmp_path):
    write_jsonl_shard([(0, {"b": 1, "a": "é", "c": [1.5, None]})], parse_transform("passthrough"), tmp_path,
                      dataset="d", shard=0, holdout=None)
    assert (tmp_path / "train" / "shard_00000.jsonl").read_bytes() == '{"b":1,"a":"é","c":[1.5,null]}\n'.encode()


def test_bad_compression_is_refused(tmp_path):
    with pytest.raises(ValueError, match="compression"):
        write_jsonl_shard([], parse_transform("passthrough"), tmp_path, dataset="d", shard=0, holdout=None,
                          compression="gzip")


def test_the_manifest_lists_files_per_split_in_dataset_then_shard_order(tmp_path):
    transform, holdout = parse_transform("nemotron_rl"), Holdout(valid=0.3, test=0.2, seed=4)
    shards = [write_jsonl_shard(rl_rows(100), transform, tmp_path / ds, dataset=ds, shard=shard, holdout=holdout,
                                compression="zstd")
              for ds, shard in (("b_set", 1), ("a_set", 0), ("b_set", 0))]
    shards.append(write_jsonl_shard([(0, {"x": 1})], transform, tmp_path / "c_set", dataset="c_set", shard=0,
                                    holdout=holdout))
    manifest = jsonl_manifest(shards)
    assert manifest["train"] == ["a_set/train/shard_00000.jsonl.zst", "b_set/train/shard_00000.jsonl.zst",
                                 "b_set/train/shard_00001.jsonl.zst"]
    for split in ("train", "valid", "test"):
        assert all((tmp_path / path).exists() for path in manifest[split])
        assert manifest["rows"][split] == sum(len(read_lines(tmp_path / path)) for path in manifest[split])
    assert manifest["datasets"]["b_set"]["rows_in"] == 200
    assert manifest["datasets"]["b_set"]["compression"] == "zstd"
    assert manifest["datasets"]["c_set"] == {"transform": "nemotron_rl", "compression": None, "rows_in": 1,
                                             "rows": {"train": 0, "valid": 0, "test": 0},
                                             "dropped": {"missing:responses_create_params": 1}}
    json.dumps(manifest)
