"""`recipes/darling_*.py --config X --smoke`: the job itself, on its GPUs, for a few steps.

run.py sequences it (run 1: setup, steps 1-2, validation, checkpoint; run 2: resume, step 3,
checkpoint) with the rehearsal's phase checker (darling_nemo/rehearsal/phases.py); report.py
compares the measured memory and times with the plan (docs/first-hour.md).
"""
