"""Evaluations of a checkpoint, each from samples to a JSONL of raw records and a summary.json.

    math.py          pass@k on competition math, graded with math-verify
    noveltybench.py  NoveltyBench distinct / utility (greedy partition, reward-model ratings)
    creative.py      creative writing judged by an LLM over an OpenAI-compatible API (+ Elo)
    plots.py         several runs' summaries -> PNG plots and a Markdown table
    generation.py    the sampling back ends (vLLM, transformers)
    records.py       resumable JSONL records
    schema.py        the typed configs (every default of an evaluation)
    tiny.py          tiny random models for CPU smoke runs

Recipes: recipes/eval_math.py, eval_noveltybench.py, eval_creative.py, plot_runs.py.
"""
