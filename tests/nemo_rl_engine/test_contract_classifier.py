"""The classifier servers' command lines, as the jobs of every NeMo-RL config in conf/ run
them, parsed and checked by vLLM 0.10.0's serve parser and engine config, and the /classify
protocol checked against vLLM 0.10.0's classes; with the refusals a user would otherwise meet
once the classifier node is up (docs/contracts.md). Skipped unless
containers/vllm_contract_env.sh installed vLLM beside this environment (.ci/run does). One
child process for all configs; the verdicts are cached for the rehearsals after this file."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("nemo_rl")
from helpers import REPO, needs_vllm_sources, verdicts_of_every_config

from darling_nemo.rehearsal import contract_classifier

pytestmark = [pytest.mark.nemo_rl, needs_vllm_sources()]  # every test here runs vLLM's code
MATH_1NODE = "math_qwen3_1p7b_1node_darling.yaml"
CHAT_1NODE = "wildchat_qwen3_1p7b_1node_darling.yaml"
LAUNCH = "darling.judge.launch"
QWEN3_4B = {  # the math classifier's shape, without its head
    "model_type": "qwen3",
    "hidden_size": 2560,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 9728,
    "vocab_size": 151665,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Local classifier folders (config.json only). One folder per module, so the second
    test finds the first one's verdicts in the cache (a verdict is keyed by the job)."""
    root = tmp_path_factory.mktemp("classifiers")
    configs = {
        "bare": {"architectures": ["Qwen3Model"]},
        "one-label": {"architectures": ["Qwen3ForSequenceClassification"], "num_labels": 1},
    }
    for name, config in configs.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps({**QWEN3_4B, **config}))
    return {name: str(root / name) for name in configs}


NO_MIDDLEWARE_PORT = 8999  # the test's server commands on this port lack the token's flag


def without_the_middleware(monkeypatch) -> list[tuple[str, list[str], str]]:
    """The cases of a math and a chat server command line without `--middleware` (as a
    command built by hand would be), and the verdict each must get."""
    from darling_nemo.config import load_config
    from darling_nemo.judges import node_server
    from darling_nemo.judges.auth import MIDDLEWARE

    server_command = node_server.server_command

    def dropped(launch):
        env, argv = server_command(launch)
        if launch.port == NO_MIDDLEWARE_PORT:
            at = argv.index("--middleware")
            argv = argv[:at] + argv[at + 2 :]
        return env, argv

    monkeypatch.setattr(node_server, "server_command", dropped)
    cases = []
    for name in (MATH_1NODE, CHAT_1NODE):
        overrides = [f"{LAUNCH}.port={NO_MIDDLEWARE_PORT}"]
        one = contract_classifier.job(load_config(REPO / "conf" / name, overrides))
        assert "--middleware" not in one["serve_args"]
        verdict = (
            f"FAIL {one['command_key']}: the server has no `--middleware {MIDDLEWARE}`: it "
            "would answer /classify without the job's token"
        )
        cases.append((name, overrides, verdict))
    return cases


def judge_kind(name: str) -> str:
    from darling_nemo.config import load_config

    return load_config(REPO / "conf" / name)["darling"]["judge"]["kind"]


def test_every_config_passes_and_the_refusals_name_the_key(models, monkeypatch):
    monkeypatch.delenv("CLASSIFIER_MODEL", raising=False)
    bare, one_label = models["bare"], models["one-label"]
    # (config, overrides, the start of the verdict)
    cases = [
        (
            MATH_1NODE,
            [f"{LAUNCH}.model={bare}"],
            f"FAIL {LAUNCH}.model={bare}: vLLM 0.10.0 cannot classify architecture Qwen3Model: "
            "it has no vLLM classification model and falls back to TransformersForCausalLM",
        ),
        (
            MATH_1NODE,
            [f"{LAUNCH}.model={one_label}"],
            f"FAIL {LAUNCH}.model={one_label}: config.json has 1 label(s); the judge reads "
            "P(similar) as probs[-1] of 2 labels",
        ),
        (
            MATH_1NODE,
            [f"{LAUNCH}.extra_args=[--max-num-sequences, '64']"],
            f"FAIL {LAUNCH}.extra_args=['--max-num-sequences', '64']: vLLM 0.10.0's serve "
            "parser: unrecognized arguments: --max-num-sequences 64",
        ),
        (
            CHAT_1NODE,
            [f"{LAUNCH}.max_model_len=1024"],
            f"FAIL {LAUNCH}.max_model_len=1024: the server's max_model_len 1024 is below the "
            "modernbert template's budget of 2048 tokens",
        ),
        (  # a causal classifier whose pooler turns vLLM 0.10.0's prefix caching off
            MATH_1NODE,
            [f"""{LAUNCH}.extra_args=[--override-pooler-config, '{{"pooling_type":"MEAN"}}']"""],
            f"""FAIL {LAUNCH}.extra_args=['--override-pooler-config', '{{"pooling_type":"MEAN"}}']: """
            "vLLM 0.10.0 serves this causal classifier without prefix caching "
            "(enable_prefix_caching=False, pooling_type=MEAN)",
        ),
        (
            MATH_1NODE,
            [f"{LAUNCH}.extra_args=[--no-enable-prefix-caching]"],
            f"FAIL {LAUNCH}.extra_args=['--no-enable-prefix-caching']: vLLM 0.10.0 serves this "
            "causal classifier without prefix caching (enable_prefix_caching=False, "
            "pooling_type=LAST)",
        ),
        (
            CHAT_1NODE,
            [f"{LAUNCH}.extra_args=[--dtype, fp8]"],
            f"FAIL {LAUNCH}.extra_args=['--dtype', 'fp8']: vLLM 0.10.0's serve parser: argument "
            "--dtype: invalid choice: 'fp8'",
        ),
        *without_the_middleware(monkeypatch),
    ]
    for name, verdict in verdicts_of_every_config(contract_classifier.check_many, cases):
        if judge_kind(name) == "lexical":  # the rival judged by exact answers, code_tests
            assert verdict == "SKIPPED (judge 'lexical' starts no classifier server)"
            continue
        assert verdict.startswith("PASS (dogtooth/"), verdict
        assert "2 labels, task classify" in verdict and "match vLLM 0.10.0's protocol" in verdict
        assert "the job's token checked by --middleware" in verdict
        if name.startswith("wildchat"):  # ModernBERT runs on vLLM 0.10.0's V0 engine
            assert "ModernBertForSequenceClassification (vLLM's own)" in verdict, verdict
            assert "V0 engine" in verdict and "max_model_len 8192 >= the judge's 2048" in verdict
            assert "prefix caching off (a bidirectional encoder" in verdict, verdict
        else:  # the Qwen3 math classifier through vLLM's adapter of Qwen3ForCausalLM
            assert "Qwen3ForCausalLM + vLLM's classify adapter" in verdict, verdict
            assert "V1 engine" in verdict and "the judge's 4096" in verdict
            assert "prefix caching on, chunked prefill on (pooling_type LAST)" in verdict


def test_a_rehearsal_stops_at_the_classifier_contract_naming_the_key(models):
    from darling_nemo.rehearsal.contract import contract_phase
    from darling_nemo.rehearsal.phases import RehearsalFailure

    bare = models["bare"]
    with pytest.raises(RehearsalFailure) as failure:
        contract_phase(str(REPO / "conf" / MATH_1NODE), [f"{LAUNCH}.model={bare}"])
    assert failure.value.phase == "contract (vllm)"
    assert failure.value.error.startswith(f"{LAUNCH}.model={bare}: vLLM 0.10.0 cannot classify")
