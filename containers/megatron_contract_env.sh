#!/usr/bin/env bash
# Adds the Megatron-LM and Megatron-Bridge sources NeMo-RL v0.4.0 pins to the CPU environment
# of containers/nemo_rl_cpu_env.sh, for the rehearsal's Megatron worker contract
# (docs/contracts.md). Nothing is put on the environment's own path: the contract adds the two
# folders to its child process only.
#
#   containers/megatron_contract_env.sh MEGATRON_LM MEGATRON_BRIDGE [ENV_DIR]
#     MEGATRON_LM      NVIDIA/Megatron-LM at af73aa2cebf94a0bee5ea6dda2614ad989faffae: a clone
#                      at that commit or its `git archive` .tar.gz
#     MEGATRON_BRIDGE  NVIDIA-NeMo/Megatron-Bridge at 62f4704b8d665ac4a8c318a809a070217caa8901,
#                      likewise
#     ENV_DIR          default .nemo-rl-cpu (built first by containers/nemo_rl_cpu_env.sh)
#
# Both commits are what `git ls-tree v0.4.0 3rdparty/` names in NeMo-RL; a source at another
# commit is refused. Clone them with:
#   git clone https://github.com/NVIDIA/Megatron-LM && git -C Megatron-LM checkout af73aa2cebf94a0bee5ea6dda2614ad989faffae
#   git clone https://github.com/NVIDIA-NeMo/Megatron-Bridge && git -C Megatron-Bridge checkout 62f4704b8d665ac4a8c318a809a070217caa8901
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
lm="${1:?usage: containers/megatron_contract_env.sh MEGATRON_LM MEGATRON_BRIDGE [ENV_DIR]}"
bridge="${2:?usage: containers/megatron_contract_env.sh MEGATRON_LM MEGATRON_BRIDGE [ENV_DIR]}"
env_dir="$(realpath -m "${3:-$repo/.nemo-rl-cpu}")"
[ -x "$env_dir/bin/python" ] || { echo "megatron_contract_env: $env_dir: no environment (run containers/nemo_rl_cpu_env.sh first)" >&2; exit 2; }
[ -f "$env_dir/constraints.txt" ] || { echo "megatron_contract_env: $env_dir was not built by containers/nemo_rl_cpu_env.sh" >&2; exit 2; }

# The commit of a clone, or of a `git archive` (its pax header holds the commit id).
commit_of() {
    local c=""
    if [ -d "$1" ]; then c=$(git -C "$1" rev-parse HEAD 2>/dev/null || true)
    elif [ -f "$1" ]; then c=$(gzip -dc "$1" 2>/dev/null | git get-tar-commit-id 2>/dev/null || true)
    else echo "megatron_contract_env: $1: no such file or folder" >&2; exit 2; fi
    echo "${c:-unknown}"
}
install_source() {  # NAME SOURCE PINNED -> prints the folder
    local name=$1 src=$2 pinned=$3 commit dest
    commit=$(commit_of "$src")
    if [ "$commit" != "$pinned" ]; then
        echo "megatron_contract_env: $src is $name at $commit, not at NeMo-RL v0.4.0's pin $pinned" >&2
        exit 2
    fi
    dest="$env_dir/src/$name"
    rm -rf "$dest" && mkdir -p "$dest"
    if [ -d "$src" ]; then git -C "$src" archive HEAD | tar -x -C "$dest"
    else tar -xzf "$src" -C "$dest" --strip-components=1; fi
    echo "$dest"
}
lm_dir=$(install_source Megatron-LM "$lm" af73aa2cebf94a0bee5ea6dda2614ad989faffae)
bridge_dir=$(install_source Megatron-Bridge "$bridge" 62f4704b8d665ac4a8c318a809a070217caa8901)
[ -f "$lm_dir/megatron/core/__init__.py" ] || { echo "megatron_contract_env: $lm holds no megatron/core" >&2; exit 2; }
[ -d "$bridge_dir/src/megatron/bridge" ] || { echo "megatron_contract_env: $bridge holds no src/megatron/bridge" >&2; exit 2; }

# What Megatron-Bridge imports beyond NeMo-RL's CPU pins, at NeMo-RL v0.4.0's uv.lock versions.
VIRTUAL_ENV="$env_dir" uv pip install --no-config --quiet -c "$env_dir/constraints.txt" einops==0.8.1 sentencepiece==0.2.1
cat >"$env_dir/megatron_sources.json" <<JSON
{"Megatron-LM": {"path": "$lm_dir", "commit": "af73aa2cebf94a0bee5ea6dda2614ad989faffae"},
 "Megatron-Bridge": {"path": "$bridge_dir", "commit": "62f4704b8d665ac4a8c318a809a070217caa8901"}}
JSON
rm -rf "$env_dir/contract-cache"
echo "megatron_contract_env: Megatron-LM and Megatron-Bridge at NeMo-RL v0.4.0's pins -> $env_dir"
