"""Judge throughput and call economy, on one checkpoint and one machine.

    python -m darling_nemo.bench.judges [--model DIR] [--pairs 192] [--groups 16]

Part 1, pairs/s for the same cross-encoder checkpoint (default: the shipped MiniLM-L6 with
a fresh 2-label head; its weights do not change the speed) on real NoveltyBench responses:
  reference pattern  one pair per POST /classify, every request in flight at once
  batched requests   `pairs_per_request` pairs per POST, 4 in flight per server
  in-process         CrossEncoderJudge, batches of 32, no HTTP
The servers are `darling_nemo.classify_server` processes on 127.0.0.1 (they batch
concurrent requests as vLLM does), started here and stopped at the end.

Part 2, judged pairs per group on NoveltyBench-style groups of 8: each class is seeded by a
real response and filled with near-duplicates of it (a sentence dropped, two sentences
swapped, a verbatim copy); the judge is the shipped MiniLM's cosine head at 0.89 (the
embedding judge's default before the calibrated head; docs/judges.md's figures). The wave partition (`core.partition_groups`) vs all n(n-1)/2 pairs (reference),
with the classes each finds. "after lexical": pairs left once exact copies and short
answers are settled without a model (the reference sends those to the classifier too).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from darling_nemo.bench.partition import NOVELTYBENCH_PAIRS, load_noveltybench_pairs
from darling_nemo.core import partition_all_pairs, partition_groups
from darling_nemo.judges import make_judge
from darling_nemo.schema import CrossEncoderJudgeConfig, EmbeddingJudgeConfig, ServedJudgeConfig


def load_responses(path: Path, count: int) -> list[str]:
    out = []
    for pair in load_noveltybench_pairs(path):
        out += [pair.a, pair.b]
    return out[:count]


def minilm_cross_encoder(directory: Path) -> str:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from darling_nemo.judges.embedding import shipped_minilm_path

    base = shipped_minilm_path()
    AutoModelForSequenceClassification.from_pretrained(base, num_labels=2).save_pretrained(
        directory
    )
    AutoTokenizer.from_pretrained(base).save_pretrained(directory)
    return str(directory)


def start_server(model: str, name: str, *options: str, **popen: Any) -> subprocess.Popen:
    """darling_nemo.classify_server serving `model` as `name` on a free port of 127.0.0.1
    (vLLM's /classify protocol), `options` added to its command line; its stdout is a pipe
    that `server_url` reads."""
    command = [sys.executable, "-m", "darling_nemo.classify_server", "serve", model]
    command += ["--port", "0", *options, "--served-model-name", name]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **popen
    )


def server_url(proc: subprocess.Popen) -> str | None:
    """The URL of its `READY <url>` line, or None once the server has ended without one."""
    for line in proc.stdout:
        if line.startswith("READY "):
            return line.split()[1]
    return None


def start_servers(model: str, count: int) -> tuple[list[subprocess.Popen], list[str]]:
    procs = [start_server(model, f"similarity_gpu_{k}") for k in range(count)]
    urls = [url for url in map(server_url, procs) if url is not None]
    if len(urls) < count:
        raise RuntimeError("a classify_server did not start")
    return procs, urls


def pairs_per_second(judge, pairs) -> tuple[float, int | None]:
    """(pairs/s, HTTP requests made) for one call on `pairs`, after a warm-up call."""
    judge(pairs[:4])  # warm up (connections, first forward)
    before = judge.stats["requests"] if hasattr(judge, "stats") else None
    start = time.perf_counter()
    judge(pairs)
    rate = len(pairs) / (time.perf_counter() - start)
    return rate, None if before is None else judge.stats["requests"] - before


def near_duplicate(text: str, rng: random.Random) -> str:
    """The same content, lightly edited: drop one sentence, or swap two, or copy."""
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]
    choice = rng.random()
    if len(sentences) >= 3 and choice < 0.4:
        del sentences[rng.randrange(1, len(sentences))]
    elif len(sentences) >= 3 and choice < 0.8:
        i, j = rng.sample(range(1, len(sentences)), 2)
        sentences[i], sentences[j] = sentences[j], sentences[i]
    return " ".join(sentences)


def make_groups(
    seeds: list[str], sizes: list[int], count: int, rng: random.Random
) -> list[list[str]]:
    groups = []
    for _ in range(count):
        group = []
        for size, seed in zip(sizes, rng.sample(seeds, len(sizes)), strict=True):
            group += [seed] + [near_duplicate(seed, rng) for _ in range(size - 1)]
        rng.shuffle(group)
        groups.append(group)
    return groups


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="classifier checkpoint (default: MiniLM + new head)")
    parser.add_argument(
        "--pairs-data", "--data", dest="data", type=Path, default=NOVELTYBENCH_PAIRS
    )
    parser.add_argument("--pairs", type=int, default=192)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--pairs-per-request", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--groups", type=int, default=16, help="groups per structure (part 2)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        responses = load_responses(args.data, 2 * args.pairs + 200)
    except (FileNotFoundError, ValueError) as err:
        parser.exit(2, f"darling_nemo.bench.judges: {err}\n")
    rng = random.Random(args.seed)
    pairs = [(responses[2 * k], responses[2 * k + 1]) for k in range(args.pairs)]

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or minilm_cross_encoder(Path(tmp) / "minilm-cross-encoder")
        rates = measure_pair_rates(
            model, pairs, args.servers, args.pairs_per_request, args.max_length
        )

    print(
        f"Part 1: {args.pairs} NoveltyBench pairs, {Path(model).name if args.model else 'MiniLM-L6 cross-encoder'}, "
        f"{args.max_length} tokens, {args.servers} local server(s), {os.cpu_count()} CPU cores"
    )
    for name, (rate, requests) in rates.items():
        http = f"{requests:5d} requests" if requests is not None else "      no HTTP"
        print(f"  {name:<52} {rate:8.1f} pairs/s {http}")

    seeds = [r for r in responses[2 * args.pairs :] if len(r.split()) > 40]
    print_judged_pairs_per_group(seeds, args.groups, rng)


def measure_pair_rates(
    model: str,
    pairs: list[tuple[str, str]],
    servers: int,
    pairs_per_request: int,
    max_length: int,
) -> dict[str, tuple[float, int | None]]:
    """Part 1: pairs/s (and HTTP requests) of the reference, batched and in-process judges."""
    common = {"template": "modernbert", "max_length": max_length, "truncation": "tokens"}
    procs, urls = start_servers(model, servers)
    try:
        endpoints = [{"url": u, "model": f"similarity_gpu_{k}"} for k, u in enumerate(urls)]
        served_common = {"endpoints": endpoints, "tokenizer": model, **common}
        reference = make_judge(
            ServedJudgeConfig(**served_common, pairs_per_request=1, max_concurrency=len(pairs))
        )
        batched = make_judge(
            ServedJudgeConfig(**served_common, pairs_per_request=pairs_per_request)
        )
        in_process = make_judge(CrossEncoderJudgeConfig(model=model, batch_size=32, **common))
        rates = {
            "reference pattern (1 pair/request, all at once)": pairs_per_second(reference, pairs),
            f"batched requests ({pairs_per_request} pairs/request)": pairs_per_second(
                batched, pairs
            ),
            "in-process batched (32 pairs/forward)": pairs_per_second(in_process, pairs),
        }
        reference.close()
        batched.close()
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    return rates


def print_judged_pairs_per_group(seeds: list[str], groups_per_row: int, rng: random.Random) -> None:
    """Part 2: how many pairs the wave partition judges per group of 8, by group structure."""
    cosine = EmbeddingJudgeConfig(head="cosine")  # the head docs/judges.md's figures used
    judge = make_judge(cosine)
    threshold = cosine.threshold
    structures = {
        "1 class (8)": [8],
        "2 classes (4+4)": [4, 4],
        "3 classes (6+1+1)": [6, 1, 1],
        "4 classes (2x4)": [2, 2, 2, 2],
        "8 distinct": [1] * 8,
    }
    print(
        f"\nPart 2: judged pairs per group of 8 ({groups_per_row} groups per row), MiniLM "
        f"cosine at {threshold}\n"
        f"{'built as':<20} {'all pairs':>9} {'after lexical':>13} {'judged(wave)':>12} "
        f"{'ratio':>6} {'classes(wave)':>14} {'classes(all)':>13} {'same':>5}"
    )
    for name, sizes in structures.items():
        groups = make_groups(seeds, sizes, groups_per_row, rng)
        waves = partition_groups(groups, judge, threshold)
        full = [partition_all_pairs(g, judge, threshold) for g in groups]
        judged = sum(p.pairs_judged for p in waves) / len(groups)
        total = sum(p.pairs_total for p in waves) / len(groups)
        undecided = sum(p.pairs_judged for p in full) / len(groups)
        classes_wave = sum(p.num_classes for p in waves) / len(groups)
        classes_all = sum(p.num_classes for p in full) / len(groups)
        same = all(w.class_ids == f.class_ids for w, f in zip(waves, full, strict=True))
        print(
            f"{name:<20} {total:>9.1f} {undecided:>13.2f} {judged:>12.2f} {judged / total:>6.2f} "
            f"{classes_wave:>14.2f} {classes_all:>13.2f} {same!s:>5}"
        )


if __name__ == "__main__":
    main()
