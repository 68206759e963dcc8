"""Megatron's other preprocessing options through the real pipeline (a test Dagster instance):
several text fields with their own shards and the blend key, split sentences, what their receipts record, what
makes which output stale, and the located errors of bad input. Byte parity with Megatron is
end_to_end/test_megatron_options_parity.py."""

import json
from pathlib import Path

import pytest
import yaml

from nemotron_assets.core.blend import load_blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import State, read_manifest
from nemotron_assets.core.reporting import recorded_metadata
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.blend_files import BlendListing, blend_files_freshness
from nemotron_assets.defs.pretrain.shard import PretrainSettings, shard_inputs
from nemotron_assets.defs.pretrain.status import pretrain_problems, shard_freshness
from nemotron_assets.defs.sources.preflight import check_before_reading
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.readers import ReadOptions, ReadStats, iter_text_batches
from nemotron_assets.tokenize.sentences import punkt_model_dir
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.materialize_helpers import materialize_all, pipeline_for, run_asset

FIXTURES = REPO / "nemotron_assets_tests" / "fixtures" / "megatron"
KEYS = FIXTURES / "keys.jsonl"
BPE = FIXTURES / "bpe_tokenizer"


def _blend_file(tmp_path: Path, name: str = "opts", **settings) -> Path:
    """A blend of two pretraining datasets, ``keys`` (text and title) and ``plain`` (text), with the bpe
    tokenizer; ``settings`` are blend settings, ``keys_*`` settings of the ``keys`` dataset."""
    keys = {"name": "keys", "path": str(KEYS), "text_field": ["text", "title"]}
    keys.update({k[len("keys_"):]: v for k, v in settings.items() if k.startswith("keys_")})
    blend = {"tokenizer_model": str(BPE), "num_shards": 2,
             "datasets": [keys, {"name": "plain", "path": str(FIXTURES / "tricky.jsonl"), "weight": 0.5}],
             **{k: v for k, v in settings.items() if not k.startswith("keys_")}}
    path = tmp_path / "blends" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(blend))
    return path


def _listed(root: Path) -> list[str]:
    blend_json = json.loads((root / "opts/pretrain/blend.json").read_text())
    return [Path(p).relative_to(root / "opts/pretrain").as_posix() for p in blend_json["train"][1::2]]


def _states(root: Path, blend_file: Path) -> dict[str, str]:
    """Each planned shard's state by the one up-to-date test, with the blend as ``blend_file`` now says."""
    blend = load_blend(blend_file)
    settings, store = PretrainSettings.of(blend), Storage(str(root))
    tokenizer = settings.tokenizer_identity()
    states = {}
    for dataset in ("keys", "plain"):
        manifest = read_manifest(store, "opts", dataset)
        for index in range(len(manifest.shards)):
            state = shard_freshness(store, settings, "opts", manifest, index, tokenizer)
            states[str(ShardKey(dataset, index))] = state.state.value
    return states


def test_each_text_field_gets_its_own_shards_and_blend_json_lists_the_blend_key(tmp_path, instance):
    blend_file = _blend_file(tmp_path)
    _, pipeline = pipeline_for(blend_file)
    materialize_all(pipeline, str(tmp_path), instance)
    folder = tmp_path / "opts/pretrain/keys"
    assert sorted(p.name for p in folder.glob("*.bin")) == [
        "shard_00000_text_document.bin", "shard_00000_title_document.bin",
        "shard_00001_text_document.bin", "shard_00001_title_document.bin"]
    assert sorted(p.name for p in (tmp_path / "opts/pretrain/plain").glob("*.bin")) == [
        "shard_00000.bin", "shard_00001.bin"]  # a single text_field keeps today's names
    assert _listed(tmp_path) == ["keys/shard_00000_text_document", "keys/shard_00001_text_document",
                                 "plain/shard_00000", "plain/shard_00001"]  # the first field by default
    recorded = recorded_metadata(instance, pipeline.pretrain_shard.key, "keys/shard_00000")
    assert recorded["field_prefixes"] == {"text": str(folder / "shard_00000_text_document"),
                                          "title": str(folder / "shard_00000_title_document")}
    assert set(recorded["tokens_by_field"]) == {"text", "title"}

    titles = _blend_file(tmp_path, keys_blend_key="title")
    assert set(_states(tmp_path, titles).values()) == {"done"}  # the blend key changes no shard
    blend = load_blend(titles)
    state = blend_files_freshness(Storage(str(tmp_path)), BlendListing.of(blend), PretrainSettings.of(blend), "opts")
    assert state.state is State.STALE  # ... only the blend files, which now list the titles
    _, pipeline = pipeline_for(titles)
    run_asset(pipeline, pipeline.megatron_blend, str(tmp_path), instance)
    assert _listed(tmp_path)[:2] == ["keys/shard_00000_title_document", "keys/shard_00001_title_document"]


