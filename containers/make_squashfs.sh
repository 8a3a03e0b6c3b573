#!/usr/bin/env bash
# Turn the darling-nemo image into an enroot squashfs that pyxis runs on every node.
#
#   containers/make_squashfs.sh darling-nemo:0.1.0-nemo-rl-v0.4.0 /shared/images/darling-nemo.sqsh
#   containers/make_squashfs.sh docker://registry.example.com#team/darling-nemo:0.1.0 out.sqsh
#
# The first form imports from the local docker daemon (dockerd://), the second pulls from a
# registry (enroot's docker:// syntax: REGISTRY#IMAGE:TAG; credentials in
# ~/.config/enroot/.credentials). Run it on a node with enroot and room in ENROOT_CACHE_PATH /
# TMPDIR (the 0.4.0 image is tens of GB), then put the file on a filesystem every node sees:
#
#   export CONTAINER_IMAGE=/shared/images/darling-nemo.sqsh      # slurm/site.env
#   srun --container-image="$CONTAINER_IMAGE" --container-mounts=/shared:/shared \
#        --container-workdir=/opt/darling-nemo python -m darling_nemo.plan conf/...yaml
set -euo pipefail

usage() {
  echo "usage: $0 IMAGE OUTPUT.sqsh   (IMAGE: a local docker tag, or docker://REGISTRY#IMAGE:TAG)" >&2
  exit 2
}
[[ $# -eq 2 ]] || usage
image=$1
output=$2
[[ "$output" == *.sqsh ]] || { echo "make_squashfs.sh: OUTPUT must end in .sqsh" >&2; exit 2; }
[[ -e "$output" ]] && { echo "make_squashfs.sh: $output exists; remove it first" >&2; exit 2; }
command -v enroot >/dev/null 2>&1 || { echo "make_squashfs.sh: enroot not found on this machine" >&2; exit 2; }

case "$image" in
  docker://* | dockerd://* | podman://*) uri=$image ;;
  *) uri="dockerd://$image" ;;
esac
mkdir -p "$(dirname "$output")"
echo "+ enroot import --output $output $uri"
enroot import --output "$output" "$uri"
ls -lh "$output"
