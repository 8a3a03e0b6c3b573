# shellcheck shell=bash
# The launcher every slurm/*.sub sources: site values, the memory plan, the classifier
# servers, a Ray cluster started inside the containers with pyxis, and the driver.
#
# A .sub sets its job's defaults and calls one entry point:
#   JOB_RECIPE=recipes/darling_wildchat.py JOB_CONFIG=conf/... ; darling_train "$@"
#   darling_serve_classifiers "$@"
#
# Site values come from the environment or a site file (slurm/site.example.env lists them
# all); a missing required one stops the job before anything starts. `--dry-run` (or
# DRY_RUN=1) prints every srun / ray / python command instead of running it, and still runs
# the memory plan, locally, with $DARLING_PYTHON; a training job also rehearses its driver
# command there (recipe --rehearse) when that Python can import nemo_rl, else the recipe's
# --dry-run of it (a user's reward functions imported and called once). USER_DIR, a user's
# task folder, is mounted at the same path in every container. darling_train and its
# helpers are in slurm/train.sh, sourced at the end.

# Paths inside the container (containers/Dockerfile puts darling-nemo here).
CONTAINER_WORKDIR=/opt/darling-nemo

die() {
  echo "darling: error: $*" >&2
  exit 2
}

log() {
  echo "darling: $*"
}

# `+ cmd args...`, quoted so that it can be pasted back into a shell.
print_cmd() {
  local line="+" arg
  for arg in "$@"; do
    line+=" $(printf '%q' "$arg")"
  done
  echo "$line"
}

is_dry_run() {
  [[ "${DRY_RUN:-0}" == 1 ]]
}

# Run a command in the foreground (printed either way).
run() {
  print_cmd "$@"
  is_dry_run || "$@"
}

# Start a command in the background and remember its PID (by name) for cleanup and checks.
declare -A BG_PIDS=()
run_bg() {
  local name=$1
  shift
  print_cmd "$@"
  if ! is_dry_run; then
    "$@" &
    BG_PIDS[$name]=$!
  fi
}

# Exit when one of our background steps has died (the Ray head, a worker, the classifiers).
check_bg() {
  local name
  for name in "${!BG_PIDS[@]}"; do
    if ! kill -0 "${BG_PIDS[$name]}" 2>/dev/null; then
      die "background step '$name' (srun pid ${BG_PIDS[$name]}) died; see $LOG_DIR/$name.log"
    fi
  done
}

# Stop only the steps this script started, by PID, keeping the exit status; remove the
# token file a serve_classifiers job wrote.
cleanup() {
  local rc=$? name
  for name in "${!BG_PIDS[@]}"; do
    kill "${BG_PIDS[$name]}" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  [[ -n "${TOKEN_FILE_TO_REMOVE:-}" ]] && rm -f "$TOKEN_FILE_TO_REMOVE"
  exit "$rc"
}

# ---------------------------------------------------------------------------------------------
# Site values
# ---------------------------------------------------------------------------------------------

load_site() {
  local site_file=${DARLING_SITE_ENV:-$DARLING_ROOT/slurm/site.env}
  if [[ -n "${DARLING_SITE_ENV:-}" && ! -f "$DARLING_SITE_ENV" ]]; then
    die "DARLING_SITE_ENV=$DARLING_SITE_ENV: no such file"
  fi
  if [[ -f "$site_file" ]]; then
    log "site values from $site_file"
    # shellcheck source=/dev/null
    source "$site_file"
  fi
}

# require NAME "what it is": a clear error naming the variable and where to set it.
require() {
  local name=$1 what=$2
  if [[ -z "${!name:-}" ]]; then
    die "$name is not set: $what. Set it in the environment or in the site file" \
      "(copy slurm/site.example.env to slurm/site.env, or point DARLING_SITE_ENV at one)."
  fi
}

require_dir() {
  local name=$1
  if ! is_dry_run && [[ ! -d "${!name}" ]]; then
    die "$name=${!name}: no such directory on this node"
  fi
}

# ---------------------------------------------------------------------------------------------
# Allocation
# ---------------------------------------------------------------------------------------------