def test_sentence_settings_make_every_shard_stale_and_defaults_change_no_receipt(tmp_path, instance):
    blend_file = _blend_file(tmp_path)
    _, pipeline = pipeline_for(blend_file)
    materialize_all(pipeline, str(tmp_path), instance)
    blend = load_blend(blend_file)
    manifest = read_manifest(Storage(str(tmp_path)), "opts", "plain")
    settings = PretrainSettings.of(blend)
    inputs = shard_inputs(settings, manifest, 0, settings.tokenizer_identity())
    assert sorted(inputs["settings"]) == ["add_bos", "add_eos", "dtype", "eod_token", "max_doc_tokens", "on_error"]
    assert manifest.text_field == "text"  # a single field: the manifest and the source fingerprint as before

    for changed in ({"split_sentences": True}, {"split_sentences": True, "keep_newlines": True},
                    {"split_sentences": True, "sentence_language": "german"}):
        states = _states(tmp_path, _blend_file(tmp_path, name="opts", **changed))
        assert set(states.values()) == {"stale"}, changed
    sentences = _blend_file(tmp_path, split_sentences=True)
    _, pipeline = pipeline_for(sentences)
    materialize_all(pipeline, str(tmp_path), instance)
    assert set(_states(tmp_path, sentences).values()) == {"done"}
    assert sorted(p.name for p in (tmp_path / "opts/pretrain/keys").glob("shard_00000*")) == [
        "shard_00000_text_sentence.bin", "shard_00000_text_sentence.idx",
        "shard_00000_title_sentence.bin", "shard_00000_title_sentence.idx"]  # the _document files went
    assert _listed(tmp_path)[0] == "keys/shard_00000_text_sentence"
    for changed in ({"split_sentences": True, "keep_newlines": True},
                    {"split_sentences": True, "sentence_language": "german"}):
        assert set(_states(tmp_path, _blend_file(tmp_path, **changed)).values()) == {"stale"}, changed


def test_adding_a_text_field_makes_only_that_datasets_shards_stale(tmp_path, instance):
    _, pipeline = pipeline_for(_blend_file(tmp_path))
    materialize_all(pipeline, str(tmp_path), instance)
    three = _blend_file(tmp_path, keys_text_field=["text", "title", "text2"])
    _, pipeline = pipeline_for(three)
    run_asset(pipeline, pipeline.source_split, str(tmp_path), instance, ["keys", "plain"])
    assert _states(tmp_path, three) == {"keys/shard_00000": "stale", "keys/shard_00001": "stale",
                                        "plain/shard_00000": "done", "plain/shard_00001": "done"}


