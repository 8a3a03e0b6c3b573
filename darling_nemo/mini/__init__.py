"""The CPU miniature: DARLING vs GRPO on a dice task, small enough for a laptop.

task.py        the dice task (six digits 1..6 that total S), its multiset equivalence judge
policy.py      word/character tokenizers and a tiny Llama, built from config (no download)
warm_start.py  a short supervised phase so RL starts from an unsure but capable policy
evaluate.py    held-out pass@k and distinct correct answers (also used by the TRL engine)
report.py      the comparison table over seeds, paired differences, the run's conditions
plots.py       the figures: curves over training and held-out pass@k, ± std over seeds

The recipe that ties them together is recipes/darling_mini.py; training itself is
darling_nemo.trl_engine.run (TRL's GRPOTrainer with the DARLING reward adapter).
"""
