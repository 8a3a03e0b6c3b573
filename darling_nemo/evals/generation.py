"""Sample n responses per item: vLLM on GPUs, Hugging Face transformers on one machine.

Both back ends take the same token ids (the prompt rendered once, here, with the tokenizer's
chat template) and give back the same `Completion`s, so an evaluation never branches on the
engine. Item i is sampled with its own seed (`item_seed`), so a resumed run samples the
remaining items exactly as an uninterrupted one would (transformers; vLLM batches are
seeded per request too, but its kernels are not bit-reproducible across batch shapes).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

from darling_nemo.evals.records import JsonlWriter, check_resume, latest_records
from darling_nemo.evals.schema import GeneratorConfig, PromptConfig, SamplingConfig
from darling_nemo.schema import ConfigError


@dataclass(frozen=True)
class Completion:
    text: str
    num_tokens: int
    truncated: bool  # stopped by max_new_tokens rather than an end-of-sequence token


@dataclass(frozen=True)
class Item:
    """One prompt to sample: a stable key (for seeds and resume) and its template fields."""

    key: str
    fields: Mapping[str, Any]


def item_seed(base_seed: int, key: str) -> int:
    return (base_seed + zlib.crc32(key.encode())) % (2**31)


def render_prompt(tokenizer: Any, prompt: PromptConfig, fields: Mapping[str, Any]) -> str:
    """The model's input text for one item (chat template applied when asked)."""
    try:
        user = prompt.template.format(**fields)
    except KeyError as err:
        raise ConfigError(
            f"prompt.template uses field {err} but the item has only {sorted(fields)}"
        ) from None
    if not prompt.chat_template:
        return user
    if getattr(tokenizer, "chat_template", None) is None:
        raise ConfigError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template: "
            "set prompt.chat_template=false for a base model"
        )
    messages = [{"role": "system", "content": prompt.system}] if prompt.system else []
    messages.append({"role": "user", "content": user})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode_prompt(tokenizer: Any, text: str, chat_template: bool) -> list[int]:
    # A chat template writes its own BOS; a raw prompt gets the tokenizer's special tokens.
    return list(tokenizer(text, add_special_tokens=not chat_template)["input_ids"])


class Sampler(Protocol):
    tokenizer: Any

    def sample(
        self, prompts: Sequence[list[int]], seeds: Sequence[int], sampling: SamplingConfig
    ) -> list[list[Completion]]:
        """n completions for each prompt (token ids), prompt i seeded with seeds[i]."""
        ...


def _torch_dtype(name: str) -> Any:
    import torch

    return "auto" if name == "auto" else getattr(torch, name)


def dtype_kwargs(name: str) -> dict[str, Any]:
    """`dtype=` for transformers >= 4.56, `torch_dtype=` before (the cluster has 4.55)."""
    import transformers
    from packaging.version import Version

    key = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    return {key: _torch_dtype(name)}


def load_tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class TransformersSampler:
    """model.generate on the first GPU if any, else CPU. For small runs and CI."""

    def __init__(self, cfg: GeneratorConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.tokenizer = load_tokenizer(cfg.tokenizer or cfg.model)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = AutoModelForCausalLM.from_pretrained(cfg.model, **dtype_kwargs(cfg.dtype))
        self.model.to(self.device).eval()
        self.batch_size = cfg.batch_size

    def sample(
        self, prompts: Sequence[list[int]], seeds: Sequence[int], sampling: SamplingConfig
    ) -> list[list[Completion]]:
        import torch

        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        eos_ids.add(self.tokenizer.eos_token_id)
        out = []
        for ids, seed in zip(prompts, seeds, strict=True):
            torch.manual_seed(seed)
            prompt = torch.tensor([ids], device=self.device)
            completions: list[Completion] = []
            while len(completions) < sampling.n:
                m = min(self.batch_size, sampling.n - len(completions))
                with torch.no_grad():
                    generated = self.model.generate(
                        input_ids=prompt.repeat(m, 1),
                        attention_mask=torch.ones(m, prompt.shape[1], device=self.device),
                        do_sample=sampling.temperature > 0,
                        temperature=sampling.temperature if sampling.temperature > 0 else None,
                        top_p=sampling.top_p if sampling.temperature > 0 else None,
                        top_k=0,
                        max_new_tokens=sampling.max_new_tokens,
                        pad_token_id=self.tokenizer.pad_token_id,
                    )
                for row in generated[:, prompt.shape[1] :].tolist():
                    stop = next((i for i, t in enumerate(row) if t in eos_ids), None)
                    tokens = row if stop is None else row[:stop]
                    completions.append(
                        Completion(
                            text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                            num_tokens=len(tokens),
                            truncated=stop is None,
                        )
                    )
            out.append(completions)
        return out


class VLLMSampler:
    """vLLM offline engine (tensor parallel on one node), one request per prompt."""

    def __init__(self, cfg: GeneratorConfig) -> None:
        from vllm import LLM

        self.tokenizer = load_tokenizer(cfg.tokenizer or cfg.model)
        self.llm = LLM(
            model=cfg.model,
            tokenizer=cfg.tokenizer or cfg.model,
            dtype=cfg.dtype,
            tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
        )

    def sample(
        self, prompts: Sequence[list[int]], seeds: Sequence[int], sampling: SamplingConfig
    ) -> list[list[Completion]]:
        from vllm import SamplingParams

        params = [
            SamplingParams(
                n=sampling.n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=seed,
            )
            for seed in seeds
        ]
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False
        )
        return [
            [
                Completion(o.text, len(o.token_ids), truncated=o.finish_reason == "length")
                for o in request.outputs
            ]
            for request in outputs
        ]


