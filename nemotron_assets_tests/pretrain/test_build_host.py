"""The build host: a real forked process that measures a dataset ahead as this process would, loads a real tokenizer,
reports its facts, forks the builds it is asked for, and sends back exactly what a build in this process gives.
Stopping it ends its builds; its death fails the builds still waiting; a failed load leaves the step to load the
tokenizer itself, a failed measure leaves it to measure. Where a test needs a build or a measure that never ends,
the function is replaced before the fork, so the real processes run it."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.workers import ForkedCallDied, fork_available
from nemotron_assets.defs.pretrain import build_host
from nemotron_assets.defs.pretrain.build_host import BuildHost, BuildRequest, MeasureAhead, command_host, measured_ahead
from nemotron_assets.defs.pretrain.shard_step import build_staged
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.manifest import build_manifest
from nemotron_assets.tokenize.documents import DocumentOptions, load_tokenizer
from nemotron_assets_tests.process_helpers import process_ended, wait_for
from nemotron_assets_tests.tokenize.builders import save, trained_bpe

pytestmark = pytest.mark.skipif(not fork_available(), reason="needs fork")


@pytest.fixture
def tokenizer_dir(tmp_path) -> Path:
    return save(trained_bpe(), tmp_path / "tok", eos_token="</s>")


@pytest.fixture
def host_of(tokenizer_dir):
    """Start hosts for the test; each is closed afterwards, whatever the test did."""
    hosts = []

    def start(spec: str | None = None, ahead: MeasureAhead | None = None) -> BuildHost:
        hosts.append(BuildHost(spec or str(tokenizer_dir), None, DocumentOptions(), ahead))
        return hosts[-1]

    yield start
    for host in hosts:
        host.close()


def _blend_with_three_shards(tmp_path: Path, bad_line_of_shard: int | None = None) -> tuple[Blend, object]:
    """A JSONL file of 90 rows planned as 3 shards of 30; optionally one row of one shard is not JSON."""
    lines = [json.dumps({"text": f"document {i}: the quick brown fox, café {i * 7}"}) for i in range(90)]
    if bad_line_of_shard is not None:
        lines[30 * bad_line_of_shard + 4] = '{"text": "cut short'
    data = tmp_path / "web.jsonl"
    data.write_text("\n".join(lines) + "\n")
    entry = DatasetEntry(name="web", path=str(data))
    blend = Blend(name="b", num_shards=3, datasets=[entry])
    return blend, build_manifest(blend, entry, tmp_path)


def test_the_host_loads_the_tokenizer_this_process_would_load_in_a_process_group_of_its_own(host_of, tokenizer_dir):
    host = host_of()
    facts = host.facts()
    assert facts == load_tokenizer(str(tokenizer_dir), None, DocumentOptions()).facts
    assert facts.vocab_size > 0 and facts.backend and facts.files.tokenizer_json == tokenizer_dir / "tokenizer.json"
    assert os.getpgid(host.pid) == host.pid != os.getpgid(0)
    assert command_host(str(tokenizer_dir), None, DocumentOptions()) is host
    assert command_host(str(tokenizer_dir), None, DocumentOptions(add_bos=True)) is None  # another setting
    host.close()
    assert host.state == "gone" and process_ended(host.pid)
    assert command_host(str(tokenizer_dir), None, DocumentOptions()) is None


def test_shards_built_by_the_host_are_the_bytes_built_here_and_a_bad_row_fails_only_its_shard(
        host_of, tokenizer_dir, tmp_path):
    blend, manifest = _blend_with_three_shards(tmp_path, bad_line_of_shard=1)
    here = load_tokenizer(str(tokenizer_dir), None, DocumentOptions())
    host = host_of()
    host.facts()
    requests = {}
    for index in range(3):
        folder = tmp_path / f"host_{index}"
        folder.mkdir()
        requests[f"web/shard_{index:05d}"] = BuildRequest(blend, manifest, ShardKey("web", index), folder, threads=1)
    heard = []
    builds = host.builds(requests, 2, on_message=lambda name, message: heard.append(name))
    assert host.state == "building" and command_host(str(tokenizer_dir), None, DocumentOptions()) is None

    with pytest.raises(InputError) as raised:
        builds.result("web/shard_00001")  # any order
    assert "web.jsonl:35" in str(raised.value) and raised.value.__notes__[0].startswith("in the forked process:")
    for index in (2, 0):
        stats, read = builds.result(f"web/shard_{index:05d}")
        folder = tmp_path / f"here_{index}"
        folder.mkdir()
        expected_stats, expected_read = build_staged(blend, manifest, ShardKey("web", index), here, folder,
                                                     log=lambda _: None, threads=1)
        for suffix in (".bin", ".idx"):
            mine = (tmp_path / f"host_{index}" / f"shard{suffix}").read_bytes()
            assert mine == (folder / f"shard{suffix}").read_bytes() and mine
        assert stats.as_dict() == expected_stats.as_dict() and read.rows == expected_read.rows == 30
    assert host.state == "ready"  # every result came: it takes the next request
    assert set(heard) <= set(requests)

    again = host.builds({"web/shard_00002": requests["web/shard_00002"]}, 1, on_message=lambda *_: None)
    assert again.result("web/shard_00002")[1].rows == 30


def test_a_failed_load_gives_no_facts_and_ends_the_host(host_of, tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tokenizer.json").write_text("{ not a tokenizer")
    host = host_of(str(tmp_path / "broken"))
    assert host.facts() is None
    assert host.state == "gone" and process_ended(host.pid)
    with pytest.raises(RuntimeError, match="gone"):
        host.builds({}, 1, on_message=lambda *_: None)


def test_the_host_measures_ahead_the_manifest_this_process_would_measure_and_gives_it_once(host_of, tmp_path):
    blend, expected = _blend_with_three_shards(tmp_path)
    host = host_of(ahead=MeasureAhead(blend, "web", tmp_path))
    other_blend = blend.model_copy(update={"num_shards": 2})
    for asked in ((other_blend, "web", tmp_path), (blend, "web", tmp_path / "elsewhere"), (blend, "news", tmp_path)):
        assert measured_ahead(*asked) is None  # not the call the host made: the step measures
    manifest = measured_ahead(blend, "web", tmp_path)
    assert manifest == expected and len(manifest.shards) == 3
    assert measured_ahead(blend, "web", tmp_path) is None  # once: a second split of the dataset measures again
    assert host.facts() is not None and host.state == "ready"  # then the tokenizer, as without measuring


def test_a_dataset_the_host_cannot_measure_is_left_to_the_step_and_the_tokenizer_still_loads(host_of, tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    entry = DatasetEntry(name="web", path=str(tmp_path / "empty.jsonl"))
    blend = Blend(name="b", datasets=[entry])
    host = host_of(ahead=MeasureAhead(blend, "web", tmp_path))
    assert measured_ahead(blend, "web", tmp_path) is None
    assert host.facts() is not None and host.state == "ready"
    with pytest.raises(InputError, match="empty file") as raised:  # the step meets the error itself, located
        build_manifest(blend, entry, tmp_path)
    assert "empty.jsonl" in str(raised.value)


def _never_ending_measure(ahead):
    time.sleep(3600)


def test_a_host_that_dies_while_measuring_leaves_the_dataset_to_the_step(host_of, tmp_path, monkeypatch):
    monkeypatch.setattr(build_host, "_measure", _never_ending_measure)  # before the fork: the host runs this one
    blend, _ = _blend_with_three_shards(tmp_path)
    host = host_of(ahead=MeasureAhead(blend, "web", tmp_path))
    os.kill(host.pid, signal.SIGKILL)
    assert measured_ahead(blend, "web", tmp_path) is None
    assert host.state == "gone" and host.facts() is None


def _never_ending_build(request, tokenizer, report):
    (request.folder / "pid").write_text(str(os.getpid()))
    time.sleep(3600)


def test_closing_builds_before_their_results_kills_the_host_and_every_build(host_of, tmp_path, monkeypatch):
    monkeypatch.setattr(build_host, "_build", _never_ending_build)  # before the fork: the host runs this one
    blend, manifest = _blend_with_three_shards(tmp_path)
    host = host_of()
    host.facts()
    requests = {name: BuildRequest(blend, manifest, ShardKey("web", 0), tmp_path / name, 1) for name in ("a", "b")}
    for request in requests.values():
        request.folder.mkdir()
    builds = host.builds(requests, 2, on_message=lambda *_: None)
    wait_for(lambda: all((r.folder / "pid").exists() for r in requests.values()), "both builds to start")
    pids = [int((r.folder / "pid").read_text()) for r in requests.values()] + [host.pid]

    builds.close()  # the step leaves early (an error, a terminated run)
    wait_for(lambda: all(process_ended(pid) for pid in pids), "the host and its builds to end")
    assert host.state == "gone"


def test_a_host_that_dies_fails_the_builds_whose_results_had_not_come(host_of, tmp_path, monkeypatch):
    monkeypatch.setattr(build_host, "_build", _never_ending_build)
    blend, manifest = _blend_with_three_shards(tmp_path)
    host = host_of()
    host.facts()
    folder = tmp_path / "a"
    folder.mkdir()
    builds = host.builds({"a": BuildRequest(blend, manifest, ShardKey("web", 0), folder, 1)}, 1,
                         on_message=lambda *_: None)
    wait_for(lambda: (folder / "pid").exists(), "the build to start")
    build_pid = int((folder / "pid").read_text())
    try:
        os.kill(host.pid, signal.SIGKILL)  # the host alone, as the out-of-memory killer would
        waiting = ThreadPoolExecutor(1)  # a thread, so that a result that never comes fails the test
        try:  # at once, though the build still runs: it holds no copy of the host's pipe to this process
            error = waiting.submit(builds.result, "a").exception(timeout=30)
        finally:
            waiting.shutdown(wait=False)
        assert isinstance(error, ForkedCallDied) and str(error) == "the build host ended before a was built"
        assert host.state == "gone"
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed with the host's group already
            os.kill(build_pid, signal.SIGKILL)


def test_a_host_whose_command_was_killed_ends(tokenizer_dir):
    """The command dies without a word (``kill -9``): the host, idle on its pipe, sees it closed and ends."""
    command = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from nemotron_assets.defs.pretrain.build_host import BuildHost\n"
         "from nemotron_assets.tokenize.documents import DocumentOptions\n"
         "host = BuildHost(sys.argv[1], None, DocumentOptions())\n"
         "assert host.facts() is not None\n"
         "print(host.pid, flush=True)\n"
         "time.sleep(3600)\n", str(tokenizer_dir)],
        stdout=subprocess.PIPE, text=True)
    try:
        host_pid = int(command.stdout.readline())
        assert not process_ended(host_pid)
        command.kill()
        command.wait()
        wait_for(lambda: process_ended(host_pid), "the host to end")
    finally:
        command.kill()


def test_a_command_that_cannot_fork_its_host_goes_on_without_it(monkeypatch, capsys):
    """Forking may fail (memory, process limits): the command says so and its shard step loads the tokenizer."""
    from nemotron_assets import cli
    from nemotron_assets.core.blend import load_blend
    from nemotron_assets_tests.conftest import REPO

    def no_fork(*args, **kwargs):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(build_host, "BuildHost", no_fork)
    blend_file = REPO / "blends" / "sample.yaml"
    request = cli.Request(blend_file, load_blend(blend_file), ["source_split", "pretrain_shard"])
    with cli._build_host_started(request, cli._parser().parse_args(["materialize", "sample"]), cluster=False):
        assert build_host.command_host("llama3", None, DocumentOptions()) is None
    assert "no build host ([Errno 11] Resource temporarily unavailable)" in capsys.readouterr().err


def test_the_command_asks_its_host_to_measure_ahead_only_a_whole_first_dataset_it_splits_now(monkeypatch):
    """A sample's split reads only its first rows, and a command without source_split measures nothing: the host
    would measure for nobody. The host's constructor is replaced by one that records what it was asked."""
    from nemotron_assets import cli
    from nemotron_assets.core.blend import load_blend
    from nemotron_assets_tests.conftest import REPO

    asked = []
    monkeypatch.setattr(build_host, "BuildHost", lambda *args: asked.append(args[3]))
    blend_file = REPO / "blends" / "sample.yaml"
    blend = load_blend(blend_file)
    args = cli._parser().parse_args(["materialize", "sample"])
    for steps, sample in ((["source_split", "pretrain_shard"], None), (["source_split", "pretrain_shard"], "tiny"),
                          (["pretrain_shard"], None)):
        with cli._build_host_started(cli.Request(blend_file, blend, steps, sample), args, cluster=False):
            pass
    first = blend.datasets_of("pretrain")[0].name
    assert asked == [MeasureAhead(blend, first, blend_file.parent), None, None]


def test_the_command_forks_its_host_before_importing_dagster(tmp_path):
    """Importing Dagster takes ~0.5 s of the command's start: a host forked after it would load that much later.
    The host's constructor is replaced (in a fresh interpreter) by one that reports and ends the command."""
    from nemotron_assets_tests.conftest import REPO

    script = ("import os, sys\n"
              "from nemotron_assets.defs.pretrain import build_host\n"
              "def report(*args, **kwargs):\n"
              "    print('dagster' in sys.modules, flush=True)\n"
              "    os._exit(0)\n"
              "build_host.BuildHost = report\n"
              "from nemotron_assets import cli\n"
              "cli.main(['materialize', 'sample'])\n")
    env = dict(os.environ, NEMOTRON_BLENDS_DIR=str(REPO / "blends"), NEMOTRON_DATA_ROOT=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