# NODES (array) from SLURM_JOB_NODELIST; empty in a dry run without an allocation.
read_nodes() {
  local nodelist=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}
  NODES=()
  if [[ -z "$nodelist" ]]; then
    is_dry_run || die "no SLURM_JOB_NODELIST: submit with sbatch (or use --dry-run)"
    return 0
  fi
  mapfile -t NODES < <(scontrol show hostnames "$nodelist")
  [[ ${#NODES[@]} -gt 0 ]] || die "scontrol show hostnames $nodelist returned no nodes"
  if [[ -n "${SLURM_JOB_NUM_NODES:-}" && "$SLURM_JOB_NUM_NODES" != "${#NODES[@]}" ]]; then
    die "SLURM_JOB_NUM_NODES=$SLURM_JOB_NUM_NODES but the node list has ${#NODES[@]} nodes"
  fi
}

# First IPv4 address of a node (Ray wants an address, not a name); the name if none resolves.
node_address() {
  local address
  address=$(getent ahostsv4 "$1" 2>/dev/null | awk 'NR == 1 {print $1}' || true)
  echo "${address:-$1}"
}

# ---------------------------------------------------------------------------------------------
# Containers (pyxis)
# ---------------------------------------------------------------------------------------------

# CONTAINER_ARGS (array): image, mounts, workdir for every containerised step.
container_args() {
  local mounts=("$RESULTS_DIR:$RESULTS_DIR")
  [[ -n "${DARLING_CODE_DIR:-}" ]] && mounts+=("$DARLING_CODE_DIR:$CONTAINER_WORKDIR")
  # A user's own task (config, modules, data): at the same path, so its paths hold inside.
  [[ -n "${USER_DIR:-}" ]] && mounts+=("$USER_DIR:$USER_DIR")
  # The configs name data/... relative to the repository root: mount the data there.
  [[ -n "${DATA_DIR:-}" ]] && mounts+=("$DATA_DIR:$CONTAINER_WORKDIR/data")
  [[ -n "${HF_HOME:-}" ]] && mounts+=("$HF_HOME:$HF_HOME")
  # The HF->Megatron conversion directory (train.sh), when no other mount holds it.
  if [[ -n "${NRL_MEGATRON_CHECKPOINT_DIR:-}" ]] && ! is_mounted "$NRL_MEGATRON_CHECKPOINT_DIR"; then
    mounts+=("$NRL_MEGATRON_CHECKPOINT_DIR:$NRL_MEGATRON_CHECKPOINT_DIR")
  fi
  local joined
  joined=$(
    IFS=,
    echo "${mounts[*]}"
  )
  [[ -n "${CONTAINER_MOUNTS:-}" ]] && joined+=",$CONTAINER_MOUNTS"
  CONTAINER_ARGS=(
    --container-image="$CONTAINER_IMAGE"
    --container-mounts="$joined"
    --container-workdir="$CONTAINER_WORKDIR"
    --no-container-mount-home
  )
}

# Whether PATH is inside a directory mounted at the same place in every container:
# RESULTS_DIR, HF_HOME, USER_DIR, or the destination of a CONTAINER_MOUNTS entry
# (src:dst[:flags]).
is_mounted() {
  local path=${1%/} entry dst
  local -a inside=("$RESULTS_DIR" "${HF_HOME:-}" "${USER_DIR:-}") extra=()
  IFS=, read -r -a extra <<<"${CONTAINER_MOUNTS:-}"
  for entry in "${extra[@]}"; do
    IFS=: read -r _ dst _ <<<"$entry"
    inside+=("${dst:-$entry}")
  done
  for dst in "${inside[@]}"; do
    dst=${dst%/}
    [[ -n "$dst" && ("$path" == "$dst" || "$path" == "$dst"/*) ]] && return 0
  done
  return 1
}

# GRES_ARGS (array): the GPUs every step asks for. A step of an --exclusive job gets none of
# the GPUs the job holds implicitly, so on clusters that schedule GPUs as GRES (with device
# cgroups) each step must ask: STEP_GRES=auto (default) passes --gres=gpu:GPUS_PER_NODE when
# sinfo reports GPU GRES for the job's partition, none passes nothing, and any other value
# is passed as it is (--gres=gpu:h100:8). Steps overlap (--overlap), so they share the GPUs.
step_gres() {
  local mode=${STEP_GRES:-auto} reported=""
  GRES_ARGS=()
  case "$mode" in
    none) ;;
    auto)
      if command -v sinfo >/dev/null 2>&1; then
        reported=$(sinfo -h -o %G ${SLURM_JOB_PARTITION:+-p "$SLURM_JOB_PARTITION"} 2>/dev/null || true)
      fi
      if grep -q 'gpu' <<<"$reported"; then
        GRES_ARGS=(--gres="gpu:$GPUS_PER_NODE")
        log "GPU GRES on this partition ($(echo "$reported" | sort -u | tr '\n' ' ')): steps ask for ${GRES_ARGS[*]}"
      else
        log "no GPU GRES reported by sinfo: steps ask for no --gres (STEP_GRES=gpu:N to force)"
      fi
      ;;
    *) GRES_ARGS=(--gres="$mode") ;;
  esac
}

# SRUN (array): srun of one task on one node, in the container named $2 (named per job and
# restart, so no state leaks between jobs), with the whole environment plus STEP_ENV and any
# NAME=VALUE given after the log file (srun --export splits on commas: none in a value).
STEP_ENV=()
# shellcheck disable=SC2206  # EXTRA_SRUN_ARGS is a list of words on purpose
container_srun() {
  local node=$1 name=$2 logfile=$3
  shift 3
  local extra=(${EXTRA_SRUN_ARGS:-}) exports="ALL" pair
  for pair in "${STEP_ENV[@]}" "$@"; do
    [[ "$pair" != *,* ]] || die "cannot pass '$pair' to the containers: srun --export splits on commas"
    exports+=",$pair"
  done
  SRUN=(srun --overlap --nodes=1 --ntasks=1 -w "$node" "${GRES_ARGS[@]}" "${extra[@]}"
    "${CONTAINER_ARGS[@]}" --export="$exports"
    --container-name="$name" --output="$logfile")
}

container_name() {
  echo "darling-${SLURM_JOB_ID:-dryrun}-r${SLURM_RESTART_COUNT:-0}-$1"
}

# ---------------------------------------------------------------------------------------------
# Memory plan
# ---------------------------------------------------------------------------------------------

# Runs darling-plan on the config with the user's overrides (inside the container on the
# head node; locally in a dry run) and sources the launcher facts it writes (CFG_*).
run_plan() {
  local head=$1 layout_file=$2
  shift 2
  local plan=(python -m darling_nemo.plan "$CONFIG" "$@" --gpu-memory "${GPU_MEMORY_GIB:-auto}"
    --layout-env "$layout_file")
  if [[ "${DARLING_SKIP_PLAN:-0}" == 1 ]]; then
    log "DARLING_SKIP_PLAN=1: the plan is printed but does not stop the job"
  else
    plan+=(--check)
  fi
  [[ -n "${CLASSIFIER_MODEL:-}" ]] && plan+=(--classifier-model "$CLASSIFIER_MODEL")
  container_srun "$head" "$(container_name head)" "$LOG_DIR/plan.log"
  if is_dry_run; then
    print_cmd "${SRUN[@]}" "${plan[@]}"
    log "dry run: the plan runs here, with ${DARLING_PYTHON:-python3}"
    local python
    read -r -a python <<<"${DARLING_PYTHON:-python3}"
    (cd "$DARLING_ROOT" && "${python[@]}" "${plan[@]:1}") ||
      die "memory plan failed (above). A dry run runs it here with" \
        "DARLING_PYTHON=${DARLING_PYTHON:-python3}, which needs darling-nemo's dependencies:" \
        "DARLING_PYTHON='uv run python' in a checkout"
  else
    print_cmd "${SRUN[@]}" "${plan[@]}"
    "${SRUN[@]}" "${plan[@]}" || die "memory plan failed: $(tail -n 5 "$LOG_DIR/plan.log")"
    cat "$LOG_DIR/plan.log"
  fi
  # shellcheck source=/dev/null
  source "$layout_file"
}

# ---------------------------------------------------------------------------------------------
# Classifier servers
# ---------------------------------------------------------------------------------------------

# The job's secret (darling_nemo/judges/auth.py): every classifier server it starts refuses
# a request without it, and its driver sends it. Made here from /dev/urandom, exported (srun
# --export=ALL puts it in every step's environment, which only this user can read), never
# printed, never on a command line (ps and the job log show those). A token given to the
# job (its submitter's environment) is not reused: each job has its own.
make_job_token() {
  unset DARLING_JUDGE_TOKEN_FILE
  DARLING_JUDGE_TOKEN=$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
  [[ ${#DARLING_JUDGE_TOKEN} -ge 40 ]] || die "could not make the job's token from /dev/urandom"
  export DARLING_JUDGE_TOKEN
}

# Writes the job's token to FILE, readable by this user only (printf is a shell builtin: the
# token is on no command line), for training jobs that use this job's servers.
write_job_token() {
  local file=$1
  if is_dry_run; then
    log "dry run: the servers' token would be written to $file (mode 0600)"
    return 0
  fi
  (
    umask 077
    rm -f "$file"
    printf '%s\n' "$DARLING_JUDGE_TOKEN" >"$file"
  ) || die "cannot write the servers' token to $file"
}

# Where the classifier servers listen: the node's address on the network the driver reaches
# it by (what its SLURM name resolves to), not every interface; CLASSIFIER_BIND_HOST (a site
# value) overrides it, e.g. 0.0.0.0 where the driver reaches the node by another network.
classifier_bind_host() {
  echo "${CLASSIFIER_BIND_HOST:-$(node_address "$1")}"
}

# Starts darling-serve-classifiers on `node` for GPUs given as "0,1,..." and sets ENDPOINTS.
start_classifiers() {
  local node=$1 gpus=$2 port=${CLASSIFIER_BASE_PORT:-8000} model=$3
  local endpoints_file="$LOG_DIR/classifier_endpoints.yaml"
  local serve=(python -m darling_nemo.serve_classifiers "model=$model" "gpus=[$gpus]" "base_port=$port"
    "host=$(classifier_bind_host "$node")" "advertise_host=$node" "log_dir=$LOG_DIR/classifiers"
    "endpoints_file=$endpoints_file")
  container_srun "$node" "$(container_name classifiers)" "$LOG_DIR/classifiers.log"
  run_bg classifiers "${SRUN[@]}" "${serve[@]}"
  local urls=() k count
  count=$(tr ',' '\n' <<<"$gpus" | grep -c .)
  for ((k = 0; k < count; k++)); do
    urls+=("http://$node:$((port + k))")
  done
  ENDPOINTS=$(
    IFS=,
    echo "${urls[*]}"
  )
  if ! is_dry_run; then
    local start=$SECONDS
    until [[ -s "$endpoints_file" ]]; do
      check_bg
      ((SECONDS - start < ${CLASSIFIER_READY_TIMEOUT_S:-1200})) ||
        die "classifier servers not ready after $((SECONDS - start))s; see $LOG_DIR/classifiers"
      sleep "${POLL_S:-5}"
    done
    log "classifier servers ready on $node"
  fi
}

# ---------------------------------------------------------------------------------------------
# Ray
# ---------------------------------------------------------------------------------------------

# The allow-list of variables Ray gets (darling_nemo/nemo_rl/ray_env.py: RAY_ENV_VARS and
# RAY_ENV_PREFIXES, with the reason for each; tests/cluster/test_slurm.py checks this copy).
RAY_ENV_NAMES="PATH HOME USER LOGNAME LANG LC_ALL TZ TMPDIR LD_LIBRARY_PATH VIRTUAL_ENV
PYTHONPATH PYTHONUNBUFFERED PYTHONHASHSEED OMP_NUM_THREADS MKL_NUM_THREADS
TOKENIZERS_PARALLELISM TRANSFORMERS_OFFLINE TRANSFORMERS_CACHE HF_HOME HF_HUB_CACHE
HF_HUB_OFFLINE HF_DATASETS_OFFLINE NEMO_RL_PY_EXECUTABLES_SYSTEM DARLING_REHEARSAL_DIR
XDG_CACHE_HOME GLOO_SOCKET_IFNAME HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy
no_proxy"
RAY_ENV_PREFIXES="CUDA_ NCCL_ NVTE_ TORCH_ PYTORCH_ TORCHINDUCTOR_ TRITON_ NRL_ NEMO_RL_ VLLM_ RAY_
HF_ WANDB_ UV_ DARLING_ LC_"

# RAY_ENV_ARGS (array): env(1)'s arguments that leave `ray start` only the allow-list: `-u NAME`
# for every other exported variable and for every name that marks a secret (as
# darling_nemo/judges/auth.py's is_secret_name), even under an allowed prefix; a URL value
# without its `user:password@`. Ray's workers inherit the environment of `ray start`, and an
# actor that builds workers (the reward model's) copies its own into their runtime_env, which
# Ray's state lists. DARLING_RAY_ENV_EXTRA names more variables (the driver refuses a
# secret-looking one; here it is unset all the same).
ray_env_args() {
  local name upper prefix allowed value unsets=() values=()
  local pattern='(^|_)TOKENS?(_|$)|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|(^|_)KEY(_|$)'
  local allowed_extra=${DARLING_RAY_ENV_EXTRA:-}
  local names=" ${RAY_ENV_NAMES//$'\n'/ } ${allowed_extra//,/ } "
  while read -r name; do
    upper=${name^^}
    allowed=0
    [[ "$names" == *" $name "* ]] && allowed=1
    for prefix in $RAY_ENV_PREFIXES; do
      [[ "$name" == "$prefix"* ]] && allowed=1
    done
    if [[ "$name" =~ ^(WANDB_API_KEY|HF_TOKEN|HUGGING_FACE_HUB_TOKEN|DARLING_JUDGE_TOKEN)$ ]] ||
      [[ "$upper" != *_FILE && "$upper" =~ $pattern ]]; then
      allowed=0
    fi
    if ((!allowed)); then
      unsets+=(-u "$name")
      continue
    fi
    value=${!name}
    if [[ "$value" == *://*@* || ("${name,,}" == *proxy && "$value" == *@*) ]]; then
      value=$(sed -E 's#://[^[:space:]/]*@#://#g' <<<"$value")
      [[ "${name,,}" == *proxy ]] && value=$(sed -E 's#^[^[:space:]/]*@##' <<<"$value")
      values+=("$name=$value")
    fi
  done < <(compgen -e)
  RAY_ENV_ARGS=("${unsets[@]}" "${values[@]}") # env(1) takes its options first
}

# Ray head on NODES[0], one worker per other node, each in its container; waits until the
# cluster has all its GPUs. Ray 2.46 has no authentication: its ports (6379 and the ones
# each node opens) are reachable by whoever reaches the nodes (docs/cluster.md, Security);
# its dashboard, which would serve Ray's state and a job API over HTTP, is off.
start_ray() {
  local num_nodes=$1 gpus=$2 visible=$3
  local head=${NODES[0]} port=${RAY_PORT:-6379}
  RAY_HEAD_ADDRESS="$(node_address "$head"):$port"
  ray_env_args
  local env_prefix=(env "${RAY_ENV_ARGS[@]}")
  [[ -n "$visible" ]] && env_prefix+=("CUDA_VISIBLE_DEVICES=$visible")
  local common=(--num-gpus="$gpus" --disable-usage-stats --block)
  container_srun "$head" "$(container_name head)" "$LOG_DIR/ray-head.log"
  run_bg ray-head "${SRUN[@]}" "${env_prefix[@]}" ray start --head \
    --node-ip-address="${RAY_HEAD_ADDRESS%:*}" --port="$port" --include-dashboard=false \
    "${common[@]}"
  local i
  for ((i = 1; i < num_nodes; i++)); do
    container_srun "${NODES[$i]}" "$(container_name "worker-$i")" "$LOG_DIR/ray-worker-$i.log"
    run_bg "ray-worker-$i" "${SRUN[@]}" "${env_prefix[@]}" ray start \
      --address="$RAY_HEAD_ADDRESS" --node-ip-address="$(node_address "${NODES[$i]}")" \
      "${common[@]}"
  done
  local want=$((num_nodes * gpus)) have=0 start=$SECONDS
  container_srun "$head" "$(container_name head)" "$LOG_DIR/ray-status.log"
  print_cmd "${SRUN[@]}" ray status "--address=$RAY_HEAD_ADDRESS"
  is_dry_run && return 0
  while ((have < want)); do
    check_bg
    ((SECONDS - start < ${RAY_START_TIMEOUT_S:-900})) ||
      die "Ray has $have of $want GPUs after $((SECONDS - start))s; see $LOG_DIR/ray-*.log"
    sleep "${POLL_S:-5}"
    "${SRUN[@]}" ray status "--address=$RAY_HEAD_ADDRESS" >/dev/null 2>&1 || continue
    have=$(grep -oE '/[0-9.]+ GPU' "$LOG_DIR/ray-status.log" | tail -n1 | tr -dc '0-9.' || true)
    have=${have%%.*}
    have=${have:-0}
  done
  log "Ray cluster up: $want GPUs on $num_nodes nodes, head $RAY_HEAD_ADDRESS"
}

# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------

parse_args() {
  USER_OVERRIDES=()
  local arg
  for arg in "$@"; do
    case "$arg" in
      --dry-run) DRY_RUN=1 ;;
      -*) die "unknown option $arg (only --dry-run; everything else is a key=value override)" ;;
      *) USER_OVERRIDES+=("$arg") ;;
    esac
  done
  if [[ -n "${EXTRA_OVERRIDES:-}" ]]; then
    local extra
    read -r -a extra <<<"$EXTRA_OVERRIDES"
    USER_OVERRIDES+=("${extra[@]}")
  fi
}

common_setup() {
  [[ "${SMOKE:-0}" =~ ^[01]$ ]] || die "SMOKE=$SMOKE: expected 0 or 1"
  # The smoke is a training job's (recipe --smoke); elsewhere it would silently do the full job.
  if [[ "${SMOKE:-0}" == 1 && "${FUNCNAME[1]:-}" != darling_train ]]; then
    die "SMOKE=1 is for the training jobs (qwen3_4b_math, llama8b_wildchat," \
      "llama70b_wildchat .sub); this job has no smoke"
  fi
  load_site
  require CONTAINER_IMAGE "the squashfs made by containers/make_squashfs.sh (or an image pyxis can pull)"
  require RESULTS_DIR "a directory on a shared filesystem for checkpoints and logs"
  require_dir RESULTS_DIR
  [[ -n "${DATA_DIR:-}" ]] && require_dir DATA_DIR
  [[ -n "${HF_HOME:-}" ]] && require_dir HF_HOME
  [[ -n "${DARLING_CODE_DIR:-}" ]] && require_dir DARLING_CODE_DIR
  user_dir
  GPUS_PER_NODE=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-8}}
  [[ "$GPUS_PER_NODE" =~ ^[0-9]+$ ]] || die "GPUS_PER_NODE=$GPUS_PER_NODE is not a number"
  # Compute nodes usually have no internet: models and datasets come from HF_HOME.
  export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
  [[ -n "${HF_HOME:-}" ]] && export HF_HOME
  export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
  container_args
  step_gres
  ulimit -Sn 65535 2>/dev/null || true
}

# USER_DIR: the folder of a user's own task (its config, reward modules and data), anywhere
# on a filesystem the nodes share. Every container mounts it at the same absolute path and
# gets USER_DIR in its environment, so the config's absolute paths, and ${oc.env:USER_DIR}/...
# in it, hold both here and inside (docs/your-own-task.md).
user_dir() {
  [[ -n "${USER_DIR:-}" ]] || return 0
  [[ "$USER_DIR" == /* ]] || die "USER_DIR=$USER_DIR: must be an absolute path (the folder of your task)"
  [[ "$USER_DIR" != *[,:]* ]] || die "USER_DIR=$USER_DIR: no ',' or ':' (srun --container-mounts splits on them)"
  [[ -d "$USER_DIR" ]] || die "USER_DIR=$USER_DIR: no such directory"
  USER_DIR=${USER_DIR%/}
  export USER_DIR
}

# One line per container mount (source -> path inside), as --container-mounts gets them.
print_mounts() {
  local entry src dst
  local -a entries=()
  IFS=, read -r -a entries <<<"${CONTAINER_ARGS[1]#--container-mounts=}"
  for entry in "${entries[@]}"; do
    IFS=: read -r src dst _ <<<"$entry"
    log "mount: $src -> ${dst:-$src}"
  done
}

print_environment() {
  log "container image: $CONTAINER_IMAGE"
  print_mounts
  log "environment passed to the containers: HF_HOME=${HF_HOME:-<unset>}" \
    "HF_HUB_OFFLINE=$HF_HUB_OFFLINE WANDB_API_KEY=$([[ -n "${WANDB_API_KEY:-}" ]] && echo '<set, hidden>' || echo '<unset>')"
}

darling_serve_classifiers() {
  parse_args "$@"
  common_setup
  RUN_NAME=${RUN_NAME:-classifiers-${SLURM_JOB_ID:-dryrun}}
  LOG_DIR=$RESULTS_DIR/$RUN_NAME/slurm/${SLURM_JOB_ID:-dryrun}-r${SLURM_RESTART_COUNT:-0}
  if is_dry_run; then
    log "dry run: nothing is started; commands are printed as '+ ...'"
  else
    mkdir -p "$LOG_DIR"
    trap cleanup EXIT
  fi
  require CLASSIFIER_MODEL "the classifier to serve (a path under a mount, or a hub name in HF_HOME)"
  print_environment
  read_nodes
  [[ ${#NODES[@]} -gt 0 ]] || NODES=(node001)
  [[ ${#NODES[@]} -eq 1 ]] || die "serve_classifiers runs on one node; the allocation has ${#NODES[@]}"
  make_job_token
  local token_file=$LOG_DIR/judge_token
  write_job_token "$token_file"
  is_dry_run || TOKEN_FILE_TO_REMOVE=$token_file
  start_classifiers "${NODES[0]}" "$(seq -s, 0 $((${CLASSIFIER_GPUS:-$GPUS_PER_NODE} - 1)))" \
    "$CLASSIFIER_MODEL"
  log "endpoints for training jobs: CLASSIFIER_ENDPOINTS=$ENDPOINTS" \
    "DARLING_JUDGE_TOKEN_FILE=$token_file (the servers' token, readable by you only; removed" \
    "when this job ends)"
  is_dry_run && return 0
  # Serve until the job ends (time limit or scancel); fail if the servers die.
  local rc=0
  wait "${BG_PIDS[classifiers]}" || rc=$?
  return "$rc"
}

# The training entry point (darling_train) and its helpers.
# shellcheck source=slurm/train.sh
source "$(dirname "${BASH_SOURCE[0]}")/train.sh"

# ---------------------------------------------------------------------------------------------
# What an eval job evaluates: MODEL (a Hugging Face folder or hub name) or RUN [STEP] (a
# training run's checkpoint, exported to step_N/hf by `python -m darling_nemo.export`)
# ---------------------------------------------------------------------------------------------

# SOURCE_ARGS (array): the eval recipe's overrides; EVAL_NAME's default; SOURCE_TEXT.
# shellcheck disable=SC2034  # SOURCE_ARGS and SOURCE_TEXT are read by the .sub that calls this
eval_source() {
  if [[ -n "${RUN:-}" && -n "${MODEL:-}" ]]; then
    die "set MODEL (a Hugging Face model) or RUN (a training run), not both"
  elif [[ -n "${RUN:-}" ]]; then
    STEP=${STEP:-latest}
    SOURCE_ARGS=("run=$RUN" "step=$STEP")
    EVAL_NAME=${EVAL_NAME:-$(basename "${RUN%/}")-step_$STEP}
    SOURCE_TEXT="run $RUN (step $STEP)"
  elif [[ -n "${MODEL:-}" ]]; then
    SOURCE_ARGS=("generator.model=$MODEL")
    EVAL_NAME=${EVAL_NAME:-$(basename "${MODEL%/}")}
    SOURCE_TEXT=$MODEL
  else
    die "MODEL is not set (nor RUN): give the checkpoint to evaluate (a Hugging Face directory or hub name), or a training run folder (RESULTS_DIR/RUN_NAME, with STEP [latest])"
  fi
}

# With RUN: export the step (cached) on node $1 before any evaluation starts.
export_run_step() {
  [[ -n "${RUN:-}" ]] || return 0
  container_srun "$1" "$(container_name export)" "$LOG_DIR/export.log"
  run "${SRUN[@]}" python -m darling_nemo.export "$RUN" --step "$STEP" ||
    die "export of $RUN failed: $(tail -n 3 "$LOG_DIR/export.log")"
}
