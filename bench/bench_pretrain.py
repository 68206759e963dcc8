#!/usr/bin/env python3
"""Pretraining benchmark: our real CLI path vs Megatron-LM's own tools, on one JSONL file, in one run.

    .venv/bin/python bench/bench_pretrain.py --input /tmp/corpus/corpus_200mb.jsonl \\
        [--tokenizer /tmp/tok/llama3] [--megatron-tree /tmp/megatron --megatron-python /tmp/venv-mega/bin/python] \\
        [--runs 1] [--shard-size 256MB]

Measured for each tool: wall time, tokens/s, tokens per CPU-second (user+sys of the whole process tree)
and peak RSS (largest single process, and summed over the tree, sampled every 0.2 s). Ours is
``python -m nemotron_assets materialize`` end to end: a fresh Dagster instance (sqlite), the source split
(row count + sha256 of the input), tokenizing, the atomic commit and blend.json. Then the tokenize step
alone: the chosen backend and the hf-tokenizers fall-back on the texts in memory. With a Megatron-LM tree,
``tools/preprocess_data.py --workers 2`` and ``tools/preprocess_data_fast.py --use-gigatoken`` run on the
same file and tokenizer, and the outputs are compared byte for byte (concatenated shards vs their file).
Ratios > 1 mean we are faster. The machine is noisy: compare ratios from the same run, not across runs.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def tree_rss_kb(root: int) -> tuple[int, int]:
    """(largest single RSS, summed RSS) of a process and its descendants, in kB."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat[stat.rfind(")") + 2:].split()[1])
            except OSError:
                continue
    tree, todo = {root}, [root]
    while todo:
        pid = todo.pop()
        for child, parent in parents.items():
            if parent == pid and child not in tree:
                tree.add(child)
                todo.append(child)
    sizes = []
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    sizes.append(int(line.split()[1]))
        except OSError:
            continue
    return (max(sizes) if sizes else 0), sum(sizes)


