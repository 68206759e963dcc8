"""The command line as a user runs it: real processes, a real sqlite instance in a temp DAGSTER_HOME."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from nemotron_assets.cli import main
from nemotron_assets_tests.commands import command_here
from nemotron_assets_tests.conftest import REPO, quick_instance

pytestmark = pytest.mark.slow


NO_OUTPUTS_WARNING = "did not yield or return expected outputs"  # Dagster's, for a step that yields no check output


def _run(args, env):
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_materialize_whole_blend_records_runs_in_the_instance(cli_env, tmp_path):
    done = _run(["-m", "nemotron_assets", "materialize", "sample"], cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    pretrain = tmp_path / "data" / "sample" / "pretrain"
    assert json.loads((pretrain / "blend.json").read_text())["valid"][1] == str(pretrain / "wiki_valid/shard_00000")
    assert done.stderr.splitlines()[-1].startswith("done: 3 run(s) in ")
    # each run's line: its time, and the part its steps' own work took (what the benches split a command into)
    timings = [re.search(r": ok in ([\d.]+) s \(steps ([\d.]+) s\)$", line) for line in done.stderr.splitlines()
               if line.startswith("run ")]
    assert len(timings) == 3 and all(t and 0 <= float(t[2]) <= float(t[1]) for t in timings)
    assert float(timings[1][2]) > 0.1  # the shard run's step tokenized something
    assert NO_OUTPUTS_WARNING not in done.stderr  # the shard step yields its checks' outputs (core/reporting.py)
    os.environ["DAGSTER_HOME"] = cli_env["DAGSTER_HOME"]
    try:
        with dg.DagsterInstance.get() as instance:
            runs = instance.get_runs()
            assert len(runs) == 3 and all(r.is_success for r in runs)
            key = dg.AssetKey(["sample", "pretrain_shard"])
            partitions = instance.get_materialized_partitions(key)
            assert partitions == set(instance.get_dynamic_partitions("sample__pretrain_shards"))
            # the run logs the UI shows: no warning, and each shard's three checks evaluated on their own
            assert not [r.user_message for run in runs for r in instance.all_logs(run.run_id)
                        if NO_OUTPUTS_WARNING in r.user_message]
            evaluations = [r.dagster_event.event_specific_data for run in runs
                           for r in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)]
            assert sorted((e.partition, e.check_name) for e in evaluations if e.passed) == sorted(
                (partition, check) for partition in partitions
                for check in ("bin_idx_consistent", "token_ids_below_vocab", "counts_match_metadata"))
    finally:
        del os.environ["DAGSTER_HOME"]

    again = _run(["-m", "nemotron_assets", "materialize", "sample", "--select", "pretrain_shard",
                  "--partition", "wiki/shard_00001"], cli_env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "wiki/shard_00001: up to date" in again.stderr


def test_every_step_line_reaches_the_terminal_when_dagsters_copy_of_step_output_lags(cli_env, tmp_path):
    """Dagster's own compute log manager (an instance of the user's may name it) copies a step's captured output to the
    terminal with ``tail -F``, and stops the copy when the step ends. Here ``tail`` starts 3 s late, as on a busy
    machine, so it copies nothing of these short steps: the console's lines must reach the terminal without it
    (cli/console.py ``console_stream``). The bundled instance copies with a thread instead (core/runs.py)."""
    config = Path(cli_env["DAGSTER_HOME"], "dagster.yaml")
    settings = yaml.safe_load(config.read_text())
    settings["compute_logs"] = {"module": "nemotron_assets_tests.dagsters_compute_logs",
                                "class": "DagstersOwnComputeLogManager",
                                "config": {"base_dir": str(config.parent / "storage")}}
    config.write_text(yaml.safe_dump(settings))
    late = tmp_path / "late_tail"
    late.mkdir()
    (late / "tail").write_text(f'#!/bin/sh\nsleep 3\nexec {shutil.which("tail")} "$@"\n')
    (late / "tail").chmod(0o755)
    env = dict(cli_env, PATH=f"{late}{os.pathsep}{cli_env['PATH']}")
    done = _run(["-m", "nemotron_assets", "materialize", "rl_sample", "--max-rows", "4"], env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(re.findall(r"^  [\d:]+ source_split: rows_4/\w+: 1 file\(s\), 4 rows", done.stderr, re.M)) == 5
    assert "jsonl_shard: building 5 shard(s) in 2 processes" in done.stderr
    assert len(re.findall(r"^  [\d:]+ jsonl_shard: rows_4/\w+/shard_00000: built", done.stderr, re.M)) == 5


def test_dagster_logs_alone_prints_the_event_log_and_the_default_does_not(cli_env):
    # The multiprocess executor's step process logs STEP_WORKER_STARTED before it has the run's loggers, through
    # Dagster's own console logger (core/runs.py terminal_instance): shown with the event log, not in the default.
    events = ("RUN_START", "STEP_START", "RUN_SUCCESS", "STEP_WORKER_STARTED")
    command = ["-m", "nemotron_assets", "materialize", "sample", "--select", "source_split",
               "--executor", "multiprocess"]
    full = _run([*command, "--dagster-logs"], cli_env)
    assert full.returncode == 0 and all(event in full.stderr for event in events), full.stderr[-2000:]
    compact = _run(command, cli_env)
    assert compact.returncode == 0 and not any(event in compact.stderr for event in events), compact.stderr[-2000:]
    assert " - dagster - " not in compact.stderr, compact.stderr[-2000:]  # no line in Dagster's own format


def test_unknown_blend_partition_and_deployment_fail_with_a_clear_message_and_exit_2(deployment, monkeypatch, capsys):
    """In this process: the exit status is what ``main`` returns (``run`` exits with it: test_status_and_verify.py)."""
    def command(*argv: str) -> tuple[int, str]:
        return main(list(argv)), capsys.readouterr().err

    code, err = command("materialize", "nosuch")
    assert code == 2 and "no blend 'nosuch'" in err and "sample" in err
    code, err = command("materialize", "sample", "--partition", "nosuch")
    assert code == 2 and "unknown dataset 'nosuch'" in err
    code, err = command("materialize", "sample", "--scale", "tiny", "--max-rows", "5")
    assert code == 2 and "either a scale" in err
    monkeypatch.setenv("NEMOTRON_DEPLOYMENT", "locall")
    for argv in (["materialize", "sample"], ["status"], ["verify", "sample"]):
        code, err = command(*argv)
        assert code == 2 and "NEMOTRON_DEPLOYMENT='locall' is not one of" in err, argv


def test_bad_blend_file_names_the_file_and_key(cli_env, tmp_path):
    blends = tmp_path / "blends"
    blends.mkdir()
    (blends / "broken.yaml").write_text("datasets:\n  - {name: ../x, path: a.jsonl}\n")
    done = _run(["-m", "nemotron_assets", "materialize", "broken"], dict(cli_env, NEMOTRON_BLENDS_DIR=str(blends)))
    assert done.returncode != 0
    assert "broken.yaml" in done.stderr and "'../x'" in done.stderr


def test_bad_line_fails_once_with_the_located_message_last_and_exit_status_1(cli_env, tmp_path):
    blends = tmp_path / "blends"
    blends.mkdir()
    (blends / "bad.jsonl").write_text('{"text": "ok"}\n{"text": "broken\n')
    (blends / "bad.yaml").write_text("datasets:\n  - {name: bad, path: bad.jsonl}\n")
    done = _run(["-m", "nemotron_assets", "materialize", "bad"], dict(cli_env, NEMOTRON_BLENDS_DIR=str(blends)))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) < 20, done.stderr  # one line per message, no stack traces
    error_at = next(i for i, line in enumerate(lines) if line.startswith("error in run "))
    assert lines[error_at - 2].startswith("FAILED: 2 run(s) in ")
    assert f"bad/shard_00000: dataset 'bad': {blends / 'bad.jsonl'}:2: malformed JSON" in lines[error_at + 1]
    run_id = lines[error_at].split()[3]
    assert lines[-1] == f"full log: the Dagster UI's Runs page, run {run_id}"  # the located error is last
    assert "retrying" not in done.stderr  # bad input is not retried
    assert not list((tmp_path / "data" / "bad" / "pretrain").rglob("shard_*"))


def test_the_done_line_counts_rows_skipped_with_on_error_skip(cli_env, tmp_path):
    blends = tmp_path / "blends"
    blends.mkdir()
    (blends / "some_bad.jsonl").write_text('{"text": "ok"}\n{"text": "broken\n{"txt": "no text"}\n{"text": "ok"}\n')
    (blends / "skip.yaml").write_text("on_error: skip\ndatasets:\n  - {name: mixed, path: some_bad.jsonl}\n")
    done = _run(["-m", "nemotron_assets", "materialize", "skip"], dict(cli_env, NEMOTRON_BLENDS_DIR=str(blends)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "; 2 bad row(s) skipped; " in done.stderr.splitlines()[-1]


def test_dagster_cli_builds_a_datasets_shards_in_one_run_over_a_partition_range(cli_env, tmp_path):
    """What the README documents for Dagster users: one command plans every dataset, one builds all of a dataset's
    shards in one run (its step builds them in parallel), one writes the blend files; the bytes of our command."""
    dagster = ["-m", "dagster", "asset", "materialize", "-m", "nemotron_assets.definitions"]
    done = _run([*dagster, "--select", "sample/source_split", "--partition-range", "wiki...reference_test"], cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    manifests = sorted(p.parent.name for p in (tmp_path / "data" / "sample" / "sources").glob("*/manifest.json"))
    assert manifests == ["code", "reference", "reference_test", "wiki", "wiki_valid"]  # one run, every dataset
    done = _run([*dagster, "--select", "sample/pretrain_shard", "--partition-range",
                 "wiki/shard_00000...wiki/shard_00002"], cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "building 3 shard(s) in 2 processes" in done.stderr
    assert sorted(p.name for p in (tmp_path / "data" / "sample" / "pretrain" / "wiki").glob("*.bin")) == [
        "shard_00000.bin", "shard_00001.bin", "shard_00002.bin"]
    done = _run([*dagster, "--select", "sample/pretrain_shard", "--partition", "code/shard_00000"], cli_env)
    assert done.returncode == 0, done.stderr[-3000:]  # one partition, as the UI's Materialize button launches it
    assert (tmp_path / "data" / "sample" / "pretrain" / "code" / "shard_00000.idx").exists()
    code, _, err = command_here(dict(cli_env, NEMOTRON_DATA_ROOT=str(tmp_path / "ours")), "materialize", "sample",
                                "--select", "source_split,pretrain_shard", "--partition", "wiki")
    assert code == 0, err[-3000:]
    for shard in (tmp_path / "ours" / "sample" / "pretrain" / "wiki").glob("shard_*.[bi][id]*"):
        assert shard.read_bytes() == (tmp_path / "data" / "sample" / "pretrain" / "wiki" / shard.name).read_bytes()


def test_a_changed_post_training_source_makes_exactly_its_descendants_stale(cli_env, tmp_path):
    blends = tmp_path / "blends"
    shutil.copytree(REPO / "blends", blends)
    env = dict(cli_env, NEMOTRON_BLENDS_DIR=str(blends))
    first = _run(["-m", "nemotron_assets", "materialize", "posttrain_sample"], env)
    assert first.returncode == 0, first.stderr[-3000:]
    status = json.loads(command_here(env, "status", "posttrain_sample", "--json")[1])
    assert {o["state"] for o in status["blends"][0]["outputs"]} == {"done"}

    text = blends / "sample_data" / "posttrain" / "text.jsonl"
    text.write_text(text.read_text().replace("e", "E", 1))  # one changed character in one dataset
    assert command_here(env, "materialize", "posttrain_sample", "--select", "source_split")[0] == 0
    report = json.loads(command_here(env, "status", "posttrain_sample", "--json")[1])
    datasets = {d["dataset"]: d for d in report["blends"][0]["datasets"]}
    assert list(datasets["text"]["stale"]) == ["text/shard_00000"]
    assert all(d["done"] == d["planned"] for name, d in datasets.items() if name != "text")
    outputs = {(o["asset"], o["key"]): o["state"] for o in report["blends"][0]["outputs"]}
    assert outputs[("harmony_dedup", "text")] == "stale"
    assert all(state == "done" for (asset, key), state in outputs.items() if asset == "harmony_dedup" and key != "text")
    assert all(state == "stale" for (asset, _), state in outputs.items()
               if asset in ("candidate_pool", "embedding_view", "behavior_report"))
    code, problems, _ = command_here(env, "verify", "posttrain_sample")
    assert code == 1
    assert f"{tmp_path / 'data' / 'posttrain_sample' / 'harmony' / 'text' / 'shard_00000.parquet'}: stale: " \
           "built with source=" in problems

    again = _run(["-m", "nemotron_assets", "materialize", "posttrain_sample"], env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert NO_OUTPUTS_WARNING not in first.stderr + again.stderr  # Harmony, dedup, pool and packed SFT checks
    def steps_saying(words: str) -> dict[str, list[str]]:
        """step -> the keys its lines say ``words`` about (lines ``  HH:MM:SS step: key: words...``)."""
        found: dict[str, list[str]] = {}
        for line in again.stderr.splitlines():
            if f": {words}" in line:
                step, key = line.split(": ")[0].split()[-1], line.split(": ")[1]
                found.setdefault(step, []).append(key)
        return found

    rebuilt = steps_saying("rebuilding: ")
    assert rebuilt["harmony_shard"] == ["text/shard_00000"]  # the one shard whose source changed
    assert rebuilt.get("sft_samples", []) in ([], ["text/shard_00000"])  # and the SFT samples rendered from it
    up_to_date = steps_saying("up to date, ")
    # the other ten shards, their dedup and their SFT samples (packed shards holding no text row stay too)
    assert {step: len(up_to_date[step]) for step in ("harmony_shard", "harmony_dedup", "sft_samples")} \
        == dict.fromkeys(("harmony_shard", "harmony_dedup", "sft_samples"), 10)
    assert "text/shard_00000" not in up_to_date["harmony_shard"] + up_to_date["sft_samples"]
    assert command_here(env, "verify", "posttrain_sample")[0] == 0


def test_a_jsonl_sample_runs_source_split_then_jsonl_shard_then_jsonl_manifest(cli_env, tmp_path):
    done = _run(["-m", "nemotron_assets", "materialize", "rl_sample", "--max-rows", "4"], cli_env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert NO_OUTPUTS_WARNING not in done.stderr  # jsonl_shard's check
    runs = [line.split()[2] for line in done.stderr.splitlines() if line.startswith("run ")]
    assert runs == ["source_split", "jsonl_shard", "jsonl_manifest"]
    data = tmp_path / "data" / "rl_sample"
    assert sorted(p.name for p in data.iterdir()) == ["samples"]  # the full build is untouched
    jsonl = data / "samples" / "rows_4" / "jsonl"
    manifest = json.loads((jsonl / "manifest.json").read_text())
    assert manifest["root"] == str(jsonl)
    assert sum(d["rows_in"] for d in manifest["datasets"].values()) == 5 * 4  # the first 4 rows of each dataset
    assert all((jsonl / path).exists() for split in ("train", "valid", "test") for path in manifest[split])
    from nemotron_assets.cli.reports import collect_status
    from nemotron_assets.core.blend import load_blend
    from nemotron_assets.core.storage import Storage

    blend = load_blend(REPO / "blends" / "rl_sample.yaml")
    with dg.DagsterInstance.from_config(cli_env["DAGSTER_HOME"]) as instance:
        report = collect_status(instance, Storage(str(tmp_path / "data")), blend)
    [sample] = report.samples
    assert sample.sample == "rows_4" and len(sample.datasets) == 5
    assert all(d.path == "jsonl" and d.done == d.planned == 1 for d in sample.datasets)


def test_failed_asset_checks_are_listed_from_the_runs_event_log():
    """A failed check does not fail its Dagster run; the command lists every failed one (asset, partition, check,
    its first problem) from the event log of a real instance, and none that passed. The asset reports as every
    partitioned asset of the product does (reporting.py)."""
    from nemotron_assets.cli.materialize import failed_asset_checks
    from nemotron_assets.core.reporting import CheckOutcome, materialize_partitions, partitioned_asset

    partitions = dg.StaticPartitionsDefinition(["a", "b"])

    @partitioned_asset(["numbers"], group="test", partitions_def=partitions, description="", kinds=set(),
                       checks={"even": "every row is even"})
    def numbers(context: dg.AssetExecutionContext):
        def check(partition: str) -> list[CheckOutcome]:
            bad = partition == "b"
            return [CheckOutcome("even", not bad, {"first": "row 3 is odd" if bad else "none"})]

        yield from materialize_partitions(context, dg.AssetKey("numbers"), context.partition_keys,
                                          build=lambda partition: {}, check=check)

    with quick_instance() as instance:
        run_ids = [dg.materialize([numbers], instance=instance, partition_key=key).run_id for key in ("a", "b")]
        assert failed_asset_checks(instance, run_ids) == ["numbers b even: row 3 is odd"]
        assert failed_asset_checks(instance, run_ids[:1]) == []
