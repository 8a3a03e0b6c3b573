#!/usr/bin/env bash
# Installs vLLM 0.10.0 (NeMo-RL v0.4.0's pin) beside the CPU environment of
# containers/nemo_rl_cpu_env.sh, for the rehearsal's vLLM contract (docs/contracts.md).
# It goes into ENV_DIR/vllm-site, a folder the contract puts on its child process's path
# only: the NeMo-RL environment itself, its tests and its stand-ins are unchanged.
#
#   containers/vllm_contract_env.sh [ENV_DIR]     ENV_DIR default .nemo-rl-cpu
#
# From the package registry: the vLLM wheel without its dependencies (a full install pulls
# the CUDA stack), then what its configuration code imports that NeMo-RL's CPU pins lack, at
# the versions of NeMo-RL v0.4.0's uv.lock (uvloop and python-multipart: what its OpenAI
# server module imports, for the token test on vLLM's own app). vLLM's CUDA kernels (.so files, ~1 GB) are
# deleted: nothing on CPU can load them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
env_dir="$(realpath -m "${1:-$repo/.nemo-rl-cpu}")"
[ -x "$env_dir/bin/python" ] || { echo "vllm_contract_env: $env_dir: no environment (run containers/nemo_rl_cpu_env.sh first)" >&2; exit 2; }
command -v uv >/dev/null || { echo "vllm_contract_env: needs uv (pip install uv)" >&2; exit 2; }
site="$env_dir/vllm-site"
rm -rf "$site" "$env_dir/vllm_contract.json" "$env_dir/contract-cache"
uv pip install --no-config --quiet --python "$env_dir/bin/python" --target "$site" --no-deps \
    vllm==0.10.0 \
    blake3==1.0.5 py-cpuinfo==9.0.0 openai==1.90.0 prometheus-fastapi-instrumentator==7.1.0 \
    partial-json-parser==0.2.1.1.post6 msgspec==0.19.0 pybase64==1.4.2 cbor2==5.7.0 \
    python-json-logger==3.3.0 watchfiles==1.1.0 diskcache==5.6.3 lark==1.2.2 gguf==0.17.1 \
    depyf==0.19.0 compressed-tensors==0.10.2 \
    httpx==0.28.1 httpcore==1.0.9 sniffio==1.3.1 distro==1.9.0 jiter==0.10.0 \
    uvloop==0.21.0 python-multipart==0.0.20
find "$site/vllm" -name '*.so' -delete
printf '{"vllm": "0.10.0", "site": "%s"}\n' "$site" >"$env_dir/vllm_contract.json"
echo "vllm_contract_env: vLLM 0.10.0 (configuration code, no kernels) -> $site"
