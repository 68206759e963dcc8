"""A tree written before the ``.receipts/`` and ``.meta/`` folders keeps working (core/upgrade.py): ``status`` and
``verify`` judge it where it lies and write nothing; the next ``materialize`` moves every receipt and side file to
its place without building any output again, and ``verify`` passes.

The old tree is the bundled sample blends built by the command line (conftest.py ``sample_outputs``), moved back by
hand, below, to where the code before issue 27 wrote each file: a receipt beside its files with the names it gave
them then, and the side files beside the data. (Compared once with a tree that code built: the same files and bytes,
receipts equal but for their storage stamps.) The one output built again is the packed SFT manifest: its
``manifest.json`` lists the packed shards' samples listings by path, and those moved."""

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from nemotron_assets_tests.commands import command_here
from nemotron_assets_tests.end_to_end.conftest import BLENDS

pytestmark = pytest.mark.slow

BUILT = re.compile(r"^\s*[\d:]+ \w+: .*?: (built|rebuilding)\b")  # "<time> <asset>: <output>: built, ..."
SFT_MANIFEST_FILES = ("manifest.json", "packing_metadata.json", "train.npy", "valid.npy", "test.npy")


def to_legacy_layout(data: Path) -> dict[str, str]:
    """Move the tree under ``data`` to the old layout; returns today's path of each file that moved, by its old path
    (relative to ``data``)."""
    moved = {}
    for hidden in sorted(data.rglob(".meta")):
        for path in sorted(hidden.iterdir()):
            os.replace(path, hidden.parent / path.name)
            moved[(hidden.parent / path.name).relative_to(data).as_posix()] = path.relative_to(data).as_posix()
        hidden.rmdir()
    for hidden in sorted(data.rglob(".receipts")):
        for path in sorted(hidden.iterdir()):
            receipt = json.loads(path.read_text())
            old = {name: _old_name(name) for name in receipt["files"]}
            receipt["files"] = {old[name]: entry for name, entry in receipt["files"].items()}
            receipt["committed"] = {old[name]: stamp for name, stamp in receipt["committed"].items()}
            if receipt["kind"] == "sft_manifest":
                _old_sft_manifest(hidden.parent, receipt)
            path.unlink()
            (hidden.parent / path.name).write_text(json.dumps(receipt, indent=1, sort_keys=True))
        hidden.rmdir()
    return moved


def _old_name(name: str) -> str:
    """The name an old receipt gave a file: a suffix of the prefix, or a path relative to the receipt's folder."""
    if not name.startswith(".meta/"):
        return name
    file = name.removeprefix(".meta/")
    if file == "duplicates.parquet":  # harmony/<dataset>/duplicates.parquet beside duplicates.json
        return ".parquet"
    return ".samples.parquet" if file.endswith(".samples.parquet") else file  # sft/<split>/shard_NNNNN.samples...


def _old_sft_manifest(sft: Path, receipt: dict) -> None:
    """The old SFT manifest named the samples listings beside the bins, in its inputs and in manifest.json."""
    for shard in receipt["inputs"]["shards"].values():
        for name in [n for n in shard if n.startswith(".meta/")]:
            shard[_old_name(name)] = shard.pop(name)
    receipt["inputs_sha256"] = hashlib.sha256(json.dumps(receipt["inputs"], sort_keys=True).encode()).hexdigest()
    manifest = json.loads((sft / "manifest.json").read_text())
    for split in manifest["splits"].values():
        split["sha256"] = dict(sorted((path.replace("/.meta/", "/"), sha) for path, sha in split["sha256"].items()))
    data = (json.dumps(manifest, indent=1) + "\n").encode()
    (sft / "manifest.json").write_bytes(data)
    receipt["files"]["manifest.json"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    receipt["committed"]["manifest.json"] = f"mtime_ns:{(sft / 'manifest.json').stat().st_mtime_ns}"


def snapshot(data: Path) -> dict[str, tuple[int, int]]:
    """(inode, modification time) of every output file; the source plans (rewritten by every run) left out."""
    return {p.relative_to(data).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns) for p in data.rglob("*")
            if p.is_file() and "/sources/" not in p.as_posix() and ".staging" not in p.parts}