def make_sampler(cfg: GeneratorConfig) -> Sampler:
    if cfg.backend == "vllm":
        return VLLMSampler(cfg)
    return TransformersSampler(cfg)


def generate_items(
    sampler: Sampler,
    prompt: PromptConfig,
    sampling: SamplingConfig,
    items: Sequence[Item],
    chunk_items: int,
    on_done: Callable[[Item, str, list[Completion]], None],
    desc: str = "generate",
) -> None:
    """Sample every item, `chunk_items` at a time, calling on_done(item, prompt_text, samples)
    as each chunk finishes (the caller writes the record: that is the resume point)."""
    with tqdm(total=len(items), desc=desc, unit="item") as progress:
        for start in range(0, len(items), chunk_items):
            chunk = items[start : start + chunk_items]
            texts = [render_prompt(sampler.tokenizer, prompt, it.fields) for it in chunk]
            ids = [encode_prompt(sampler.tokenizer, t, prompt.chat_template) for t in texts]
            seeds = [item_seed(sampling.seed, it.key) for it in chunk]
            results = sampler.sample(ids, seeds, sampling)
            for item, text, completions in zip(chunk, texts, results, strict=True):
                on_done(item, text, completions)
            progress.update(len(chunk))


def generation_settings(
    generator: GeneratorConfig, prompt: PromptConfig, sampling: SamplingConfig
) -> dict[str, Any]:
    """What a file of generations depends on: resuming it under other values is refused."""
    return {
        "model": generator.model,
        "tokenizer": generator.tokenizer,
        "prompt": prompt.model_dump(),
        "sampling": sampling.model_dump(),
    }


def generate_to_jsonl(
    generator: GeneratorConfig,
    prompt: PromptConfig,
    sampling: SamplingConfig,
    prompts: Sequence[dict[str, str]],
    path: Path,
    stage: str,
    sampler: Sampler | None,
) -> dict[str, dict[str, Any]]:
    """Generations for [{id, prompt}] rows, resumed from and appended to a JSONL file.

    Resuming under other generation settings is refused (`stage` names them in the output
    directory's resume.json). Without a `sampler` the generator's model is loaded only if
    something is left to generate. Returns every record on file by id. Record: id, prompt,
    prompt_text, generations[n], num_tokens[n], truncated[n].
    """
    check_resume(path.parent, stage, generation_settings(generator, prompt, sampling))
    desc = stage.replace("-", " ")
    generated = latest_records(path, "id")
    pending = [p for p in prompts if p["id"] not in generated]
    print(f"{desc}: {len(prompts) - len(pending)} of {len(prompts)} prompts already generated")
    if not pending:
        return generated
    if sampler is None:
        sampler = make_sampler(generator)
    with JsonlWriter(path) as writer:

        def on_done(item: Item, text: str, completions: list[Completion]) -> None:
            record = {
                "id": item.key,
                "prompt": item.fields["prompt"],
                "prompt_text": text,
                "generations": [c.text for c in completions],
                "num_tokens": [c.num_tokens for c in completions],
                "truncated": [c.truncated for c in completions],
            }
            writer.write(record)
            generated[item.key] = record

        generate_items(
            sampler,
            prompt,
            sampling,
            [Item(p["id"], p) for p in pending],
            generator.chunk_items,
            on_done,
            desc,
        )
    return generated
