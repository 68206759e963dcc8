#!/usr/bin/env python3
"""Peak memory of one huge document through the real CLI: tokenized in pieces vs tokenized whole.

    .venv/bin/python bench/bench_long_document.py [--mb 50] [--backends auto,hf] [--skip-before]

Builds a JSONL file holding one document of ``--mb`` million characters of real text (the bundled sample
data, blends/sample_data/, concatenated until it is that long), and a variant of it without line breaks
(every ``\\n`` replaced by a space: no cut is possible there, so it shows the whole-document fallback).
Each case runs ``python -m nemotron_assets materialize`` in a fresh process with its own DAGSTER_HOME and
NEMOTRON_DATA_ROOT in a temp folder, started from a small parent process that reports its
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` (the CLI's peak RSS). The paths compared, same process
otherwise:

- ``pieces``: the code as shipped (tokenize/long_documents.py cuts the document where tokenize/cuts.py
  proves it exact);
- ``whole``: ``Cutter.cut_points`` patched to find no cut, so the document is tokenized whole (the
  cross-check of a fast backend still re-encodes only a bounded sample);
- ``before``: ``LONG_DOCUMENT_CHARS`` patched to infinity: whole-document tokenization and a cross-check
  that re-encodes the whole document with hf-tokenizers, i.e. the code before long documents were cut.

Every run of a document must write the same ``.bin``/``.idx`` bytes (the ids are identical whatever the
path); the script exits 1 otherwise. Ratios are against ``before`` in the same invocation (a noisy 2-core
machine: compare ratios from one run, not numbers across runs). ``before`` needs ~7 GB for 50 M characters.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import zstandard

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "blends" / "sample_data"

# The parent process of one CLI run: it waits for the CLI and prints the CLI's peak RSS in kB.
MEASURE = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)")
# What each path changes before starting the CLI (see the module docstring).
PATCHES = {
    "pieces": "",
    "whole": ("from nemotron_assets.tokenize.cuts import Cutter; "
              "Cutter.cut_points = lambda self, text, piece_chars=0: []; "),
    "before": ("import nemotron_assets.tokenize.long_documents as long_documents; "
               "long_documents.LONG_DOCUMENT_CHARS = float('inf'); "),
}


def sample_text() -> str:
    """Every document of the sample blend, joined by blank lines."""
    texts: list[str] = []
    for path in sorted((SAMPLE / "wiki").glob("*.jsonl")) + [SAMPLE / "test.jsonl"]:
        texts += [orjson.loads(line)["text"] for line in path.read_bytes().splitlines()]
    texts += [orjson.loads(line)["content"] for line in gzip.decompress((SAMPLE / "reference.jsonl.gz")
                                                                        .read_bytes()).splitlines()]
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO((SAMPLE / "valid.jsonl.zst").read_bytes())) as raw:
        texts += [orjson.loads(line)["text"] for line in raw.read().splitlines()]
    texts += pq.read_table(SAMPLE / "code.parquet", columns=["text"]).column(0).to_pylist()
    return "\n\n".join(texts)


def write_document(path: Path, chars: int, line_breaks: bool) -> int:
    base = sample_text()
    text = (base * (chars // len(base) + 1))[:chars]
    if not line_breaks:
        text = text.replace("\n", " ")
    path.write_bytes(orjson.dumps({"text": text}) + b"\n")
    return path.stat().st_size


def run_cli(work: Path, name: str, document: Path, path: str, backend: str) -> dict:
    """One materialize run in a fresh instance: peak RSS, wall time, the shard's sha256s and receipt stats."""
    case = work / name
    shutil.rmtree(case, ignore_errors=True)
    blends, home, data = case / "blends", case / "dagster_home", case / "data"
    blends.mkdir(parents=True)
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    (blends / "longdoc.yaml").write_text(json.dumps({"tokenizer_model": "llama3",
                                                     "datasets": [{"name": "doc", "path": str(document)}]}))
    env = dict(os.environ, NEMOTRON_BLENDS_DIR=str(blends), DAGSTER_HOME=str(home), NEMOTRON_DATA_ROOT=str(data),
               HF_HUB_OFFLINE="1")
    cli = (f"import sys; {PATCHES[path]}from nemotron_assets.cli import main; "
           f"sys.exit(main(['materialize', 'longdoc', '--tokenizer-backend', '{backend}', '--log-level', 'WARNING']))")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-c", cli], env=env, cwd=REPO,
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    peak_kb, code = (int(v) for v in done.stdout.split()[-2:])
    if code != 0:
        raise SystemExit(f"{name} failed ({code}):\n{done.stderr[-4000:]}")
    prefix = data / "longdoc" / "pretrain" / "doc" / "shard_00000"
    from nemotron_assets.core.records import receipt_path  # where the product keeps a receipt, wherever that is

    # a checkout older than the receipts' folder (--before) wrote the receipt beside the shard
    receipt = Path(receipt_path(str(prefix)))
    stats = json.loads((receipt if receipt.exists() else Path(f"{prefix}.json")).read_text())["stats"]
    digest = hashlib.sha256(Path(f"{prefix}.bin").read_bytes() + Path(f"{prefix}.idx").read_bytes()).hexdigest()
    whole_logged = [line for line in done.stderr.splitlines() if "tokenized whole" in line]
    shutil.rmtree(data)  # keep the disk free between cases
    return {"peak_mb": peak_kb / 1024, "wall_s": wall, "sha256": digest, "tokens": stats["tokens"],
            "backend": stats["backend"], "long_documents": stats.get("long_documents"), "logged": whole_logged}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=50.0, help="document size in millions of characters")
    parser.add_argument("--backends", default="auto,hf", help="tokenizer backends to run (auto = fastokens)")
    parser.add_argument("--skip-before", action="store_true", help="skip the ~7 GB 'before' baseline")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nemotron-longdoc-"))
    try:
        chars = int(args.mb * 1e6)
        documents = {"lines": work / "lines.jsonl", "no_lines": work / "no_lines.jsonl"}
        for name, path in documents.items():
            size = write_document(path, chars, line_breaks=name == "lines")
            print(f"{name}: one document of {chars:,} characters, {size / 1e6:.1f} MB of JSONL")
        cases = []
        for backend in args.backends.split(","):
            paths = ["pieces", "whole"] + ([] if args.skip_before else ["before"])
            cases += [("lines", backend, path) for path in paths] + [("no_lines", backend, "pieces")]
        results = {}
        for document, backend, path in cases:
            name = f"{document}-{backend}-{path}"
            results[name] = result = run_cli(work, name, documents[document], path, backend)
            print(f"{name:28} peak RSS {result['peak_mb']:>7.0f} MB  wall {result['wall_s']:>6.1f} s  "
                  f"{result['tokens']:,} tokens  {result['backend']}  long_documents={result['long_documents']}")
            for line in result["logged"]:
                print(f"{'':28} log: {line}")
        same = True
        for document in documents:
            digests = {n: r["sha256"] for n, r in results.items() if n.startswith(document + "-")}
            identical = len(set(digests.values())) == 1
            same &= identical
            print(f"{document}: .bin/.idx of all {len(digests)} runs {'identical' if identical else 'DIFFER'}")
        for backend in args.backends.split(","):
            before = results.get(f"lines-{backend}-before")
            if before:
                for path in ("pieces", "whole"):
                    ratio = before["peak_mb"] / results[f"lines-{backend}-{path}"]["peak_mb"]
                    print(f"{backend}: peak RSS before / {path} = {ratio:.2f}")
        return 0 if same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