@dataclass
class Upgrade:
    data: Path
    fresh: dict  # the tree as the build left it
    moved: dict  # old path -> today's path of each side file
    old: dict  # the tree in the old layout
    status: tuple[int, str, str]  # status --json, then verify of each blend, on the old tree
    verified_old: dict
    after_reports: dict  # the tree after them
    materialized: dict  # blend -> the materialize process
    upgraded: dict  # the tree after materialize
    sft_bytes: dict  # the SFT manifest's files as the build wrote them
    verified: dict  # blend -> verify on the moved tree


@pytest.fixture(scope="module")
def upgrade(sample_outputs) -> Upgrade:
    data = sample_outputs.data
    fresh = snapshot(data)
    sft = data / "posttrain_sample" / "sft"
    sft_bytes = {name: (sft / name).read_bytes() for name in SFT_MANIFEST_FILES}
    moved = to_legacy_layout(data)
    old = snapshot(data)
    status = command_here(sample_outputs.env, "status", "--json")
    verified_old = {blend: command_here(sample_outputs.env, "verify", blend) for blend in BLENDS}
    after_reports = snapshot(data)
    materialized = {blend: sample_outputs.run("materialize", blend) for blend in BLENDS}
    upgraded = snapshot(data)
    verified = {blend: command_here(sample_outputs.env, "verify", blend) for blend in BLENDS}
    return Upgrade(data, fresh, moved, old, status, verified_old, after_reports, materialized, upgraded, sft_bytes,
                   verified)


def test_the_old_layout_is_the_one_issue_27_moved(upgrade):
    old = set(upgrade.old)
    assert "posttrain_sample/harmony/nemotron_math_v2/duplicates.parquet" in old
    assert "posttrain_sample/harmony/nemotron_math_v2/shard_00000.json" in old
    assert "posttrain_sample/pools/tool_use/manifest.json" in old
    assert "posttrain_sample/sft/train/shard_00000.samples.parquet" in old
    assert "sample/pretrain/wiki/shard_00000.json" in old and "rl_sample/jsonl/math_rl/shard_00000.json" in old
    assert not any("/.receipts/" in path or "/.meta/" in path for path in old)


def test_status_and_verify_judge_an_old_tree_where_it_lies_and_write_nothing(upgrade):
    code, out, _ = upgrade.status
    assert code == 0
    for report in json.loads(out)["blends"]:
        for dataset in report["datasets"]:
            assert dataset["done"] == dataset["planned"] > 0, (report["blend"], dataset)
        assert {output["state"] for output in report["outputs"]} <= {"done"}, report["blend"]
    for blend, (code, out, err) in upgrade.verified_old.items():
        assert code == 0 and f"{blend}: every output verified" in out + err, (out + err)[-2000:]
    assert upgrade.after_reports == upgrade.old


def test_the_next_materialize_moves_every_receipt_and_side_file_and_builds_nothing_again(upgrade):
    for done in upgrade.materialized.values():
        assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(upgrade.upgraded) == sorted(upgrade.fresh)  # every file where a build puts it, nothing more
    sft_manifest = {f"posttrain_sample/sft/{name}" for name in SFT_MANIFEST_FILES}
    receipts = {path for path in upgrade.old if path not in upgrade.fresh and path not in upgrade.moved}
    for path, stat in upgrade.old.items():
        if path not in receipts and path not in sft_manifest:
            assert upgrade.upgraded[upgrade.moved.get(path, path)] == stat, path  # same inode, not written again
    for name, data in upgrade.sft_bytes.items():
        assert (upgrade.data / "posttrain_sample" / "sft" / name).read_bytes() == data, name
    for blend, done in upgrade.materialized.items():
        assert "moved its receipt and side files to .receipts/ and .meta/" in done.stderr
        assert " up to date" in done.stderr
        built = [line for line in done.stderr.splitlines() if BUILT.search(line)]
        if blend != "posttrain_sample":
            assert built == [], blend
            continue
        [line] = built  # the SFT manifest, because manifest.json names the samples listings, which moved
        assert "sft_manifest: posttrain_sample/sft/manifest.receipt: rebuilding: " in line
        assert "shards.train/shard_00000..meta/shard_00000.samples.parquet=(not set)" in line


def test_verify_passes_on_the_moved_tree(upgrade):
    for blend, (code, out, err) in upgrade.verified.items():
        assert code == 0 and f"{blend}: every output verified" in out + err, (out + err)[-2000:]
