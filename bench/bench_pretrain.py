#!/usr/bin/env python3
"""Pretraining benchmark: ours, driven the three ways users drive it, vs Megatron-LM's own tools, on one JSONL file,
in one invocation.

    .venv/bin/python bench/bench_pretrain.py --input /tmp/corpus/corpus_200mb.jsonl [--scale 5] \\
        [--tokenizer /tmp/tok/llama3] [--megatron-tree /tmp/megatron --megatron-python /tmp/venv-mega/bin/python] \\
        [--paths cli,dagster,sensor] [--before /path/to/old/checkout] [--classic] [--runs 2] [--shard-size 256MB]

``--scale N`` benchmarks the input repeated N times (``--scale 5`` of the 200 MB corpus is the 1 GB case: 4 shards
at the default 256 MB ``shard_size``), written once into the work folder.

Ours, each on a fresh Dagster instance (sqlite) and data root (``--paths``):

- ``cli``: ``python -m nemotron_assets materialize bench``, the whole blend in one command;
- ``dagster``: the three documented commands, each a fresh process: ``dagster asset materialize -m
  nemotron_assets.definitions --select bench/source_split --partition corpus``, then ``--select
  bench/pretrain_shard --partition-range corpus/shard_00000...corpus/shard_NNNNN`` (every shard in one run), then
  ``--select bench/megatron_blend``;
- ``sensor``: the UI path. ``dagster-daemon run`` with the bundled dagster.yaml, then the blend's build sensor
  ``bench__build`` turned on; timed from the sensor's start to the blend files' commit.

``--before DIR`` also runs an older checkout's command and, with ``dagster``, its Dagster path (one command per
shard: before single-run backfills, ``--partition-range`` was refused), alternating with the new code.

Each run measures, per tool: wall time; CPU time of every process it started (user+sys, exact: this script makes
itself the child subreaper, so processes whose parent exits first are reaped here and counted); CPU utilization
(CPU seconds per wall second, in cores); the peak RSS of its largest single process (``ru_maxrss`` of each reaped
process); and the CPU time other processes on the machine used meanwhile (``/proc/stat``), because this machine is
shared. Before each measurement it waits (up to ``--quiet-wait`` seconds) for the machine to be idle. Tools take
turns within a run, so a ratio compares measurements taken under the same conditions.

Every path does the same work: the source split (row count + BLAKE3 of the input), tokenizing, the atomic commits,
the shard checks and blend.json. With a Megatron-LM tree, ``tools/preprocess_data_fast.py --use-gigatoken`` runs on
the same file and tokenizer (``--classic`` adds ``tools/preprocess_data.py --workers 2``, ~7 minutes on 1 GB).
Every output is compared with Megatron's: our shards' ``.bin`` concatenated must equal its ``.bin`` byte for byte,
and our sequence lengths and document boundaries, shard after shard, its ``.idx``. Ratios > 1 mean we are faster.
``--sentencepiece N`` benchmarks a SentencePiece tokenizer instead: it trains an N-piece model (BPE with byte fallback,
as Llama-2's; ``fixtures/megatron/reference_tools.py train_sentencepiece``) from the input's first lines, then runs
ours with ``tokenizer_model: <the .model>`` against ``tools/preprocess_data.py --tokenizer-type
GPTSentencePieceTokenizer --workers 2`` (the fast tool takes Hugging Face tokenizers only).
The tokenize step alone (texts in memory) is measured last, on the input as given (not scaled). Before measuring,
both tools' packages are compiled to bytecode (``compile_bytecode``), so neither pays for compiling its modules.
"""

import argparse
import ctypes
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cli_runs import RUN_LINE

REPO = Path(__file__).resolve().parent.parent
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
FAST = "megatron preprocess_data_fast --use-gigatoken"
CLASSIC = "megatron preprocess_data --workers 2"


# --- measuring a process tree ------------------------------------------------------------------------------
def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has been busy (user, nice, system, irq, softirq, steal) since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7]) / os.sysconf("SC_CLK_TCK")


