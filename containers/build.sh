#!/usr/bin/env bash
# Build the darling-nemo image from containers/Dockerfile with every version from
# containers/pins.env (an entry already set in the environment wins).
#
#   containers/build.sh                                  # tag from pins.env (IMAGE_TAG)
#   containers/build.sh --push -t registry.example.com/darling-nemo:0.1.0   # extra docker args
#   NEMO_RL_IMAGE=registry.example.com/nemo-rl:v0.4.0 containers/build.sh   # another base
#   BUILD_NEMO_RL_BASE=1 NEMO_RL_REF=v0.4.0 containers/build.sh   # build the base from NeMo-RL's
#                                                         # own docker/Dockerfile at that ref
#   DRY_RUN=1 containers/build.sh                         # print the docker commands only
#
# Then: containers/make_squashfs.sh <image> <file.sqsh> for enroot/pyxis.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
pins_file=${PINS_FILE:-$here/pins.env}
[[ -f "$pins_file" ]] || { echo "build.sh: no pins file $pins_file" >&2; exit 2; }

# Read the pins without letting the file override what the caller set.
mapfile -t pin_names < <(sed -n 's/^\([A-Z_][A-Z0-9_]*\)=.*/\1/p' "$pins_file")
declare -A caller=()
for name in "${pin_names[@]}"; do
  [[ -n "${!name+set}" ]] && caller[$name]=${!name}
done
# shellcheck source=containers/pins.env
source "$pins_file"
for name in "${!caller[@]}"; do
  printf -v "$name" '%s' "${caller[$name]}"
done

run() {
  printf '+'
  printf ' %q' "$@"
  printf '\n'
  [[ "${DRY_RUN:-0}" == 1 ]] || "$@"
}

if [[ "${BUILD_NEMO_RL_BASE:-0}" == 1 ]]; then
  # NeMo-RL's documented self-contained build (docs/docker.md), release target.
  NEMO_RL_IMAGE="nemo-rl:$NEMO_RL_REF"
  run docker buildx build --target release --load \
    --build-arg "NRL_GIT_REF=$NEMO_RL_REF" -f docker/Dockerfile \
    --tag "$NEMO_RL_IMAGE" "https://github.com/NVIDIA-NeMo/RL.git#$NEMO_RL_REF"
fi

args=()
for name in "${pin_names[@]}"; do
  [[ "$name" == IMAGE_TAG ]] && continue
  args+=(--build-arg "$name=${!name}")
done
run docker buildx build --load -f "$here/Dockerfile" "${args[@]}" --tag "$IMAGE_TAG" "$@" "$root"
