#!/usr/bin/env python3
"""NLL scoring benchmark: tokens scored per second on CPU, ours vs a naive one-row-at-a-time loop, same run.

    .venv/bin/python bench/bench_nll.py [--corpus /tmp/corpus/corpus_20mb.jsonl] [--rows 64] [--runs 3]
                                        [--dtypes fp32,bf16]

The model is a small, randomly initialized Llama with the Llama-3 tokenizer (default: hidden 256, 4 layers, the
128,256-token vocabulary; change it with ``--hidden``/``--layers``/...), saved to a temp folder with a Llama-3-style
chat template that marks assistant replies. Conversations are cut deterministically from
``/tmp/corpus/corpus_20mb.jsonl``, the 20 MB subset of the pretraining bench corpus (see bench/README.md): the user
turn is a paragraph, the reply the paragraphs after it (``--max-chars`` characters at most), one conversation in four
has a second turn. They are rendered once by the product path (``scoring.rendering.ModelRenderer``, i.e. the SFT
renderer), untimed.

Timed, alternating, ``--runs`` times each, best run reported:

- *naive*: for each row, ``model(ids).logits``, ``log_softmax`` over the whole vocabulary at every position,
  gather the trained targets, sum -- what a straightforward script does;
- *ours*: ``NllScorer.score`` (length-sorted batches, output layer and cross-entropy only at trained positions).

Both run under ``torch.inference_mode()`` on the same model object with the same torch threads (all usable cores).

Each precision of ``--dtypes`` is measured on its own, like with like: ``fp32`` (the CPU default) loads the model in
fp32 and runs both loops on it; ``bf16`` (the opt-in ``scoring.dtype: bf16``, for CPUs with AMX / AVX-512 BF16) loads
it in bf16 and runs both loops on that model (the naive loop takes its log-softmax in fp32, as ours its logsumexp).
In fp32 the script checks that both give the same nll_sum per row (relative 1e-4) and exits 1 otherwise; in bf16 it
reports how far each is from the fp32 scores (bf16 rounding, not a bug).
"""

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TEMPLATE = """{{- bos_token }}
{%- for message in messages %}
{%- if message.role == 'assistant' %}
<|start_header_id|>assistant<|end_header_id|>

{% generation %}{{ message.content }}<|eot_id|>{% endgeneration %}
{%- else %}
<|start_header_id|>{{ message.role }}<|end_header_id|>

{{ message.content }}<|eot_id|>
{%- endif %}
{%- endfor %}"""