def wait_quiet(limit_s: float, threshold_cores: float = 0.15) -> float:
    """Wait until other processes use less than ``threshold_cores`` over 2 s, at most ``limit_s``; the last load."""
    deadline = time.monotonic() + limit_s
    while True:
        before = busy_cpu_seconds()
        time.sleep(2)
        load = (busy_cpu_seconds() - before) / 2
        if load < threshold_cores or time.monotonic() >= deadline:
            return load


def measure(cmd: list[str], env: dict, cwd: Path, log: Path) -> dict:
    """Run ``cmd`` and every process it starts to the end; wall, CPU and peak RSS; raise if it fails.

    Each reaped process's ``rusage`` covers itself and the children it reaped, so summing the rusage of the
    processes this script reaps counts every process once; ``ru_maxrss`` is a per-process maximum."""
    machine_before, started = busy_cpu_seconds(), time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    cpu, peak_kb, wall = 0.0, 0, 0.0
    while True:
        try:
            child, child_status, usage = os.wait4(-1, 0)  # also the orphans handed to this subreaper
        except ChildProcessError:
            break  # nothing left: the command and everything it started have ended
        cpu += usage.ru_utime + usage.ru_stime
        peak_kb = max(peak_kb, usage.ru_maxrss)
        if child == process.pid:
            process.returncode, wall = os.waitstatus_to_exitcode(child_status), time.monotonic() - started
    machine_cpu = busy_cpu_seconds() - machine_before
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({process.returncode}):\n{log.read_text(errors='replace')[-4000:]}")
    return {"wall_s": wall, "cpu_s": cpu, "cpu_util": cpu / wall, "peak_rss_mb": peak_kb / 1024,
            "background_cores": max(0.0, machine_cpu - cpu) / wall}


# --- the tools ---------------------------------------------------------------------------------------------
@dataclass
class Root:
    """A fresh Dagster instance and data root for one build, with the blend ``bench`` over the input."""

    code: Path  # the checkout whose code runs (this one, or --before's)
    env: dict
    data: Path
    home: Path

    @property
    def shard_folder(self) -> Path:
        return self.data / "bench" / "pretrain" / "corpus"


