#!/usr/bin/env python3
"""Measure the "physical limit" of JSONL -> token ids on this machine.

Stages, each timed separately on the same corpus (texts already in memory
where stated; nothing is written to disk):

  json_stdlib   json.loads of every line (what Megatron's workers call)
  json_orjson   orjson.loads of every line
  encode_batch  tokenizers.Tokenizer.encode_batch(texts) on in-memory texts,
                rayon pool of --threads threads, plus pulling .ids out
  encode_batch_fast  same with encode_batch_fast (no offsets), if available
  procs         --threads worker processes (fork, texts inherited, no IPC of
                ids), each calling Tokenizer.encode(text) one document at a
                time: the process-parallel ceiling Megatron's pool could reach
  gigatoken_batch  (if the gigatoken package is installed) gigatoken's Rust
                BPE, encode_batch on the in-memory texts, its own thread pool
  gigatoken_files  gigatoken encode_files(JsonlFileSource): reads + parses the
                JSONL and tokenizes in Rust (end to end minus writing .bin/.idx);
                the engine of Megatron-LM HEAD's tools/preprocess_data_fast.py.
                Fresh Tokenizer per repetition (its encode cache starts cold);
                gigatoken_files_warm: second call on the same instance
  hf_call       (--hf-call) transformers AutoTokenizer(text).input_ids, one
                document at a time, single process: the per-document call
                Megatron's HuggingFaceTokenizer wrapper makes

Token counts follow Megatron's HuggingFaceTokenizer semantics
(add_special_tokens=True, i.e. include the post-processor's BOS/CLS/SEP if the
tokenizer.json defines one) and add one EOD per non-empty document when
--append-eod is given, so the total is directly comparable with the
sum of sequence_lengths in Megatron's .idx.

Every stage also reports other_cpu_s: CPU seconds the rest of the machine
(other processes) used during the stage, from /proc/stat minus this
process's own CPU time. Non-trivial values mean the stage was contended.

Usage:
  tokenizer_limit.py --corpus /tmp/corpus/corpus_200mb.jsonl \
      --tokenizer /tmp/tok/llama3 --threads 2 --append-eod [--hf-call] [--json-out F]
"""
import argparse
import json
import os
import sys
import time


