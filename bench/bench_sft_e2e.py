#!/usr/bin/env python3
"""Chat SFT end to end through the real CLI: conversations -> packed Megatron-Bridge Parquet, against transformers'
``apply_chat_template`` on the same conversations, in one invocation.

    .venv/bin/python bench/bench_sft_e2e.py [--input /tmp/corpus/corpus_200mb.jsonl] [--max-conversations N]
        [--pack-size 4096] [--packing first_fit_shuffle] [--build-processes N] [--template llama3|harmony]
        [--runs N] [--before DIR]

The whole command is what is judged (issue 28): ``python -m nemotron_assets materialize`` from its start to its end,
against the baseline measured in the same run, split into start-up, each Dagster run and each step's work
(`cli_runs.print_run`). ``--before DIR`` runs an older checkout's CLI on the same blend too, alternating with ours
``--runs`` times.

By default every conversation the corpus gives (142,286 from the 200 MB corpus, the measure the speed targets are
judged on); ``--max-conversations 30000`` is a quicker run, on which the fixed costs (the tokenizer parse, five
Dagster runs) weigh more: bench/README.md has both.

The conversations are `bench_sft_render.conversations` (cut from the real-text corpus, ``bash
bench/baselines/make_corpus.sh``: 1 to 3 user turns, every 5th with a system message, every 4th with reasoning),
written once as ``openai_chat`` rows into a blend with an ``sft:`` section: Llama-3 and the tagged Llama-3-style
template (``nemotron_assets_tests/chat/fixtures/llama3_tagged.jinja``), ``pack_size`` positions, Parquet output.

Ours: one ``python -m nemotron_assets materialize`` in a fresh instance (`cli_runs.run_cli`). The SFT part is the
four steps ``sft_samples`` (render, tokenize, mask), ``sft_plan``, ``sft_packed`` (pack, write) and ``sft_manifest``:
their wall time is from the end of the step before them to the end of ``sft_manifest`` (worker start-up and
Dagster's runs included); the tokens are those of every rendered sample (the samples files' ``length``). Peak RSS:
the largest single process during those steps. The steps before (source split, normalization, dedup, pools, views)
are shown but not counted.

Baseline: `bench_sft_render.run_transformers` in a fresh process: ``apply_chat_template(..., tokenize=True,
return_dict=True, return_assistant_tokens_mask=True)`` on the same samples, only those calls timed. Identical ids
and masks are checked by ``bench_sft_render.py`` and the parity tests; this script measures speed.
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
from bench_sft_render import TEMPLATE, conversations, in_child, run_openai_harmony, run_transformers
from cli_runs import print_run, run_cli

REPO = Path(__file__).resolve().parent.parent
BLEND = "sft_bench"
SFT_STEPS = ("sft_samples", "sft_plan", "sft_packed", "sft_manifest")


def write_input(folder: Path, args: argparse.Namespace) -> int:
    """The conversations as ``openai_chat`` rows, and the blend; returns how many conversations."""
    folder.mkdir(parents=True, exist_ok=True)
    count = 0
    with (folder / "chat.jsonl").open("w", encoding="utf-8") as out:
        for messages, _ in conversations(args.input, args.max_conversations, 1):
            out.write(json.dumps({"uuid": f"bench-{count}", "messages": messages}, ensure_ascii=False) + "\n")
            count += 1
    template = "  chat_template: harmony\n" if args.template == "harmony" else (
        f"  chat_template: {TEMPLATE}\n  tokenizer_model: llama3\n")
    (folder / f"{BLEND}.yaml").write_text(
        "on_error: skip\n"
        "datasets:\n"
        f"  - {{name: chat, path: {folder / 'chat.jsonl'}, family: openai_chat}}\n"
        "sft:\n"
        f"{template}"
        f"  pack_size: {args.pack_size}\n"
        f"  packing: {args.packing}\n",
        encoding="utf-8")
    return count


def sft_part(steps: dict[str, dict]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of the SFT steps (the module docstring)."""
    wall = sum(steps[step]["wall_s"] for step in SFT_STEPS if step in steps)
    peak = max((steps[step]["peak_rss_mb"] for step in SFT_STEPS if step in steps), default=0.0)
    return wall, peak


