"""darling-nemo's NeMo-RL v0.4.0 touch points, the only package that imports `nemo_rl`
(besides the rehearsal's stand-ins for its GPU workers): `adapter` (the reward hook, metrics,
data, setup and train), `overlap` (the judge during generation and the log-probabilities),
`transform` and `checks` (pure: the reward over a rollout batch, the config rules)."""
