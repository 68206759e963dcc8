#!/usr/bin/env python3
"""Post-training at scale: the whole ``python -m nemotron_assets materialize`` of a large Harmony blend, against
reading + parsing its input with orjson, in one invocation.

    .venv/bin/python bench/bench_posttrain.py [--rows 600000] [--row-bytes 2000] [--build-processes N] [--runs 1]
        [--curation none|all] [--cache /tmp/nemotron-bench-posttrain] [--compare-tree /path/to/another/checkout]

The blend (generated once per parameters into ``--cache``, deterministically: the same files every time) holds
``--rows`` rows, half Nemotron-Math-v2 (split ``medium``; a quarter of them tool-integrated, with python calls)
and half Nemotron-Agentic (split ``tool_calling``: an empty system turn, 1-3 tool calls with object arguments,
tool results as text or objects), shaped like the real rows (``nemotron_assets_tests/normalize/fixtures/``) and
about ``--row-bytes`` each; every row is unique. ``on_error: skip``. ``--curation all`` adds ``curation: {pools:
all}`` (every pool, its views and the behavior report); the default asks for none, so the build is normalizing and
dedup. A ``--compare-tree`` runs the same blend with the same options; with ``--compare-predates-curation`` (a tree
older than curation-on-request, which builds every pool whatever the blend says) it gets the blend without the
``curation:`` section and no options.

Measured for each run of the CLI (``cli_runs.py``: a fresh temp ``DAGSTER_HOME`` and ``NEMOTRON_DATA_ROOT``, the
process tree sampled from ``/proc``): wall time, CPU seconds of the whole tree and its utilisation, each step's
wall time and peak RSS (from the CLI's ``run <id> <asset> ...: ok in N s`` lines, timed as they arrive), and the
peak RSS of the largest single process. The baseline, in the same invocation: ``orjson.loads`` of every line of
every input file (the lines are read first, untimed). Printed: the ratio CLI wall / baseline against the target
(issue 28: 12x without curation, 20x with every pool and view).
``--compare-tree`` also runs another checkout's CLI (e.g. ``git archive HEAD`` of the code before a change) on
the same blend in the same invocation.
"""

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq
from cli_runs import CliRun, print_run, run_cli

REPO = Path(__file__).resolve().parent.parent
BLEND = "posttrain_bench"
TARGET_RATIO = {"none": 12.0, "all": 20.0}  # by --curation
FILES_PER_DATASET = 4

# --- the generated blend -----------------------------------------------------------------------------------------

WORDS = ("the of and to a in is that for it as with was on be by this are or from at which an have not but we "
         "they all can has more one will their there been if would so no what up out its when about into than them "
         "some could time only other new these two may then do first any like now my such make over our even most "
         "me state after also made many did must before back see through way where get much go well your know "
         "should down work year because come people just say each those take day good how long little use").split()
MATH_WORDS = ("integer prime modulo remainder sum product sequence polynomial root coefficient divisor factor "
              "triangle circle radius angle area volume probability expected value function limit derivative "
              "integral series matrix determinant vector inequality equation solution parity residue").split()
TOOL_NAMES = ("get_weather", "search_flights", "book_hotel", "convert_currency", "lookup_order", "send_email",
              "create_event", "get_stock_price", "translate_text", "find_restaurant", "track_package", "get_news")
SOLVE = "Solve the following math problem. Make sure to put the answer (and only answer) inside \\boxed{}.\n\n"
PYTHON_TOOL = {"type": "function", "function": {
    "name": "stateful_python_code_exec",
    "description": "Call this function to execute Python code in a stateful Jupyter notebook environment. Python will "
                   "respond with the output of the execution or time out after 120.0 seconds.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "Code to execute"}},
                   "required": ["code"]}}}


