"""darling-nemo's NeMo-RL v0.4.0 touch points: `adapter` (the only module that imports
`nemo_rl`: the reward hook, metrics, data, setup and train) and `checks` (pure config rules)."""
