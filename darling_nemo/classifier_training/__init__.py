"""Fine-tuning a pair judge on labelled pairs, the library under `recipes/train_classifier.py`.

data        the pair file and its held-out split (whole prompts on one side)
modes       one builder per training mode: the model, its batch loss, its held-out
            evaluation and the judge settings it saves (cross_encoder, bi_encoder)
loop        optimiser, learning-rate schedule and the training steps
checkpoint  atomic checkpoint swaps, recovery after a kill, resume refusals
report      the held-out metrics every mode shares, the embedding-cosine baseline, the
            judge card
"""