def conversations(corpus: Path, rows: int, max_chars: int) -> list[tuple[list[dict], None]]:
    """Deterministic chat-like conversations from documents: user = a paragraph, assistant = what follows."""
    out = []
    with corpus.open() as lines:
        for n, line in enumerate(lines):
            paragraphs = [p.strip() for p in json.loads(line)["text"].split("\n\n") if p.strip()]
            if len(paragraphs) < 3:
                continue
            turns = 2 if n % 4 == 0 and len(paragraphs) >= 6 else 1
            messages, at = [], 0
            for _ in range(turns):
                if at + 1 >= len(paragraphs):
                    break
                messages.append({"role": "user", "content": paragraphs[at][:800]})
                reply, at = [], at + 1
                while at < len(paragraphs) and sum(map(len, reply)) < max_chars // turns:
                    reply.append(paragraphs[at])
                    at += 1
                messages.append({"role": "assistant", "content": "\n\n".join(reply)[: max_chars // turns]})
            out.append((messages, None))
            if len(out) == rows:
                break
    return out


def build_model(folder: Path, args) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from nemotron_assets.tokenize.loading import locate_tokenizer

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128_256, hidden_size=args.hidden, intermediate_size=args.intermediate,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, max_position_embeddings=8192, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(locate_tokenizer("llama3").tokenizer_json),
                                        bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)


def naive_scores(model, samples) -> list[float]:
    """One row at a time, full logits, full log-softmax."""
    import torch

    out = []
    with torch.inference_mode():
        for sample in samples:
            ids = torch.from_numpy(sample.ids)[None]
            log_probs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
            picked = log_probs.gather(1, ids[0, 1:, None])[:, 0]
            out.append(float(-(picked * torch.from_numpy(sample.trained[1:]).float()).sum()))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=Path("/tmp/corpus/corpus_20mb.jsonl"))
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--max-chars", type=int, default=2400, help="reply characters per conversation")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--intermediate", type=int, default=688)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dtypes", default="fp32,bf16", help="precisions to measure, each like with like")
    args = parser.parse_args()

    import numpy as np

    from nemotron_assets.defs.scoring.device import choose_device
    from nemotron_assets.defs.scoring.model_files import locate_model
    from nemotron_assets.defs.scoring.nll import NllScorer
    from nemotron_assets.defs.scoring.rendering import ModelRenderer
    from nemotron_assets.defs.scoring.samples import scoring_sample

    if not args.corpus.is_file():
        print(f"no corpus at {args.corpus}: build the bench corpus first (bench/README.md)", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="nemotron-bench-nll-")) / "model"
    build_model(folder, args)
    files = locate_model(str(folder))
    rendered = ModelRenderer(files)(conversations(args.corpus, args.rows, args.max_chars))
    samples = [scoring_sample(r.ids, r.trained, args.max_tokens) for r in rendered if r.dropped is None]
    tokens = sum(len(s) for s in samples)
    scored = sum(s.tokens_scored for s in samples)
    print(f"rows: {len(samples)} ({len(rendered) - len(samples)} dropped), {tokens:,} tokens, {scored:,} scored "
          f"({scored / tokens:.0%} trained), {sum(s.truncated for s in samples)} truncated")
    fp32_scores, failed = None, False
    for dtype in args.dtypes.split(","):
        device = choose_device("cpu", dtype=dtype)
        scorer = NllScorer.load(files, device, args.batch_tokens)
        print(f"\n{dtype}: model: Llama, hidden {args.hidden}, {args.layers} layers, vocab 128,256, "
              f"{sum(p.numel() for p in scorer.model.parameters()) / 1e6:.1f} M parameters; {device.describe()}")
        naive, ours, ratio = compare(scorer, samples, scored, args.runs)
        if dtype == "fp32":
            fp32_scores = ours.nll_sum
            difference = relative_difference(ours.nll_sum, naive)
            failed |= difference >= 1e-4
            print(f"fp32 ratio ours / naive: {ratio:.2f}x (best of {args.runs}); max relative nll_sum difference "
                  f"{difference:.1e}")
        else:
            against = f"; from fp32 ours: ours {relative_difference(ours.nll_sum, fp32_scores):.1e}, naive " \
                      f"{relative_difference(np.array(naive), fp32_scores):.1e}" if fp32_scores is not None else ""
            print(f"{dtype} ratio ours / naive: {ratio:.2f}x (best of {args.runs}); max relative nll_sum "
                  f"difference ours vs naive {relative_difference(ours.nll_sum, naive):.1e}{against}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    return 1 if failed else 0


def relative_difference(got, expected) -> float:
    import numpy as np

    expected = np.asarray(expected, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(got) - expected) / np.maximum(np.abs(expected), 1e-9)))


def compare(scorer, samples, scored: int, runs: int):
    """Naive and ours, alternating, ``runs`` times each on the scorer's model; the last results and the best ratio."""
    naive_s, ours_s = [], []
    naive, ours = None, None
    for _ in range(runs):
        started = time.perf_counter()
        naive = naive_scores(scorer.model, samples)
        naive_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        ours = scorer.score(samples)
        ours_s.append(time.perf_counter() - started)
    best_naive, best_ours = min(naive_s), min(ours_s)
    print(f"naive one row at a time: {scored / best_naive:,.0f} tokens scored/s (best {best_naive:.2f} s; runs "
          f"{', '.join(f'{s:.2f}' for s in naive_s)})")
    print(f"ours (NllScorer):        {scored / best_ours:,.0f} tokens scored/s (best {best_ours:.2f} s; runs "
          f"{', '.join(f'{s:.2f}' for s in ours_s)}); {ours.batches} batches, "
          f"{1 - ours.tokens / ours.token_slots:.1%} padding")
    return naive, ours, best_naive / best_ours


if __name__ == "__main__":
    sys.exit(main())
