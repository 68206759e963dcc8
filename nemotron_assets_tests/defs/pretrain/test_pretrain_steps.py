"""The pretraining graph run through a real Dagster instance: outputs are what Megatron would write,
reruns are byte-identical, failures leave nothing half-written, and a rerun redoes only what failed."""

import hashlib
import json
from pathlib import Path

import dagster as dg
import pytest

from nemotron_assets.core.workers import fork_available
from nemotron_assets.defs.pretrain import shard as shard_step
from nemotron_assets_tests.conftest import REPO, quick_instance
from nemotron_assets_tests.materialize_helpers import materialize_all, pipeline_for, run_asset, shard_keys
from nemotron_assets_tests.megatron_reader import read_dataset
from nemotron_assets_tests.reference_data import llama3_tokenizer, megatron_documents, read_texts

SAMPLE = REPO / "blends" / "sample.yaml"
INT32 = 4


def _dataset_documents(root: Path, blend: str, dataset: str) -> list[list[int]]:
    """Every document of a dataset's shards, shards concatenated in order."""
    documents = []
    prefixes = sorted((root / blend / "pretrain" / dataset).glob("shard_*.idx"))
    assert prefixes, f"no shards for {dataset}"
    for idx in prefixes:
        dtype_code, docs = read_dataset(str(idx)[: -len(".idx")])
        assert dtype_code == INT32  # Llama-3: 128,256 entries
        documents.extend(docs)
    return documents


def _sample_inputs(blend_dir: Path) -> dict[str, list[str]]:
    data = blend_dir / "sample_data"
    return {
        "wiki": read_texts(data / "wiki" / "part-00000.jsonl") + read_texts(data / "wiki" / "part-00001.jsonl"),
        "reference": read_texts(data / "reference.jsonl.gz", "content"),
        "code": read_texts(data / "code.parquet"),
        "wiki_valid": read_texts(data / "valid.jsonl.zst"),
        "reference_test": read_texts(data / "test.jsonl"),
    }