def rendered_tokens(data_root: Path) -> tuple[int, int]:
    """(samples, tokens) of every samples file the run wrote."""
    samples = tokens = 0
    for path in (data_root / BLEND / "sft" / "samples").rglob("shard_*.arrow"):
        lengths = pa.ipc.open_file(path).read_all().column("length").to_pylist()
        samples, tokens = samples + len(lengths), tokens + sum(lengths)
    return samples, tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, default=Path("/tmp/corpus/corpus_200mb.jsonl"))
    parser.add_argument("--max-conversations", type=int, default=None,
                        help="the first N conversations (default: all of them)")
    parser.add_argument("--pack-size", type=int, default=4096)
    parser.add_argument("--packing", default="first_fit_shuffle",
                        choices=("first_fit_shuffle", "first_fit_decreasing", "concatenative"))
    parser.add_argument("--runs", type=int, default=1, help="times each side runs, alternating")
    parser.add_argument("--before", type=Path, default=None, help="an older checkout, run the same way")
    parser.add_argument("--build-processes", type=int, default=None,
                        help="the CLI's --build-processes (default: one per core)")
    parser.add_argument("--template", choices=("llama3", "harmony"), default="llama3",
                        help="llama3: Llama-3 + the tagged template, against transformers; harmony: Harmony + "
                             "o200k_harmony, against openai-harmony's render_conversation_for_training")
    args = parser.parse_args()
    args.repeat, args.batch = 1, 1000  # what bench_sft_render's baseline reads

    work = Path(tempfile.mkdtemp(prefix="nemotron-bench-sft-e2e-"))
    try:
        count = write_input(work, args)
        rendering = "Harmony + o200k_harmony" if args.template == "harmony" else f"Llama-3 + {TEMPLATE.name}"
        print(f"{count:,} conversations from {args.input}; {rendering}, pack_size {args.pack_size}")
        extra = ["--log-level", "WARNING"] + (
            ["--build-processes", str(args.build_processes)] if args.build_processes else [])
        name = "openai-harmony render_conversation_for_training" if args.template == "harmony" else \
            "transformers apply_chat_template"
        trees = [("ours", REPO)] + ([("before", args.before.resolve())] if args.before else [])
        for attempt in range(1, args.runs + 1):
            baseline = in_child(run_openai_harmony if args.template == "harmony" else run_transformers, args)
            print(f"\nrun {attempt}: {name} (calls only): {baseline['tokens']:,} tokens in "
                  f"{baseline['seconds']:.2f} s = {baseline['tokens'] / baseline['seconds'] / 1e6:.2f} M tokens/s")
            for label, tree in trees:
                run = run_cli(tree, work, BLEND, extra, keep=True)
                print_run(f"run {attempt}: {label} ({tree}): python -m nemotron_assets materialize", run)
                samples, tokens = rendered_tokens(run.data_root)
                shutil.rmtree(run.data_root.parent, ignore_errors=True)
                wall, peak = sft_part(run.steps)
                print(f"  SFT steps ({', '.join(SFT_STEPS)}): {samples:,} samples, {tokens:,} tokens in {wall:.2f} s; "
                      f"peak RSS {peak:.0f} MB (largest process)")
                print(f"  same samples as the baseline: {'yes' if tokens == baseline['tokens'] else 'NO'}")
                print(f"  ratio {label}, the whole command / {name.split()[0]}: {baseline['seconds']:.2f} / "
                      f"{run.wall_s:.2f} s = {baseline['seconds'] / run.wall_s:.2f}x; "
                      f"{tokens / run.wall_s / 1e6:.2f} M tokens/s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