def test_a_row_without_one_of_the_text_fields_fails_naming_file_line_and_field(tmp_path, instance):
    bad = tmp_path / "keys.jsonl"
    lines = KEYS.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = json.dumps({"text": "no title on this row"}) + "\n"
    bad.write_text("".join(lines), encoding="utf-8")
    source = SourceFile(url=str(bad), size=bad.stat().st_size, format="jsonl", compression=None, rows=10,
                        fingerprint="")
    options = ReadOptions(dataset="keys", text_field=("text", "title"))
    with pytest.raises(InputError) as raised:
        list(iter_text_batches(source, 0, 10, options, ReadStats()))
    assert str(raised.value) == f"dataset 'keys': {bad}:3 field 'title': missing"

    stats = ReadStats()
    skipped = ReadOptions(dataset="keys", text_field=("text", "title"), on_error="skip")
    documents = [d for batch in iter_text_batches(source, 0, 10, skipped, stats) for d in batch]
    assert len(documents) == 9 and all(isinstance(d, tuple) and len(d) == 2 for d in documents)
    assert stats.dropped == {"missing_field": 1}  # the row is left out of every field: they stay row for row


def test_a_sentence_language_without_punkt_data_fails_naming_the_setting(tmp_path, instance):
    with pytest.raises(InputError) as raised:
        punkt_model_dir("klingon")
    message = str(raised.value)
    assert message.startswith("field 'sentence_language': no punkt_tab data for language 'klingon'")
    assert "tokenizers/punkt_tab/klingon/" in message and "nltk_cache" in message
    blend_file = _blend_file(tmp_path, split_sentences=True, sentence_language="klingon")
    with pytest.raises(InputError) as raised:  # the command line's check before any data is read
        check_before_reading(load_blend(blend_file), blend_file)
    assert str(raised.value).startswith(f"{blend_file} field 'sentence_language': no punkt_tab data")
    _, pipeline = pipeline_for(blend_file)  # and source_split, before it reads a row
    result = run_asset(pipeline, pipeline.source_split, str(tmp_path), instance, ["keys", "plain"],
                       raise_on_error=False)
    assert not result.success
    error = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error
    assert "field 'sentence_language': no punkt_tab data for language 'klingon'" in str(error.cause or error)
    assert not (tmp_path / "opts").exists()


@pytest.mark.parametrize(("settings", "message"), [
    ({"keys_blend_key": "body"}, "blend_key 'body' is not one of text_field ['text', 'title']"),
    ({"keys_text_field": ["text", "a/b"]}, "a field of a list must match [A-Za-z0-9_.-]+"),
    ({"keys_text_field": ["text", "text"]}, "text_field lists text twice"),
    ({"keys_text_field": []}, "a text_field list needs at least one field"),
    ({"keep_newlines": True}, "keep_newlines apply to split sentences: set split_sentences: true"),
    ({"sentence_language": "german"}, "sentence_language apply to split sentences"),
    ({"split_sentences": True, "max_doc_tokens": 9}, "split_sentences cannot be combined with max_doc_tokens"),
    ({"split_sentences": True, "add_bos": True}, "split_sentences cannot be combined with add_bos"),
])
def test_bad_option_settings_name_the_setting(tmp_path, settings, message):
    with pytest.raises(InputError) as raised:
        load_blend(_blend_file(tmp_path, **settings))
    assert message in str(raised.value)


def test_verify_reads_every_fields_files_and_names_the_changed_one(tmp_path, instance):
    blend, pipeline = pipeline_for(_blend_file(tmp_path))
    materialize_all(pipeline, str(tmp_path), instance)
    store = Storage(str(tmp_path))
    assert pretrain_problems(instance, store, blend) == []
    title = tmp_path / "opts/pretrain/keys/shard_00001_title_document.bin"
    data = bytearray(title.read_bytes())
    data[0] ^= 1  # the same size, another token
    title.write_bytes(bytes(data))
    shard, listing = pretrain_problems(instance, store, blend)  # the shard's file, then blend.json listing it
    assert shard.path == store.url("opts/pretrain/keys/shard_00001_title_document.bin")
    assert shard.reason.startswith("stale: its shard_00001_title_document.bin file changed after it was built")
    assert listing.path == store.url("opts/pretrain/blend.json")
    assert f"lists {store.url('opts/pretrain/keys/shard_00001_text_document')}, which is stale" in listing.reason