def _files(root: Path) -> dict[str, str]:
    """sha256 of every shard file and of blend.json, whose absolute prefixes are written relative to ``root``."""
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".bin", ".idx") or path.name == "blend.json":
            data = path.read_bytes().replace(str(root).encode(), b"<root>")
            files[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return files


def test_sample_blend_shards_hold_exactly_the_megatron_documents(tmp_path, instance):
    blend, pipeline = pipeline_for(SAMPLE)
    materialize_all(pipeline, str(tmp_path), instance)
    tokenizer, eod = llama3_tokenizer()
    for dataset, texts in _sample_inputs(REPO / "blends").items():
        assert _dataset_documents(tmp_path, "sample", dataset) == megatron_documents(texts, tokenizer, eod), dataset
    assert len(shard_keys(pipeline, instance)) > len(blend.entries())  # some dataset has several shards


def test_blend_json_weights_split_each_dataset_by_token_share(tmp_path, instance):
    blend, pipeline = pipeline_for(SAMPLE)
    materialize_all(pipeline, str(tmp_path), instance)
    folder = tmp_path / "sample" / "pretrain"
    blend_json = json.loads((folder / "blend.json").read_text())
    assert set(blend_json) == {"train", "valid", "test"}
    for split, entries in blend.splits().items():
        items = blend_json[split]
        weights, prefixes = [float(w) for w in items[0::2]], items[1::2]
        assert all(isinstance(w, str) for w in items[0::2])
        for entry in entries:
            mine = [(w, p) for w, p in zip(weights, prefixes) if Path(p).parent == folder / entry.name]
            assert sum(w for w, _ in mine) == pytest.approx(entry.weight)
            tokens = {p: read_dataset(p)[1] for _, p in mine}
            total = sum(sum(len(d) for d in docs) for docs in tokens.values())
            for w, p in mine:  # weight = dataset weight x the shard's share of the dataset's tokens
                assert w == pytest.approx(entry.weight * sum(len(d) for d in tokens[p]) / total)
                assert Path(f"{p}.bin").exists() and Path(f"{p}.idx").exists()
    data_path = (folder / "data_path.txt").read_text()
    assert data_path.startswith("--train-data-path ")
    assert f"--valid-data-path 1.0 {folder}/wiki_valid/shard_00000\n" in data_path


def test_materializing_twice_gives_byte_identical_files(tmp_path):
    roots = [tmp_path / "a", tmp_path / "b"]
    for root in roots:
        with quick_instance() as fresh:
            materialize_all(pipeline_for(SAMPLE)[1], str(root), fresh)
    first, second = (_files(r) for r in roots)
    assert first == second and len(first) > 10


@pytest.mark.skipif(not fork_available(), reason="needs fork")
def test_shards_built_in_forked_processes_are_the_bytes_built_in_the_step(tmp_path):
    """The same shard run with ``build_processes`` 2 (forked builds) and 1 (in the step): same files; the run's log
    says which way each was built."""
    files, messages = {}, {}
    for processes in (2, 1):
        root = tmp_path / f"p{processes}"
        with quick_instance() as fresh:
            _, pipeline = pipeline_for(SAMPLE, num_shards=4)
            run_asset(pipeline, pipeline.source_split, str(root), fresh,
                      pipeline.dataset_partitions.get_partition_keys())
            result = run_asset(pipeline, pipeline.pretrain_shard, str(root), fresh, shard_keys(pipeline, fresh),
                               run_config={"ops": {"sample__pretrain_shard": {
                                   "config": {"build_processes": processes}}}})
            messages[processes] = [entry.user_message for entry in fresh.all_logs(result.run_id)]
        files[processes] = _files(root)
    assert files[2] == files[1] and len(files[2]) >= 8
    forked = [m for m in messages[2] if " shard(s) in " in m]
    assert len(forked) == 1 and forked[0].startswith(f"building {len(files[2]) // 2} shard(s) in 2 processes")
    assert not any(" shard(s) in " in m for m in messages[1])


def test_auto_parses_fastokens_only_for_a_run_that_reads_enough_to_repay_it(tmp_path, monkeypatch):
    """``auto`` tokenizes a run reading less text than ``FASTOKENS_FROM_BYTES`` with hf-tokenizers, never parsing
    fastokens (its parse costs more than it saves on so little text), and a larger run with fastokens: the same
    files. The run's text is its shards' shares of their files' sizes, compressed files counted 4 times: here every
    file of the sample."""
    import fastokens

    parses = []
    parse = fastokens.Tokenizer.from_json_str
    monkeypatch.setattr(fastokens.Tokenizer, "from_json_str", lambda text: parses.append(len(text)) or parse(text))
    data = REPO / "blends" / "sample_data"
    plain = [*(data / "wiki").iterdir(), data / "test.jsonl"]
    compressed = [data / "reference.jsonl.gz", data / "code.parquet", data / "valid.jsonl.zst"]
    size = sum(path.stat().st_size for path in plain) + 4 * sum(path.stat().st_size for path in compressed)
    files, lines, parsed = {}, {}, {}
    for threshold in (size + 1, size // 2):  # the run reads less than the threshold, then more
        monkeypatch.setattr(shard_step, "FASTOKENS_FROM_BYTES", threshold)
        parses.clear()
        root = tmp_path / f"threshold_{threshold}"
        with quick_instance() as fresh:
            _, pipeline = pipeline_for(SAMPLE)
            run_asset(pipeline, pipeline.source_split, str(root), fresh,
                      pipeline.dataset_partitions.get_partition_keys())
            result = run_asset(pipeline, pipeline.pretrain_shard, str(root), fresh, shard_keys(pipeline, fresh))
            lines[threshold] = [e.user_message for e in fresh.all_logs(result.run_id)
                                if e.user_message.startswith("tokenizer llama3:")]
        files[threshold], parsed[threshold] = _files(root), list(parses)
    (small,) = lines[size + 1]
    assert "backend hf-tokenizers (auto: this run reads about " in small, small
    reads = int(small.split("this run reads about ")[1].split(" bytes")[0].replace(",", ""))
    assert size - 16 <= reads <= size  # each range's share rounds down
    assert small == (f"tokenizer llama3: vocab 128,256, backend hf-tokenizers (auto: this run reads about {reads:,} "
                     f"bytes of text, below the {size + 1:,} that repay parsing fastokens)")
    assert parsed[size + 1] == []  # (the larger run parses it, unless an earlier test of this process did)
    assert lines[size // 2] == ["tokenizer llama3: vocab 128,256, backend fastokens (fastokens matched "
                                "hf-tokenizers on every probe text)"]
    assert files[size + 1] == files[size // 2] and len(files[size + 1]) > 10


def test_concatenated_shards_equal_the_single_shard_dataset(tmp_path):
    outputs = {}
    for shards in (1, 4):
        root = tmp_path / f"n{shards}"
        with quick_instance() as fresh:
            _, pipeline = pipeline_for(SAMPLE, num_shards=shards)
            materialize_all(pipeline, str(root), fresh)
        bins = sorted((root / "sample" / "pretrain" / "wiki").glob("shard_*.bin"))
        assert len(bins) == shards
        outputs[shards] = (b"".join(p.read_bytes() for p in bins), _dataset_documents(root, "sample", "wiki"))
    assert outputs[1] == outputs[4]


def test_empty_documents_add_no_sequence_and_stay_out_of_the_token_count(tmp_path, instance):
    _, pipeline = pipeline_for(SAMPLE, num_shards=1)
    materialize_all(pipeline, str(tmp_path), instance)
    docs = _dataset_documents(tmp_path, "sample", "wiki")
    assert [] in docs  # the sample's wiki data has one empty text
    receipt = json.loads((tmp_path / "sample/pretrain/wiki/.receipts/shard_00000.json").read_text())
    assert receipt["stats"]["empty_documents"] == docs.count([])
    assert receipt["stats"]["tokens"] == sum(len(d) for d in docs)


def _break_line(path: Path, line_number: int) -> bytes:
    original = path.read_bytes()
    lines = original.split(b"\n")
    lines[line_number - 1] = b'{"text": "unterminated'
    path.write_bytes(b"\n".join(lines))
    return original


def test_failed_shard_leaves_nothing_behind_and_rerun_builds_only_what_is_missing(tmp_path, sample_blends, instance):
    root = tmp_path / "out"
    _, pipeline = pipeline_for(sample_blends / "sample.yaml")
    run_asset(pipeline, pipeline.source_split, str(root), instance, pipeline.dataset_partitions.get_partition_keys())
    keys = shard_keys(pipeline, instance)
    bad_file = sample_blends / "sample_data" / "wiki" / "part-00001.jsonl"
    original = _break_line(bad_file, 30)

    result = run_asset(pipeline, pipeline.pretrain_shard, str(root), instance, keys, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "part-00001.jsonl:30" in str(failure.step_failure_data.error.cause or failure.step_failure_data.error)
    wiki = root / "sample" / "pretrain" / "wiki"
    built = sorted(p.relative_to(wiki).as_posix() for p in wiki.rglob("*") if p.is_file())
    assert ".receipts/shard_00000.json" in built  # the shard before the bad line was committed
    assert not any("shard_00002" in name for name in built)  # the failing one left nothing
    assert not list((root / ".staging").iterdir())  # and no staging leftovers
    first_receipt = (wiki / ".receipts" / "shard_00000.json").stat().st_mtime_ns

    bad_file.write_bytes(original)
    result = run_asset(pipeline, pipeline.pretrain_shard, str(root), instance, keys)
    statuses = {}
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        if "status" in materialization.metadata:
            statuses[materialization.partition] = materialization.metadata["status"].value
    assert statuses["wiki/shard_00000"] == "up to date"
    assert statuses["wiki/shard_00002"] == "built"
    assert (wiki / ".receipts" / "shard_00000.json").stat().st_mtime_ns == first_receipt


def test_failure_mid_shard_keeps_the_previous_version_intact(tmp_path, sample_blends, instance):
    root = tmp_path / "out"
    _, pipeline = pipeline_for(sample_blends / "sample.yaml", num_shards=1)
    materialize_all(pipeline, str(root), instance)
    shard = root / "sample" / "pretrain" / "wiki" / "shard_00000"
    before = {path: path.read_bytes() for path in (Path(f"{shard}.bin"), Path(f"{shard}.idx"),
                                                   shard.parent / ".receipts" / "shard_00000.json")}
    _break_line(sample_blends / "sample_data" / "wiki" / "part-00001.jsonl", 40)
    result = run_asset(pipeline, pipeline.pretrain_shard, str(root), instance, ["wiki/shard_00000"],
                       run_config={"ops": {"sample__pretrain_shard": {"config": {"force": True}}}},
                       raise_on_error=False)
    assert not result.success
    assert {path: path.read_bytes() for path in before} == before
    assert not list((root / ".staging").iterdir())


def test_on_error_skip_counts_dropped_rows_in_the_metadata(tmp_path, sample_blends, instance):
    _break_line(sample_blends / "sample_data" / "wiki" / "part-00000.jsonl", 3)
    _, pipeline = pipeline_for(sample_blends / "sample.yaml", on_error="skip", num_shards=1)
    materialize_all(pipeline, str(tmp_path), instance)
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=pipeline.pretrain_shard.key, asset_partitions=["wiki/shard_00000"]),
        limit=1).records[0]
    metadata = record.asset_materialization.metadata
    assert metadata["dropped_by_reason"].value == {"malformed_json": 1}
    assert "part-00000.jsonl:3" in metadata["dropped_examples"].value
    assert metadata["documents"].value == metadata["rows"].value - 1


def test_asset_checks_pass_then_catch_a_corrupted_token(tmp_path, instance):
    _, pipeline = pipeline_for(SAMPLE)
    materialize_all(pipeline, str(tmp_path), instance)
    checks = dg.AssetSelection.checks_for_assets(pipeline.pretrain_shard)
    check_run = run_asset(pipeline, checks, str(tmp_path), instance, ["code/shard_00000"])
    evaluations = check_run.get_asset_check_evaluations()
    assert {e.check_name for e in evaluations} == {"bin_idx_consistent", "token_ids_below_vocab",
                                                   "counts_match_metadata"}
    assert all(e.passed for e in evaluations)

    bin_path = tmp_path / "sample/pretrain/code/shard_00000.bin"
    data = bytearray(bin_path.read_bytes())
    data[0:4] = (200_000).to_bytes(4, "little")  # an id beyond Llama-3's 128,256
    bin_path.write_bytes(bytes(data))
    check_run = run_asset(pipeline, checks, str(tmp_path), instance, ["code/shard_00000"], raise_on_error=False)
    results = {e.check_name: e for e in check_run.get_asset_check_evaluations()}
    assert not results["token_ids_below_vocab"].passed
    assert "200000" in results["token_ids_below_vocab"].metadata["problem"].value
    assert results["bin_idx_consistent"].passed
    assert not check_run.get_asset_materialization_events()  # checks alone rebuild nothing


def test_row_sample_plans_only_its_rows_under_the_samples_folder(tmp_path, instance):
    _, samples = pipeline_for(SAMPLE, samples=True)
    instance.add_dynamic_partitions("sample__samples__datasets", ["rows_50/wiki"])
    run_asset(samples, samples.source_split, str(tmp_path), instance, ["rows_50/wiki"])
    manifest = json.loads((tmp_path / "sample/samples/rows_50/sources/wiki/manifest.json").read_text())
    assert manifest["total_rows"] == 50 and sum(s["rows"] for s in manifest["shards"]) == 50
    assert not (tmp_path / "sample" / "sources").exists()  # the full build's folder is untouched
    assert instance.get_dynamic_partitions("sample__samples__pretrain_shards") == [
        f"rows_50/wiki/shard_{i:05d}" for i in range(len(manifest["shards"]))]
    assert instance.get_dynamic_partitions("sample__pretrain_shards") == []


def test_missing_tokenizer_file_fails_the_source_split_before_reading_naming_the_path(tmp_path, instance):
    _, pipeline = pipeline_for(SAMPLE, tokenizer_model=str(tmp_path / "nope" / "tokenizer.json"))
    result = run_asset(pipeline, pipeline.source_split, str(tmp_path), instance, ["code"], raise_on_error=False)
    assert not result.success
    error = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error
    assert "nope/tokenizer.json" in error.message and "does not exist" in error.message
    assert "RETRY" not in [e.event_type_value for e in result.all_events]
    assert not (tmp_path / "sample" / "sources" / "code" / "manifest.json").exists()


def test_dtype_override_uint16_refuses_llama3_ids_that_do_not_fit(tmp_path, instance):
    _, pipeline = pipeline_for(SAMPLE, dtype="uint16")
    run_asset(pipeline, pipeline.source_split, str(tmp_path), instance, ["code"])
    result = run_asset(pipeline, pipeline.pretrain_shard, str(tmp_path), instance, ["code/shard_00000"],
                       raise_on_error=False)
    assert not result.success
    error = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error
    assert "does not fit dtype uint16" in str(error.cause or error)
    assert not (tmp_path / "sample/pretrain/code/shard_00000.bin").exists()


def test_dtype_override_int32_widens_a_small_vocabulary(tmp_path, instance):
    import shutil

    bert = tmp_path / "bert"
    shutil.copytree(REPO / "nemotron_assets_tests" / "fixtures" / "megatron" / "bert_tokenizer", bert)
    for dtype, code in ((None, 8), ("int32", 4)):  # uint16 by Megatron's rule, int32 when asked
        root = tmp_path / f"out_{dtype}"
        _, pipeline = pipeline_for(SAMPLE, tokenizer_model=str(bert), dtype=dtype)
        run_asset(pipeline, pipeline.source_split, str(root), instance, ["code"])
        run_asset(pipeline, pipeline.pretrain_shard, str(root), instance, ["code/shard_00000"])
        assert read_dataset(root / "sample/pretrain/code/shard_00000")[0] == code


def test_blend_json_prefixes_are_absolute_by_default_and_relative_on_request(tmp_path, instance):
    _, pipeline = pipeline_for(SAMPLE)
    materialize_all(pipeline, str(tmp_path / "abs"), instance)
    blend_json = json.loads((tmp_path / "abs/sample/pretrain/blend.json").read_text())
    prefixes = [p for split in blend_json.values() for p in split[1::2]]
    assert prefixes and all(Path(p).is_absolute() and Path(f"{p}.idx").exists() for p in prefixes)

    with quick_instance() as fresh:
        _, relative = pipeline_for(SAMPLE, relative_prefixes=True)
        materialize_all(relative, str(tmp_path / "rel"), fresh)
    folder = tmp_path / "rel/sample/pretrain"
    blend_json = json.loads((folder / "blend.json").read_text())
    prefixes = [p for split in blend_json.values() for p in split[1::2]]
    assert prefixes[0] == "wiki/shard_00000"
    assert all(not Path(p).is_absolute() and (folder / f"{p}.idx").exists() for p in prefixes)
