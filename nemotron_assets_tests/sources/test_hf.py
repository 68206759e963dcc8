"""hf:// sources resolved offline, through huggingface_hub's own snapshot_download, from a local hub cache.

Every test runs twice: with the commit's tree listing cached (what a real download leaves behind) and with
only ``refs/`` + ``snapshots/`` (an older or hand-made cache); huggingface_hub takes different paths for each.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard
from huggingface_hub import scan_cache_dir

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.defs.sources.manifest import build_manifest
from nemotron_assets.sources.discovery import resolve_files
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.hf import resolve_hf
from nemotron_assets_tests.hub_cache import CachedRepo, add_repo, use_hub_cache


def jsonl(*texts: str) -> str:
    return "".join(json.dumps({"text": t}) + "\n" for t in texts)


CC_FILES = {
    ".gitattributes": "*.parquet filter=lfs diff=lfs merge=lfs -text\n",
    "README.md": "# A crawl\n\nNo YAML front matter: subsets are folders.\n",
    "4plus/part-00000.jsonl": jsonl("first", "second"),
    "4plus/part-00001.jsonl.zst": zstandard.ZstdCompressor().compress(jsonl("third").encode()),
    "4plus_MIND/part-00000.jsonl": jsonl("not me"),
    "data/train-00000-of-00002.parquet": b"PAR1 train 0",
    "data/train-00001-of-00002.parquet": b"PAR1 train 1",
    "data/test-00000-of-00001.parquet": b"PAR1 test",
    "data/training_notes-00000.parquet": b"PAR1 notes",
}
WEB_README = """---
license: odc-by
configs:
- config_name: web
  data_files:
  - split: train
    path: data/train-*
  - split: test
    path: "data/test-*"
- config_name: flat
  data_files: "extra/*.jsonl"
- config_name: by_dir
  data_dir: raw
- config_name: raw_validation
  data_dir: raw
  data_files:
  - split: validation
    path: "validation.*"