def fresh_root(args, work: Path, input_path: Path, code: Path = REPO) -> Root:
    blends, home, data = work / "blends", work / "dagster_home", work / "data"
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    blends.mkdir(parents=True, exist_ok=True)
    home.mkdir()
    shutil.copy(code / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    (blends / "bench.yaml").write_text(json.dumps({
        "tokenizer_model": args.tokenizer, "shard_size": args.shard_size,
        "datasets": [{"name": "corpus", "path": str(input_path)}]}))
    env = dict(os.environ, NEMOTRON_BLENDS_DIR=str(blends), DAGSTER_HOME=str(home), NEMOTRON_DATA_ROOT=str(data),
               PYTHONPATH=str(code))
    return Root(code, env, data, home)


def built(root: Root, result: dict) -> tuple[dict, list[str]]:
    """Add the shards' counts to ``result``; (result, shard prefixes in order)."""
    # receipts in .receipts/ beside the shards; a checkout older than that folder (--before) wrote them beside them
    receipts = sorted((root.shard_folder / ".receipts").glob("shard_*.json")) or sorted(
        root.shard_folder.glob("shard_*.json"))
    result["tokens"] = sum(json.loads(r.read_text())["stats"]["tokens"] for r in receipts)
    result["backend"] = json.loads(receipts[0].read_text())["stats"]["backend"]
    result["shards"] = len(receipts)
    return result, [str(root.shard_folder / r.stem) for r in receipts]


def run_cli(root: Root, work: Path, options: list[str]) -> dict:
    """``python -m nemotron_assets materialize bench``: the whole blend, one command; prints its time split into its
    Dagster runs (each with its steps' own work, from the command's run lines) and the rest (start-up, between runs)."""
    cmd = [sys.executable, "-m", "nemotron_assets", "materialize", "bench", "--log-level", "WARNING", *options]
    log = work / f"cli{'_'.join(options)}.log"
    result = measure(cmd, root.env, root.code, log)
    runs = [match for match in map(RUN_LINE.match, log.read_text(errors="replace").splitlines()) if match]
    run_s = sum(float(match["seconds"]) for match in runs)
    each = ", ".join(f"{m['asset']} {m['seconds']} s" + (f" (steps {m['steps']} s)" if m["steps"] else "")
                     for m in runs)
    print(f"  {root.code}: {result['wall_s']:.2f} s = start-up and between runs {result['wall_s'] - run_s:.2f} s "
          f"+ {len(runs)} run(s): {each}", flush=True)
    return result


def dagster_command(select: str, partitions: list[str]) -> list[str]:
    cmd = [str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m", "nemotron_assets.definitions",
           "--select", select]
    if len(partitions) == 1:
        cmd += ["--partition", partitions[0]]
    elif partitions:
        cmd += ["--partition-range", f"{partitions[0]}...{partitions[-1]}"]
    return cmd


def run_dagster_commands(root: Root, work: Path, one_per_shard: bool = False) -> dict:
    """The documented Dagster commands, each a fresh process: the split, every shard of the dataset in one run (or,
    with ``one_per_shard``, one command per shard: what a Dagster user had to do before single-run backfills), the
    blend files. Wall and CPU are the commands' sums, peak RSS their largest process."""
    commands = [dagster_command("bench/source_split", ["corpus"])]
    steps = [measure(commands[0], root.env, root.code, work / "dagster_split.log")]
    manifest = json.loads((root.data / "bench" / "sources" / "corpus" / "manifest.json").read_text())
    shards = [f"corpus/shard_{shard['index']:05d}" for shard in manifest["shards"]]
    for run in ([[key] for key in shards] if one_per_shard else [shards]):
        steps.append(measure(dagster_command("bench/pretrain_shard", run), root.env, root.code,
                             work / "dagster_shards.log"))
    steps.append(measure(dagster_command("bench/megatron_blend", []), root.env, root.code, work / "dagster_blend.log"))
    wall = sum(step["wall_s"] for step in steps)
    cpu = sum(step["cpu_s"] for step in steps)
    return {"wall_s": wall, "cpu_s": cpu, "cpu_util": cpu / wall,
            "peak_rss_mb": max(step["peak_rss_mb"] for step in steps),
            "background_cores": sum(step["background_cores"] * step["wall_s"] for step in steps) / wall,
            "commands": [round(step["wall_s"], 2) for step in steps]}


def run_build_sensor(root: Root, work: Path, timeout_s: float = 600) -> dict:
    """The UI path: ``dagster-daemon run`` (the daemon's defaults, the bundled dagster.yaml) is started and given
    time to load the code location; then the blend's build sensor is turned on (``dagster sensor start``, what the
    UI's switch does) and the time is taken from the moment it is on until the blend files' receipt is committed.
    Only wall time: the daemon's processes outlive the build."""
    from nemotron_assets.core.records import receipt_path  # where the product keeps a receipt, wherever that is

    bin_dir = Path(sys.executable).parent
    workspace = str(root.code / "workspace.yaml")
    receipt = root.data / receipt_path("bench/pretrain/blend.receipt")
    with open(work / "daemon.log", "wb") as log:
        daemon = subprocess.Popen([str(bin_dir / "dagster-daemon"), "run", "-w", workspace], env=root.env,
                                  cwd=root.code, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(15)  # the daemon loads the code location once; a deployment's daemon is already running
        subprocess.run([str(bin_dir / "dagster"), "sensor", "start", "bench__build", "-w", workspace],
                       env=root.env, cwd=root.code, check=True, capture_output=True)
        started = time.monotonic()
        while not receipt.exists():
            if daemon.poll() is not None or time.monotonic() - started > timeout_s:
                raise SystemExit(f"the build sensor did not build the blend:\n"
                                 f"{(work / 'daemon.log').read_text(errors='replace')[-4000:]}")
            time.sleep(0.1)
        return {"wall_s": time.monotonic() - started}
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=60)
        reap_orphans()


def reap_orphans(timeout_s: float = 60) -> None:
    """Wait for the processes handed to this subreaper (the daemon's code server and runs), so their CPU time is not
    counted for the next tool."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            child, _, _ = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if child == 0:
            time.sleep(0.1)


def keep_outputs(prefixes: list[str], folder: Path) -> list[str]:
    """Move one run's shards aside (the next run of ours starts from an empty data root)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    kept = []
    for prefix in prefixes:
        target = folder / Path(prefix).name
        for ext in (".bin", ".idx"):
            os.replace(f"{prefix}{ext}", f"{target}{ext}")
        kept.append(str(target))
    return kept


def run_megatron(args, work: Path, input_path: Path, fast: bool) -> tuple[dict, str]:
    prefix = work / ("megatron_fast" if fast else "megatron_classic")
    for ext in ("_text_document.bin", "_text_document.idx"):
        Path(f"{prefix}{ext}").unlink(missing_ok=True)
    tool = "tools/preprocess_data_fast.py" if fast else "tools/preprocess_data.py"
    kind = "GPTSentencePieceTokenizer" if args.tokenizer.endswith(".model") else "HuggingFaceTokenizer"
    cmd = [args.megatron_python, tool, "--input", str(input_path), "--output-prefix", str(prefix),
           "--tokenizer-type", kind, "--tokenizer-model", args.tokenizer,
           "--json-keys", "text", "--append-eod"]
    cmd += ["--use-gigatoken"] if fast else ["--workers", "2"]
    shim = args.megatron_shim
    env = dict(os.environ, PYTHONPATH=f"{shim}:{args.megatron_tree}" if shim else args.megatron_tree,
               PYTHONWARNINGS="ignore")
    log = work / f"{prefix.name}.log"
    return measure(cmd, env, Path(args.megatron_tree), log), f"{prefix}_text_document"


def compile_bytecode(python: str, *folders: str | Path) -> None:
    """Compile ``python``'s installed packages and ``folders`` to bytecode, as ``pip install`` does.

    A tool whose modules have no ``.pyc`` compiles every module it imports at each start (with
    ``PYTHONDONTWRITEBYTECODE=1``, as on this machine, it never keeps them): ~2 s for dagster. Megatron's venv
    was installed compiled (10,756 ``.pyc``) and ours was not, so each side is compiled here before it is
    measured; files that are already compiled are only checked (a few seconds)."""
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0", purelib, *map(str, folders)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # some files are py2 samples


# --- comparing outputs -------------------------------------------------------------------------------------
def read_idx(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(sequence lengths, document indices) of an MMIDIDX v1 file, read from its documented layout."""
    data = Path(path).read_bytes()
    magic, version, _dtype, sequences, documents = struct.unpack_from("<9sQBQQ", data, 0)
    assert magic == b"MMIDIDX\x00\x00" and version == 1, f"{path}: not an MMIDIDX v1 index"
    offset = struct.calcsize("<9sQBQQ")
    lengths = np.frombuffer(data, "<i4", sequences, offset)
    doc_indices = np.frombuffer(data, "<i8", documents, offset + 12 * sequences)
    return lengths, doc_indices


def same_bin(our_prefixes: list[str], other_prefix: str, chunk: int = 64 << 20) -> bool:
    """Our .bin files, concatenated, equal the other .bin byte for byte (streamed: 1 GB files stay on disk)."""
    with open(f"{other_prefix}.bin", "rb") as other:
        for prefix in our_prefixes:
            with open(f"{prefix}.bin", "rb") as ours:
                while block := ours.read(chunk):
                    if other.read(len(block)) != block:
                        return False
        return other.read(1) == b""


def same_index(our_prefixes: list[str], other_prefix: str) -> bool:
    """Our shards' sequence lengths and document boundaries, one shard after the other, equal the other index."""
    lengths, boundaries, sequences = [], [np.zeros(1, dtype=np.int64)], 0
    for prefix in our_prefixes:
        shard_lengths, shard_docs = read_idx(f"{prefix}.idx")
        lengths.append(shard_lengths)
        boundaries.append(shard_docs[1:] + sequences)
        sequences += len(shard_lengths)
    other_lengths, other_docs = read_idx(f"{other_prefix}.idx")
    return (np.array_equal(np.concatenate(lengths), other_lengths)
            and np.array_equal(np.concatenate(boundaries), other_docs))


def same_dataset(our_prefixes: list[str], other: list[str] | str) -> bool:
    """Against another build of ours (a list of prefixes): the same files; against Megatron's single dataset: the
    same bytes and documents, our shards one after the other."""
    if isinstance(other, list):
        return len(our_prefixes) == len(other) and all(
            Path(f"{a}{ext}").read_bytes() == Path(f"{b}{ext}").read_bytes()
            for a, b in zip(our_prefixes, other) for ext in (".idx", ".bin"))
    return same_bin(our_prefixes, other) and same_index(our_prefixes, other)


def tokenize_step(args) -> dict:
    """The tokenize step alone, texts in memory: chosen backend vs the hf-tokenizers fall-back."""
    import orjson

    from nemotron_assets.tokenize.documents import DocumentOptions, load_tokenizer

    with open(args.input, "rb") as f:
        texts = [orjson.loads(line)["text"] for line in f]
    result = {}
    for backend in ("auto", "hf"):
        tokenizer = load_tokenizer(args.tokenizer, None, DocumentOptions(backend=backend))
        started = time.monotonic()
        tokens = 0
        for i in range(0, len(texts), 4096):
            ids, _ = tokenizer.documents(texts[i:i + 4096])
            tokens += len(ids)
        result[tokenizer.backend] = tokens / (time.monotonic() - started)
    return result


def sentencepiece_model(source: Path, pieces: int, work: Path, sample_lines: int = 400_000) -> str:
    """An N-piece SentencePiece model trained on the first ``sample_lines`` non-empty lines of the input's texts
    (SentencePiece skips sentences over 4,192 bytes, so documents are fed line by line); its path."""
    import orjson

    sys.path.insert(0, str(REPO))
    from nemotron_assets_tests.fixtures.megatron.reference_tools import train_sentencepiece

    def lines():
        count = 0
        with open(source, "rb") as f:
            for row in f:
                for line in orjson.loads(row)["text"].splitlines():
                    if line.strip() and len(line.encode()) <= 4192:
                        yield line
                        count += 1
                        if count == sample_lines:
                            return

    model = work / "sentencepiece" / "tokenizer.model"
    model.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    model.write_bytes(train_sentencepiece(lines(), vocab_size=pieces))
    print(f"trained a {pieces:,}-piece SentencePiece model on {sample_lines:,} lines in "
          f"{time.monotonic() - started:.0f} s: {model}", flush=True)
    return str(model)


def scaled_input(source: Path, scale: int, work: Path) -> Path:
    """``source`` repeated ``scale`` times (1: the file itself)."""
    if scale == 1:
        return source.resolve()
    target = work / f"{source.stem}_x{scale}.jsonl"
    with open(target, "wb") as out:
        for _ in range(scale):
            with open(source, "rb") as part:
                shutil.copyfileobj(part, out, 16 << 20)
    return target


# --- main --------------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="a JSONL file with a 'text' field")
    parser.add_argument("--scale", type=int, default=1, help="benchmark the input repeated this many times")
    parser.add_argument("--tokenizer", default="llama3", help="tokenizer folder (or 'llama3', the bundled one)")
    parser.add_argument("--sentencepiece", type=int, default=None, metavar="PIECES",
                        help="train a SentencePiece model of this many pieces from the input and benchmark it "
                             "against tools/preprocess_data.py --tokenizer-type GPTSentencePieceTokenizer")
    parser.add_argument("--shard-size", default="256MB")
    parser.add_argument("--paths", default="cli,dagster,sensor",
                        help="how ours is driven: cli (our command), dagster (the three documented dagster "
                             "commands), sensor (the daemon and the build sensor, as in the UI); comma-separated")
    parser.add_argument("--cli-options", default="", help="more options of our command, e.g. '--build-processes 1'")
    parser.add_argument("--before", default=None,
                        help="a checkout of older code: also its command, and its Dagster commands one per shard")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--megatron-tree", default=None, help="Megatron-LM source tree (enables the baselines)")
    parser.add_argument("--megatron-python", default="/tmp/venv-mega/bin/python")
    parser.add_argument("--megatron-shim", default="/tmp/shim312", help="PYTHONPATH shim for typing.override")
    parser.add_argument("--classic", action="store_true", help="also run Megatron's tools/preprocess_data.py")
    parser.add_argument("--quiet-wait", type=float, default=60.0, help="seconds to wait for an idle machine")
    parser.add_argument("--skip-tokenize-step", action="store_true")
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--no-compile-bytecode", action="store_true",
                        help="measure the tools as installed, without compiling their modules first")
    parser.add_argument("--work-dir", default=None, help="where inputs and outputs go (default: a temp folder)")
    args = parser.parse_args()
    if args.megatron_tree and args.tokenizer == "llama3" and not args.sentencepiece:
        raise SystemExit("give --tokenizer as a folder Megatron can load too (e.g. /tmp/tok/llama3)")
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed: CPU times of orphaned processes would be lost")

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="nemotron-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    input_path = scaled_input(Path(args.input), args.scale, work)
    if args.sentencepiece:
        args.tokenizer = sentencepiece_model(input_path, args.sentencepiece, work)
        args.classic = True
    size = input_path.stat().st_size
    with open(input_path, "rb") as f:  # into the page cache, as for every tool after the first
        while f.read(64 << 20):
            pass
    if not args.no_compile_bytecode:
        compile_bytecode(sys.executable, REPO / "nemotron_assets")
        if args.before:
            compile_bytecode(sys.executable, Path(args.before) / "nemotron_assets")
        if args.megatron_tree:
            compile_bytecode(args.megatron_python, Path(args.megatron_tree) / "megatron",
                             Path(args.megatron_tree) / "tools")
    paths = [path.strip() for path in args.paths.split(",")]
    tools = []  # (name, how to run it on a fresh root: -> measurements, the checkout)
    for path in paths:
        if path == "cli":
            tools.append(("nemotron_assets materialize", lambda root: run_cli(root, work, args.cli_options.split()),
                          REPO))
        elif path == "dagster":
            tools.append(("dagster asset materialize x3", lambda root: run_dagster_commands(root, work), REPO))
        elif path == "sensor":
            tools.append(("build sensor + daemon", lambda root: run_build_sensor(root, work), REPO))
        else:
            raise SystemExit(f"unknown path {path!r}: cli, dagster or sensor")
    if args.before:
        before = Path(args.before).resolve()
        tools.append(("before: nemotron_assets materialize", lambda root: run_cli(root, work, []), before))
        if "dagster" in paths:
            tools.append(("before: dagster asset materialize per shard",
                          lambda root: run_dagster_commands(root, work, one_per_shard=True), before))
    rows, results = [], {"input_bytes": size, "runs": []}
    for run in range(1, args.runs + 1):
        measured: dict[str, dict] = {}
        outputs: dict[str, list[str] | str] = {}
        for name, build, code in tools:
            load = wait_quiet(args.quiet_wait)
            root = fresh_root(args, work, input_path, code)
            measured[name], prefixes = built(root, build(root))
            measured[name]["load_before"] = load
            outputs[name] = keep_outputs(prefixes, work / f"ours{len(outputs)}")
        if args.megatron_tree:
            for fast in (False,) if args.sentencepiece else (True, False) if args.classic else (True,):
                name = FAST if fast else CLASSIC
                load = wait_quiet(args.quiet_wait)
                measured[name], outputs[name] = run_megatron(args, work, input_path, fast)
                measured[name]["load_before"] = load
        ours = [n for n in measured if not n.startswith("megatron")]
        megatron = [n for n in measured if n.startswith("megatron")]
        reference = megatron[0] if megatron else ours[0]
        tokens = measured[ours[0]]["tokens"]
        for name, m in measured.items():
            if name == reference:
                m["identical"] = True
            elif name in ours:  # vs Megatron's file, or (without Megatron) vs our first build, file for file
                m["identical"] = same_dataset(outputs[name], outputs[reference])
            else:  # Megatron's classic tool vs our first build
                m["identical"] = same_dataset(outputs[ours[0]], outputs[name])
            rows.append((name, run, m))
        results["runs"].append(measured)
        print(f"run {run}: " + "; ".join(f"{n}: {m['wall_s']:.2f} s" for n, m in measured.items()), flush=True)

    first = results["runs"][0][ours[0]]
    print(f"\ninput {input_path}: {size / 1e6:.1f} MB ({args.scale}x {args.input}), {tokens:,} tokens, "
          f"{first['shards']} shard(s) of ours; our backend: {first['backend']}; reference for identity: "
          f"{reference}\n")
    header = (f"{'tool':47} {'run':>3} {'wall s':>7} {'CPU s':>7} {'CPU util':>8} {'M tok/s':>8} "
              f"{'peak RSS MB':>11} {'bg cores':>8} {'identical':>9}")
    print(header)
    def cell(m: dict, key: str, form: str) -> str:
        return format(m[key], form) if key in m else "-"

    for name, run, m in rows:
        util = f"{100 * m['cpu_util']:.0f}%" if "cpu_util" in m else "-"
        print(f"{name:47} {run:>3} {m['wall_s']:>7.2f} {cell(m, 'cpu_s', '.2f'):>7} {util:>8} "
              f"{tokens / m['wall_s'] / 1e6:>8.2f} {cell(m, 'peak_rss_mb', '.0f'):>11} "
              f"{cell(m, 'background_cores', '.2f'):>8} {'yes' if m['identical'] else 'NO':>9}"
              + (f"  (commands: {', '.join(f'{t:.2f}' for t in m['commands'])} s)" if "commands" in m else ""))
    print("\nCPU util: CPU seconds of every process of the tool per wall second (200% = both cores); peak RSS: its "
          "largest single process; bg cores: other processes' CPU use during the run (a busy machine slows every "
          "tool). The build sensor's time runs from the sensor's start to the blend files' commit (the daemon runs "
          "before).")
    cli = "nemotron_assets materialize"
    for name in measured:
        if name != cli and cli in measured and not name.startswith("megatron"):
            per_run = [r[name]["wall_s"] / r[cli]["wall_s"] for r in results["runs"]]
            print(f"ratio {name} wall / {cli} wall: per run {', '.join(f'{x:.2f}' for x in per_run)}")
    for name in ours:
        for other in measured:
            if other.startswith("megatron"):
                per_run = [r[other]["wall_s"] / r[name]["wall_s"] for r in results["runs"]]
                print(f"ratio {other} wall / {name} wall: per run "
                      f"{', '.join(f'{x:.2f}' for x in per_run)}")
    if not args.skip_tokenize_step:
        step = tokenize_step(args)
        for backend, rate in step.items():
            print(f"tokenize step alone ({args.input}), {backend}: {rate / 1e6:.2f} M tokens/s")
        results["tokenize_step_tokens_per_s"] = step
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(m["identical"] for _, _, m in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