def measure(cmd: list[str], env: dict, cwd: Path) -> dict:
    """Run a command; wall seconds, CPU seconds of the tree, peak RSS; raise if it fails."""
    before = os.times()
    started = time.monotonic()
    process = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = {"single": 0, "sum": 0}

    def sample() -> None:
        while process.poll() is None:
            single, total = tree_rss_kb(process.pid)
            peak["single"], peak["sum"] = max(peak["single"], single), max(peak["sum"], total)
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate()
    wall = time.monotonic() - started
    sampler.join()
    after = os.times()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({process.returncode}):\n{output[-4000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak["single"] / 1024, "peak_tree_rss_mb": peak["sum"] / 1024,
            "output": output}


def run_ours(args, work: Path, tokens_out: dict) -> dict:
    blends, home, data = work / "blends", work / "dagster_home", work / "data"
    for folder in (blends, home):
        folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    (blends / "bench.yaml").write_text(json.dumps({
        "tokenizer_model": args.tokenizer, "shard_size": args.shard_size,
        "datasets": [{"name": "corpus", "path": str(Path(args.input).resolve())}]}))
    env = dict(os.environ, NEMOTRON_BLENDS_DIR=str(blends), DAGSTER_HOME=str(home), NEMOTRON_DATA_ROOT=str(data))
    result = measure([sys.executable, "-m", "nemotron_assets", "materialize", "bench", "--log-level", "WARNING"],
                     env, REPO)
    receipts = sorted((data / "bench" / "pretrain" / "corpus").glob("shard_*.json"))
    tokens_out["tokens"] = sum(json.loads(r.read_text())["stats"]["tokens"] for r in receipts)
    tokens_out["prefixes"] = [str(r)[: -len(".json")] for r in receipts]
    tokens_out["backend"] = json.loads(receipts[0].read_text())["stats"]["backend"]
    return result


def run_megatron(args, work: Path, fast: bool) -> tuple[dict, str]:
    prefix = work / ("megatron_fast" if fast else "megatron_classic")
    for ext in ("_text_document.bin", "_text_document.idx"):
        Path(f"{prefix}{ext}").unlink(missing_ok=True)
    tool = "tools/preprocess_data_fast.py" if fast else "tools/preprocess_data.py"
    cmd = [args.megatron_python, tool, "--input", str(Path(args.input).resolve()), "--output-prefix", str(prefix),
           "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", args.tokenizer,
           "--json-keys", "text", "--append-eod"]
    cmd += ["--use-gigatoken"] if fast else ["--workers", "2"]
    shim = args.megatron_shim
    env = dict(os.environ, PYTHONPATH=f"{shim}:{args.megatron_tree}" if shim else args.megatron_tree,
               PYTHONWARNINGS="ignore")
    return measure(cmd, env, Path(args.megatron_tree)), f"{prefix}_text_document"


def same_as_megatron(our_prefixes: list[str], megatron_prefix: str) -> bool:
    """Our shards, concatenated, are byte-identical to Megatron's single dataset (bin; idx when 1 shard)."""
    ours = b"".join(Path(f"{p}.bin").read_bytes() for p in our_prefixes)
    if ours != Path(f"{megatron_prefix}.bin").read_bytes():
        return False
    if len(our_prefixes) == 1:
        return Path(f"{our_prefixes[0]}.idx").read_bytes() == Path(f"{megatron_prefix}.idx").read_bytes()
    return True


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="a JSONL file with a 'text' field")
    parser.add_argument("--tokenizer", default="llama3", help="tokenizer folder (or 'llama3', the bundled one)")
    parser.add_argument("--shard-size", default="256MB")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--megatron-tree", default=None, help="Megatron-LM source tree (enables the baselines)")
    parser.add_argument("--megatron-python", default="/tmp/venv-mega/bin/python")
    parser.add_argument("--megatron-shim", default="/tmp/shim312", help="PYTHONPATH shim for typing.override")
    parser.add_argument("--skip-tokenize-step", action="store_true")
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()
    if args.megatron_tree and args.tokenizer == "llama3":
        raise SystemExit("give --tokenizer as a folder Megatron can load too (e.g. /tmp/tok/llama3)")

    work = Path(tempfile.mkdtemp(prefix="nemotron-bench-"))
    rows, results = [], {}
    size = os.path.getsize(args.input)
    for run in range(1, args.runs + 1):
        info: dict = {}
        ours = run_ours(args, work, info)
        tokens = info["tokens"]
        rows.append(("nemotron_assets materialize", run, ours, tokens))
        results.setdefault("ours", []).append(ours["wall_s"])
        if args.megatron_tree:
            for fast in (True, False):
                measured, prefix = run_megatron(args, work, fast)
                name = ("megatron preprocess_data_fast --use-gigatoken" if fast
                        else "megatron preprocess_data --workers 2")
                rows.append((name, run, measured, tokens))
                results.setdefault("fast" if fast else "classic", []).append(measured["wall_s"])
                identical = same_as_megatron(info["prefixes"], prefix)
                print(f"run {run}: our shards vs {name}: {'byte-identical' if identical else 'DIFFERENT'}")
                results.setdefault("identical", []).append(identical)
    print(f"\ninput {args.input}: {size / 1e6:.1f} MB, {tokens:,} tokens; our backend: {info['backend']}\n")
    print(f"{'tool':48} {'run':>3} {'wall s':>7} {'M tok/s':>8} {'M tok/CPU-s':>11} "
          f"{'peak RSS MB':>11} {'tree RSS MB':>11}")
    for name, run, m, tokens in rows:
        print(f"{name:48} {run:>3} {m['wall_s']:>7.2f} {tokens / m['wall_s'] / 1e6:>8.2f} "
              f"{tokens / m['cpu_s'] / 1e6:>11.2f} {m['peak_rss_mb']:>11.0f} {m['peak_tree_rss_mb']:>11.0f}")
    best = min(results["ours"])
    for other in ("fast", "classic"):
        if other in results:
            print(f"ratio {other} wall / ours wall (best of {args.runs}): {min(results[other]) / best:.2f}")
    if not args.skip_tokenize_step:
        step = tokenize_step(args)
        for backend, rate in step.items():
            print(f"tokenize step alone, {backend}: {rate / 1e6:.2f} M tokens/s")
        results["tokenize_step_tokens_per_s"] = step
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(results.get("identical", [True])) else 1


if __name__ == "__main__":
    sys.exit(main())