---
# Web
"""
WEB_FILES = {
    "README.md": WEB_README,
    "data/train-00000-of-00001.parquet": b"PAR1 train",
    "data/test-00000-of-00001.parquet": b"PAR1 test",
    "extra/a.jsonl": jsonl("a"),
    "extra/nested/b.jsonl": jsonl("b"),
    "raw/train.jsonl": jsonl("raw train"),
    "raw/validation.jsonl": jsonl("raw validation"),
}


@dataclass(frozen=True)
class Hub:
    cache: Path
    tree_listing: bool

    def add(self, repo_id: str, files: dict, refs: tuple[str, ...] = ("main",)) -> CachedRepo:
        return add_repo(self.cache, repo_id, files, repo_type="dataset", refs=refs, tree_listing=self.tree_listing)


@pytest.fixture(params=[True, False], ids=["tree-listing", "snapshot-only"])
def hub(request, tmp_path, monkeypatch) -> Hub:
    use_hub_cache(monkeypatch, tmp_path / "hub")
    return Hub(tmp_path / "hub", request.param)


@pytest.fixture
def cc(hub) -> CachedRepo:
    return hub.add("acme/cc", CC_FILES)


@pytest.fixture
def web(hub) -> CachedRepo:
    return hub.add("acme/web", WEB_FILES)


def entry(path: str, **fields) -> DatasetEntry:
    return DatasetEntry(name="ds", path=path, **fields)


def relpaths(repo: CachedRepo, files) -> list[str]:
    return [Path(f.url).relative_to(repo.snapshot).as_posix() for f in files]


def test_subset_4plus_does_not_match_4plus_MIND(cc):
    resolution = resolve_hf(entry("hf://acme/cc", subset="4plus"))
    assert relpaths(cc, resolution.files) == ["4plus/part-00000.jsonl", "4plus/part-00001.jsonl.zst"]


def test_subset_4plus_MIND_matches_only_its_own_folder(cc):
    resolution = resolve_hf(entry("hf://acme/cc", subset="4plus_MIND"))
    assert relpaths(cc, resolution.files) == ["4plus_MIND/part-00000.jsonl"]


def test_files_are_cache_paths_with_size_format_and_sha_fingerprint(cc):
    files = resolve_hf(entry("hf://acme/cc", subset="4plus")).files
    plain, compressed = files
    assert plain.url == str(cc.snapshot / "4plus/part-00000.jsonl")
    assert Path(plain.url).read_text() == CC_FILES["4plus/part-00000.jsonl"]
    assert plain.size == len(CC_FILES["4plus/part-00000.jsonl"])
    assert (plain.format, plain.compression) == ("jsonl", None)
    assert (compressed.format, compressed.compression) == ("jsonl", "zstd")
    assert plain.fingerprint == f"hf:acme/cc@{cc.sha}:4plus/part-00000.jsonl"


def test_split_matches_file_stems_exactly(cc):
    resolution = resolve_hf(entry("hf://acme/cc", split="train"))
    assert relpaths(cc, resolution.files) == ["data/train-00000-of-00002.parquet",
                                              "data/train-00001-of-00002.parquet"]


def test_without_subset_or_split_every_data_file_sorted_and_dotfiles_skipped(cc):
    resolution = resolve_hf(entry("hf://acme/cc"))
    expected = sorted(p for p in CC_FILES if p.endswith((".jsonl", ".zst", ".parquet")))
    assert relpaths(cc, resolution.files) == expected


def test_sub_folder_narrows_and_subset_is_matched_below_it(hub):
    repo = hub.add("acme/multi", {"v1/4plus/a.jsonl": jsonl("old"), "v2/4plus/a.jsonl": jsonl("new"),
                                  "v2/4plus_MIND/a.jsonl": jsonl("mind")})
    resolution = resolve_hf(entry("hf://acme/multi/v2", subset="4plus"))
    assert relpaths(repo, resolution.files) == ["v2/4plus/a.jsonl"]
    assert resolution.files[0].fingerprint == f"hf:acme/multi@{repo.sha}:v2/4plus/a.jsonl"


def test_config_data_files_select_the_split(web):
    train = resolve_hf(entry("hf://acme/web", subset="web", split="train"))
    test = resolve_hf(entry("hf://acme/web", subset="web", split="test"))
    assert relpaths(web, train.files) == ["data/train-00000-of-00001.parquet"]
    assert relpaths(web, test.files) == ["data/test-00000-of-00001.parquet"]


def test_config_without_split_takes_every_split(web):
    resolution = resolve_hf(entry("hf://acme/web", subset="web"))
    assert relpaths(web, resolution.files) == ["data/test-00000-of-00001.parquet",
                                               "data/train-00000-of-00001.parquet"]


def test_config_glob_string_is_the_train_split_and_star_stays_in_its_folder(web):
    resolution = resolve_hf(entry("hf://acme/web", subset="flat", split="train"))
    assert relpaths(web, resolution.files) == ["extra/a.jsonl"]


def test_config_data_dir_narrows_the_folder_and_split_matches_stems(web):
    resolution = resolve_hf(entry("hf://acme/web", subset="by_dir", split="validation"))
    assert relpaths(web, resolution.files) == ["raw/validation.jsonl"]


def test_config_data_files_are_relative_to_its_data_dir(web):
    resolution = resolve_hf(entry("hf://acme/web", subset="raw_validation"))
    assert relpaths(web, resolution.files) == ["raw/validation.jsonl"]


def test_config_data_dir_without_the_split_names_the_split_field(web):
    with pytest.raises(InputError) as caught:
        resolve_hf(entry("hf://acme/web", subset="by_dir", split="test"))
    assert caught.value.field == "split"
    assert f"no data files of split 'test' in acme/web@{web.sha[:12]} under raw/" in str(caught.value)


def test_config_without_the_split_names_the_split_field(web):
    with pytest.raises(InputError) as caught:
        resolve_hf(entry("hf://acme/web", subset="flat", split="validation"))
    assert caught.value.field == "split"
    assert str(caught.value) == ("dataset 'ds': hf://acme/web field 'split': README config 'flat' has no split "
                                 "'validation' (its splits: train)")


def test_revision_is_pinned_to_the_commit_sha(cc):
    resolution = resolve_hf(entry("hf://acme/cc", subset="4plus"))
    assert resolution.revision == cc.sha
    assert len(cc.sha) == 40
    assert all(f"@{cc.sha}:" in f.fingerprint for f in resolution.files)


def test_tag_and_sha_revisions_resolve_to_that_commit(hub, cc):
    old = hub.add("acme/cc", {"4plus/part-00000.jsonl": jsonl("v1")}, refs=("v1.0",))
    assert old.sha != cc.sha
    for revision in ("v1.0", old.sha):
        resolution = resolve_hf(entry("hf://acme/cc", subset="4plus", revision=revision))
        assert resolution.revision == old.sha
        assert relpaths(old, resolution.files) == ["4plus/part-00000.jsonl"]
        assert Path(resolution.files[0].url).read_text() == jsonl("v1")
    assert resolve_hf(entry("hf://acme/cc", subset="4plus")).revision == cc.sha  # main is unchanged


def test_unknown_revision_names_the_revision_field_and_what_is_cached(cc):
    with pytest.raises(InputError) as caught:
        resolve_hf(entry("hf://acme/cc", revision="v9"))
    error = caught.value
    assert (error.dataset, error.path, error.field) == ("ds", "hf://acme/cc", "revision")
    assert "revision 'v9' of acme/cc is not in the local cache (HF_HUB_OFFLINE is set)" in str(error)
    assert f"main, {cc.sha[:12]}" in str(error)


def test_offline_repo_missing_from_cache_says_so(hub):
    with pytest.raises(InputError) as caught:
        resolve_hf(entry("hf://acme/missing", subset="4plus"))
    error = caught.value
    assert (error.dataset, error.path, error.field) == ("ds", "hf://acme/missing", "path")
    assert str(error).startswith("dataset 'ds': hf://acme/missing field 'path': acme/missing is not in the "
                                 f"local Hugging Face cache ({hub.cache / 'datasets--acme--missing'}) and "
                                 "HF_HUB_OFFLINE is set")


def test_unknown_subset_names_the_subset_field_and_lists_folders(cc):
    with pytest.raises(InputError) as caught:
        resolve_hf(entry("hf://acme/cc", subset="4"))
    assert caught.value.field == "subset"
    assert "no folder named exactly '4' holds data files" in str(caught.value)
    assert "(folders in the local snapshot: 4plus, 4plus_MIND, data)" in str(caught.value)


def test_unknown_split_names_the_split_field(cc):
    with pytest.raises(InputError) as caught:
        resolve_hf(entry("hf://acme/cc", subset="4plus", split="validation"))
    assert caught.value.field == "split"
    assert "no data files of split 'validation'" in str(caught.value)


def test_path_without_repo_is_an_input_error(hub):
    with pytest.raises(InputError) as caught:
        resolve_hf(entry("hf://acme"))
    assert caught.value.field == "path"


def test_incomplete_cached_snapshot_is_an_error_not_a_shorter_dataset(tmp_path, monkeypatch):
    """Only the commit's tree listing tells huggingface_hub that a cached file is missing."""
    use_hub_cache(monkeypatch, tmp_path / "hub")
    cc = add_repo(tmp_path / "hub", "acme/cc", CC_FILES, repo_type="dataset", tree_listing=True)
    (cc.snapshot / "4plus/part-00001.jsonl.zst").unlink()
    with pytest.raises(InputError) as caught:
        resolve_hf(entry("hf://acme/cc", subset="4plus"))
    assert caught.value.field == "path"
    assert f"the cached snapshot {cc.sha[:12]} of acme/cc is incomplete: it lacks files matching ['*4plus/*'] and " \
           "HF_HUB_OFFLINE is set" in str(caught.value)


def test_discovery_and_manifest_read_the_cached_files(cc, tmp_path):
    dataset = entry("hf://acme/cc", subset="4plus")
    assert resolve_files(dataset, tmp_path) == resolve_hf(dataset)
    manifest = build_manifest(Blend(name="b", datasets=[dataset]), dataset, tmp_path)
    assert manifest.revision == cc.sha
    assert [f.rows for f in manifest.files] == [2, 1]
    assert manifest.files[0].fingerprint == f"hf:acme/cc@{cc.sha}:4plus/part-00000.jsonl"


def test_hub_cache_helper_builds_a_layout_huggingface_hub_scans_cleanly(cc, web):
    info = scan_cache_dir(cc.cache_dir)
    assert info.warnings == []
    repos = {r.repo_id: r for r in info.repos}
    assert set(repos) == {"acme/cc", "acme/web"}
    (revision,) = repos["acme/cc"].revisions
    assert (revision.commit_hash, revision.refs, revision.nb_files) == (cc.sha, frozenset({"main"}), len(CC_FILES))
