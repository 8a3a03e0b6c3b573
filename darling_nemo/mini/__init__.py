"""The CPU miniature: DARLING vs GRPO on a dice task, small enough for a laptop.

task.py        the dice task (six digits 1..6 that total S), its multiset equivalence judge
warm_start.py  a short supervised phase so RL starts from an unsure but capable policy
report.py      the comparison table over seeds, paired differences, the run's conditions
plots.py       the figures: curves over training and held-out pass@k, ± std over seeds
reproducibility.py  the CPU kernels pinned so the table repeats across x86-64 machines

The recipe that ties them together is recipes/darling_mini.py; training itself is
darling_nemo.trl.run (TRL's GRPOTrainer with the DARLING reward adapter); the tiny policy
and the held-out evaluation are the TRL engine's (darling_nemo/trl/policy.py, evaluate.py).
"""