def _busy_s():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def _own_cpu_s():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Stage:
    """Time a stage; record wall seconds and foreign CPU seconds."""

    def __enter__(self):
        self.b0, self.c0, self.t0 = _busy_s(), _own_cpu_s(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.own = _own_cpu_s() - self.c0
        self.other = max(0.0, (_busy_s() - self.b0) - self.own)
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer", required=True, help="dir with tokenizer.json (+ tokenizer_config.json)")
    ap.add_argument("--key", default="text")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-docs", type=int, default=1024)
    ap.add_argument("--append-eod", action="store_true")
    ap.add_argument("--hf-call", action="store_true", help="also time transformers per-doc calls")
    ap.add_argument("--hf-call-max-bytes", type=int, default=0,
                    help="limit the hf_call stage to the first N input bytes (0 = all)")
    ap.add_argument("--repeat", type=int, default=1, help="repeat encode stages, report best")
    ap.add_argument("--no-procs", action="store_true", help="skip the process-parallel stage")
    ap.add_argument("--no-gigatoken", action="store_true", help="skip the gigatoken stages")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()

    # rayon reads this when its global pool is first used: set before import
    os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    import orjson
    from tokenizers import Tokenizer

    res = {"corpus": a.corpus, "threads": a.threads}
    with open(a.corpus, "rb") as f:
        lines = f.read().splitlines()
    nbytes = sum(len(line) + 1 for line in lines)
    res["docs"] = len(lines)
    res["input_bytes"] = nbytes

    with Stage() as st:  # Megatron's workers: json.loads(str line)
        for line in lines:
            json.loads(line.decode("utf-8"))
    res["json_stdlib_s"] = st.wall
    res["json_stdlib_other_cpu_s"] = st.other

    with Stage() as st:
        texts = [orjson.loads(line)[a.key] for line in lines]
    res["json_orjson_s"] = st.wall
    res["json_orjson_other_cpu_s"] = st.other
    del lines
    text_bytes = sum(len(t.encode("utf-8")) for t in texts)
    res["text_bytes_utf8"] = text_bytes

    tok = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))

    def count(encs):
        total = 0
        for e in encs:
            n = len(e.ids)
            if n and a.append_eod:
                n += 1
            total += n
        return total

    def run(fn_name):
        fn = getattr(tok, fn_name)
        best = None
        for _ in range(a.repeat):
            total = 0
            with Stage() as st:
                for i in range(0, len(texts), a.batch_docs):
                    total += count(fn(texts[i:i + a.batch_docs], add_special_tokens=True))
            if best is None or st.wall < best[0]:
                best = (st.wall, total, st.other, st.own)
        return best

    dt, ntok, oth, own = run("encode_batch")
    res["encode_batch_s"] = dt
    res["encode_batch_other_cpu_s"] = oth
    res["encode_batch_own_cpu_s"] = own
    res["tokens"] = ntok
    if hasattr(tok, "encode_batch_fast"):
        dt2, ntok2, oth2, own2 = run("encode_batch_fast")
        res["encode_batch_fast_s"] = dt2
        res["encode_batch_fast_other_cpu_s"] = oth2
        res["encode_batch_fast_own_cpu_s"] = own2
        assert ntok2 == ntok, (ntok2, ntok)

    if not a.no_procs:
        # balance documents over workers by bytes, keep each worker's order
        nproc = a.threads
        loads = [0] * nproc
        parts = [[] for _ in range(nproc)]
        for i, t in enumerate(texts):
            w = loads.index(min(loads))
            parts[w].append(i)
            loads[w] += len(t)
        best = None
        for _ in range(a.repeat):
            with Stage() as st:
                pids, rfds = [], []
                for w in range(nproc):
                    r, wfd = os.pipe()
                    pid = os.fork()
                    if pid == 0:  # child: sequential per-document encode, no rayon
                        os.close(r)
                        n = 0
                        for i in parts[w]:
                            k = len(tok.encode(texts[i], add_special_tokens=True).ids)
                            n += k + (1 if (k and a.append_eod) else 0)
                        os.write(wfd, str(n).encode())
                        os._exit(0)
                    os.close(wfd)
                    pids.append(pid)
                    rfds.append(r)
                total = 0
                for pid, r in zip(pids, rfds):
                    total += int(os.read(r, 64).decode())
                    os.close(r)
                    os.waitpid(pid, 0)
            if best is None or st.wall < best[0]:
                best = (st.wall, total, st.other, st.own)
        res["procs_s"] = best[0]
        res["procs_other_cpu_s"] = best[2]
        res["procs_own_cpu_s"] = best[3]
        assert best[1] == ntok, (best[1], ntok)

    if not a.no_gigatoken:
        try:
            import awkward as ak
            import gigatoken as gt
        except ImportError:
            gt = None
        if gt is not None:
            tj = os.path.join(a.tokenizer, "tokenizer.json")

            def gcount(arr):
                n = ak.to_numpy(ak.num(arr, axis=1))
                return int(n.sum()) + (int((n > 0).sum()) if a.append_eod else 0)

            def src():
                return gt.JsonlFileSource([a.corpus], field=a.key)

            # gigatoken caches encodings per Tokenizer instance: "cold" stages use a
            # fresh instance for every repetition (what a one-pass job sees);
            # gigatoken_files_warm repeats the call on an already-used instance.
            for stage, fn in (
                ("gigatoken_batch", lambda t: t.encode_batch(texts, parallel=True)),
                ("gigatoken_files", lambda t: t.encode_files(src(), parallel=True)),
                ("gigatoken_files_warm", None),
            ):
                best = None
                for _ in range(a.repeat):
                    gtok = gt.Tokenizer(tj)
                    if fn is None:
                        gtok.encode_files(src(), parallel=True)  # warm-up, untimed
                        def call(t):
                            return t.encode_files(src(), parallel=True)
                    else:
                        call = fn
                    with Stage() as st:
                        arr = call(gtok)
                    n = gcount(arr)
                    del arr, gtok
                    if best is None or st.wall < best[0]:
                        best = (st.wall, n, st.other, st.own)
                res[stage + "_s"] = best[0]
                res[stage + "_other_cpu_s"] = best[2]
                res[stage + "_own_cpu_s"] = best[3]
                res[stage + "_tokens"] = best[1]
                res[stage + "_matches_hf"] = best[1] == ntok

    if a.hf_call:
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(a.tokenizer)
        sub = texts
        if a.hf_call_max_bytes:
            acc = 0
            for k, t in enumerate(texts):
                acc += len(t.encode("utf-8"))
                if acc >= a.hf_call_max_bytes:
                    sub = texts[:k + 1]
                    break
        sb = sum(len(t.encode("utf-8")) for t in sub)
        nt = 0
        with Stage() as st:
            for t in sub:
                ids = hf(t).input_ids
                nt += len(ids) + (1 if (ids and a.append_eod) else 0)
        res["hf_call_s"] = st.wall
        res["hf_call_other_cpu_s"] = st.other
        res["hf_call_docs"] = len(sub)
        res["hf_call_text_bytes"] = sb
        res["hf_call_tokens"] = nt

    # derived rates
    out = dict(res)
    mb = nbytes / 1e6
    out["json_stdlib_MBps"] = mb / res["json_stdlib_s"]
    out["json_orjson_MBps"] = mb / res["json_orjson_s"]
    for k in ("encode_batch", "encode_batch_fast", "procs", "gigatoken_batch", "gigatoken_files",
              "gigatoken_files_warm"):
        if k + "_s" in res:
            s = res[k + "_s"]
            out[k + "_tokens_per_s"] = res["tokens"] / s
            out[k + "_docs_per_s"] = res["docs"] / s
            out[k + "_MBps_jsonl"] = mb / s
    if "hf_call_s" in res:
        out["hf_call_tokens_per_s"] = res["hf_call_tokens"] / res["hf_call_s"]
        out["hf_call_MBps_text"] = res["hf_call_text_bytes"] / 1e6 / res["hf_call_s"]
    print(json.dumps(out, indent=1))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