def _tool_schema(name: str, rng: random.Random) -> dict:
    keys = rng.sample(["city", "date", "query", "amount", "currency", "order_id", "email", "symbol", "language",
                       "limit", "unit"], rng.randint(1, 3))
    properties = {key: {"type": "integer" if key in ("amount", "limit") else "string",
                        "description": f"The {key.replace('_', ' ')}."} for key in keys}
    return {"type": "function", "function": {"name": name, "description": f"{name.replace('_', ' ').capitalize()}.",
                                             "parameters": {"type": "object", "properties": properties,
                                                            "required": keys[:1]}}}


TOOLS = {name: _tool_schema(name, random.Random(name)) for name in TOOL_NAMES}


def _sentence(rng: random.Random, words: tuple | list, n: int) -> str:
    return " ".join(rng.choices(words, k=n)).capitalize() + "."


def _text(rng: random.Random, chars: int, words=WORDS) -> str:
    parts, size = [], 0
    while size < chars:
        parts.append(_sentence(rng, words, rng.randint(6, 16)))
        size += len(parts[-1]) + 1
    return " ".join(parts)


_MATH_FIXED, _AGENTIC_FIXED = 960, 1860  # bytes of a row besides its padded texts, on average


def math_row(i: int, rng: random.Random, row_bytes: int) -> dict:
    """A Nemotron-Math-v2 row (split ``medium``): problem, answer, reasoning; one in four calls the python tool."""
    base, modulus = rng.randint(2, 97), rng.randint(3, 211)
    answer = str(rng.randint(0, 10_000))
    problem = (f"Find the remainder when ${base}^{{{i + 10}}}$ is divided by {modulus}. "
               + _text(rng, rng.randint(60, 200), MATH_WORDS + list(WORDS[:40])))
    reasoning = _text(rng, max(200, row_bytes - _MATH_FIXED - 2 * len(problem) + rng.randint(-300, 300)))
    messages = [{"role": "user", "content": SOLVE + problem}]
    tools = []
    if i % 4 == 3:
        tools = [PYTHON_TOOL]
        code = f"print(pow({base}, {i + 10}, {modulus}))"
        messages += [
            {"role": "assistant", "content": "", "reasoning_content": reasoning[: len(reasoning) // 2],
             "tool_calls": [{"id": f"call_{i}", "type": "function",
                             "function": {"name": "stateful_python_code_exec",
                                          "arguments": json.dumps({"code": code})}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": answer},
            {"role": "assistant", "content": f"\\boxed{{{answer}}}",
             "reasoning_content": reasoning[len(reasoning) // 2:]},
        ]
    else:
        messages.append({"role": "assistant", "content": f"\\boxed{{{answer}}}", "reasoning_content": reasoning})
    settings = [f"reason_{effort}_{tool}" for effort in ("low", "medium", "high") for tool in ("with_tool", "no_tool")]
    metadata = {}
    for setting in rng.sample(settings, rng.randint(1, 4)):
        count = rng.choice((7, 8))
        passed = rng.randint(0, count)
        metadata[setting] = {"count": count, "pass": passed, "accuracy": passed / count}
    return {"uuid": f"{i:08x}-7b3f-4d8e-a6c4-{rng.getrandbits(48):012x}", "problem": problem,
            "expected_answer": answer, "original_expected_answer": answer if i % 5 else None,
            "changed_answer_to_majority": i % 7 == 0, "data_source": rng.choice(("aops", "stackflow")),
            "messages": messages, "metadata": metadata, "license": "cc-by-4.0", "used_in": ["nano_v3"],
            "tools": tools, "url": f"https://artofproblemsolving.com/community/c6h{i}",
            "user_url": f"https://artofproblemsolving.com/community/user/{i % 997}", "user_name": f"user{i % 997}"}


def agentic_row(i: int, rng: random.Random, row_bytes: int) -> dict:
    """A Nemotron-Agentic row (split ``tool_calling``): system "", a user request, 1-3 calls, results, an answer."""
    names = rng.sample(TOOL_NAMES, rng.randint(2, 4))
    called = rng.sample(names, rng.randint(1, min(3, len(names))))
    request = f"Request {i}: " + _text(rng, rng.randint(80, 300))
    parts = [{"type": "text", "text": request[:40]}, {"type": "text", "text": request[40:]}]
    user_content = request if i % 3 else parts
    calls, results = [], []
    for n, name in enumerate(called):
        properties = TOOLS[name]["function"]["parameters"]["properties"]
        arguments = {key: (rng.randint(1, 500) if spec["type"] == "integer" else _sentence(rng, WORDS, 2)[:-1])
                     for key, spec in properties.items()}
        call_id = f"c{i}_{n}"
        calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        result = {"status": "ok", "value": rng.randint(0, 10_000), "note": _sentence(rng, WORDS, 5)}
        results.append({"role": "tool", "tool_call_id": call_id,
                        "content": result if n % 2 == 0 else json.dumps(result)})
    answer = _text(rng, max(120, row_bytes - _AGENTIC_FIXED - len(request) + rng.randint(-200, 200)))
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": user_content},
                {"role": "assistant", "content": None, "reasoning_content": _text(rng, rng.randint(80, 250)),
                 "tool_calls": calls},
                *results,
                {"role": "assistant", "content": answer, "tool_calls": None}]
    return {"uuid": f"5e2a1c9d-{i:04x}-4d8e-a6c4-{rng.getrandbits(48):012x}", "messages": messages,
            "license": "cc-by-4.0", "used_in": ["nano_v3"], "tools": [TOOLS[name] for name in names]}


def generate(folder: Path, rows: int, row_bytes: int) -> list[Path]:
    """The blend's input files (``FILES_PER_DATASET`` per dataset); already there when generated before."""
    done = folder / "generated.json"
    expected = {"rows": rows, "row_bytes": row_bytes, "version": 4}
    if done.exists() and json.loads(done.read_text()) == expected:
        return sorted(folder.glob("*/*.jsonl"))
    shutil.rmtree(folder, ignore_errors=True)
    per_dataset = rows // 2
    for dataset, split, make in (("math_v2", "medium", math_row), ("agentic", "tool_calling", agentic_row)):
        (folder / dataset).mkdir(parents=True)
        per_file = -(-per_dataset // FILES_PER_DATASET)
        for part in range(FILES_PER_DATASET):
            rng = random.Random(f"{dataset}-{part}")
            with (folder / dataset / f"{split}-{part:05d}.jsonl").open("wb") as out:
                for i in range(part * per_file, min(per_dataset, (part + 1) * per_file)):
                    out.write(orjson.dumps(make(i, rng, row_bytes)) + b"\n")
    done.write_text(json.dumps(expected))
    return sorted(folder.glob("*/*.jsonl"))


def write_blend(blends: Path, data: Path, curation: str) -> None:
    blends.mkdir(parents=True, exist_ok=True)
    asked = {"curation": {"pools": "all"}} if curation == "all" else {}
    (blends / f"{BLEND}.yaml").write_text(json.dumps({"on_error": "skip", **asked, "datasets": [
        {"name": "math_v2", "path": str(data / "math_v2"), "family": "nemotron_math_v2", "split": "medium"},
        {"name": "agentic", "path": str(data / "agentic"), "family": "nemotron_agentic", "split": "tool_calling"},
    ]}, indent=1))


# --- measuring -----------------------------------------------------------------------------------------------


def parse_lines(files: list[Path]) -> tuple[float, int]:
    """The baseline: ``orjson.loads`` of every line of every file, a file's lines read first and not timed
    (seconds, rows)."""
    seconds, rows = 0.0, 0
    for path in files:
        lines = path.read_bytes().splitlines()
        started = time.monotonic()
        for line in lines:
            orjson.loads(line)
        seconds += time.monotonic() - started
        rows += len(lines)
    return seconds, rows


def read_pools(pools: Path) -> float:
    """Seconds pyarrow takes to read every part of every pool (all columns), the views' input."""
    started = time.monotonic()
    for part in sorted(pools.glob("*/part-*.parquet")):
        pq.read_table(part)
    return time.monotonic() - started


def report(name: str, run: CliRun, baseline_s: float, target: float) -> None:
    print_run(name, run)
    ratio = run.wall_s / baseline_s
    print(f"  ratio wall / orjson.loads: {run.wall_s:.1f} / {baseline_s:.2f} s = {ratio:.1f}x "
          f"(target <= {target:.0f}x: {'met' if ratio <= target else 'NOT met'})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--row-bytes", type=int, default=2000)
    parser.add_argument("--build-processes", type=int, default=None,
                        help="the CLI's --build-processes (default: one per core)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--curation", choices=("none", "all"), default="none",
                        help="the pools the blend asks for: none (default) or all, with their views and report")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "nemotron-bench-posttrain"),
                        help="where the generated input is kept between invocations")
    parser.add_argument("--compare-tree", default=None,
                        help="another checkout whose CLI runs on the same blend in this invocation")
    parser.add_argument("--compare-predates-curation", action="store_true",
                        help="the compare tree is older than curation-on-request: give it the blend without curation")
    parser.add_argument("--keep-outputs", action="store_true", help="keep each run's data root and instance")
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()

    cache = Path(args.cache)
    started = time.monotonic()
    files = generate(cache / "input", args.rows, args.row_bytes)
    generated_s = time.monotonic() - started
    size = sum(p.stat().st_size for p in files)
    write_blend(cache / f"blends-{args.curation}", cache / "input", args.curation)
    write_blend(cache / "blends-unnamed", cache / "input", "none")  # for a tree that predates curation:
    extra = ["--log-level", "WARNING"] + (
        ["--build-processes", str(args.build_processes)] if args.build_processes else [])
    print(f"input: {args.rows:,} rows in {len(files)} files, {size / 1e9:.2f} GB ({size / args.rows:.0f} B/row); "
          f"ready in {generated_s:.1f} s")

    results: dict = {"input_bytes": size, "rows": args.rows, "baseline_s": [], "ours": [], "compare": []}
    trees = [("this checkout", REPO, "ours")]
    if args.compare_tree:
        trees.append((f"compare tree {args.compare_tree}", Path(args.compare_tree).resolve(), "compare"))
    for run in range(1, args.runs + 1):
        baseline_s, parsed = parse_lines(files)
        results["baseline_s"].append(baseline_s)
        print(f"\nrun {run}: orjson.loads of every line (baseline): {baseline_s:.2f} s, {parsed:,} rows, "
              f"{size / baseline_s / 1e6:.0f} MB/s")
        for name, tree, key in trees:
            ours = tree == REPO
            old = not ours and args.compare_predates_curation
            views_against_read = ours and args.curation == "all"
            measured = run_cli(tree, cache / ("blends-unnamed" if old else f"blends-{args.curation}"), BLEND,
                               ["--log-level", "WARNING"] if old else extra, args.keep_outputs or views_against_read)
            report(f"run {run}, {name}", measured, baseline_s, TARGET_RATIO[args.curation])
            if views_against_read:
                read_s = read_pools(measured.data_root / BLEND / "pools")
                views_s = measured.steps["embedding_view"]["run_s"][0]
                print(f"  embedding_view / pyarrow reading every pool it views: {views_s:.1f} / {read_s:.2f} s = "
                      f"{views_s / read_s:.1f}x (target <= 1.5x)")
                if not args.keep_outputs:
                    shutil.rmtree(measured.data_root.parent, ignore_errors=True)
            if args.keep_outputs:
                print(f"  outputs kept in {measured.data_root}")
            results[key].append({"wall_s": measured.wall_s, "cpu_s": measured.cpu_s,
                                 "peak_rss_mb": measured.peak_rss_mb, "steps": measured.steps})
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
