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
# the memory plan, locally, with $DARLING_PYTHON.

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

# Stop only the steps this script started, by PID, keeping the exit status.
cleanup() {
  local rc=$? name
  for name in "${!BG_PIDS[@]}"; do
    kill "${BG_PIDS[$name]}" 2>/dev/null || true
  done
  wait 2>/dev/null || true
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

# The job's end as epoch seconds (now + the time squeue says is left); empty if unlimited or
# unknown. The driver turns it into NeMo-RL's checkpointing.checkpoint_must_save_by right
# before grpo_train (nemo_rl_adapter.train): NeMo-RL counts that deadline from the start of
# grpo_train, which comes after the plan, the classifiers, Ray and NeMo-RL's own setup.
job_end_epoch() {
  local left days=0 h=0 m=0 sec=0 parts
  [[ -n "${SLURM_JOB_ID:-}" ]] && command -v squeue >/dev/null 2>&1 || return 0
  left=$(squeue -h -j "$SLURM_JOB_ID" -o %L 2>/dev/null | head -n1 || true)
  case "$left" in
    "" | UNLIMITED | NOT_SET | INVALID) return 0 ;;
  esac
  if [[ "$left" == *-* ]]; then
    days=${left%%-*}
    left=${left#*-}
  fi
  IFS=: read -r -a parts <<<"$left"
  case ${#parts[@]} in
    3) h=${parts[0]} m=${parts[1]} sec=${parts[2]} ;;
    2) m=${parts[0]} sec=${parts[1]} ;;
    1) sec=${parts[0]} ;;
  esac
  echo $(($(date +%s) + 10#$days * 86400 + 10#$h * 3600 + 10#$m * 60 + 10#$sec))
}

# Newest step_N under the run's checkpoint directory (-1 if none; tmp_step_N is unfinished).
newest_step() {
  local dir step latest=-1
  for dir in "$RUN_DIR"/checkpoints/step_*; do
    step=${dir##*/step_}
    [[ -d "$dir" && "$step" =~ ^[0-9]+$ ]] && ((10#$step > latest)) && latest=$((10#$step))
  done
  echo "$latest"
}

# ---------------------------------------------------------------------------------------------
# Containers (pyxis)
# ---------------------------------------------------------------------------------------------

# CONTAINER_ARGS (array): image, mounts, workdir for every containerised step.
container_args() {
  local mounts=("$RESULTS_DIR:$RESULTS_DIR")
  [[ -n "${DARLING_CODE_DIR:-}" ]] && mounts+=("$DARLING_CODE_DIR:$CONTAINER_WORKDIR")
  # The configs name data/... relative to the repository root: mount the data there.
  [[ -n "${DATA_DIR:-}" ]] && mounts+=("$DATA_DIR:$CONTAINER_WORKDIR/data")
  [[ -n "${HF_HOME:-}" ]] && mounts+=("$HF_HOME:$HF_HOME")
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

# srun of one task on one node, in the container named $2 (named per job and restart, so no
# state leaks between jobs).
# shellcheck disable=SC2206  # EXTRA_SRUN_ARGS is a list of words on purpose
container_srun() {
  local node=$1 name=$2 logfile=$3
  shift 3
  local extra=(${EXTRA_SRUN_ARGS:-})
  SRUN=(srun --overlap --nodes=1 --ntasks=1 -w "$node" "${GRES_ARGS[@]}" "${extra[@]}"
    "${CONTAINER_ARGS[@]}"
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

# Starts darling-serve-classifiers on `node` for GPUs given as "0,1,..." and sets ENDPOINTS.
start_classifiers() {
  local node=$1 gpus=$2 port=${CLASSIFIER_BASE_PORT:-8000} model=$3
  local endpoints_file="$LOG_DIR/classifier_endpoints.yaml"
  local serve=(python -m darling_nemo.serve_classifiers "model=$model" "gpus=[$gpus]" "base_port=$port"
    "advertise_host=$node" "log_dir=$LOG_DIR/classifiers" "endpoints_file=$endpoints_file")
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

# Ray head on NODES[0], one worker per other node, each in its container; waits until the
# cluster has all its GPUs.
start_ray() {
  local num_nodes=$1 gpus=$2 visible=$3
  local head=${NODES[0]} port=${RAY_PORT:-6379}
  RAY_HEAD_ADDRESS="$(node_address "$head"):$port"
  local env_prefix=()
  [[ -n "$visible" ]] && env_prefix=(env "CUDA_VISIBLE_DEVICES=$visible")
  local common=(--num-gpus="$gpus" --disable-usage-stats --block)
  container_srun "$head" "$(container_name head)" "$LOG_DIR/ray-head.log"
  run_bg ray-head "${SRUN[@]}" "${env_prefix[@]}" ray start --head \
    --node-ip-address="${RAY_HEAD_ADDRESS%:*}" --port="$port" "${common[@]}"
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
  load_site
  require CONTAINER_IMAGE "the squashfs made by containers/make_squashfs.sh (or an image pyxis can pull)"
  require RESULTS_DIR "a directory on a shared filesystem for checkpoints and logs"
  require_dir RESULTS_DIR
  [[ -n "${DATA_DIR:-}" ]] && require_dir DATA_DIR
  [[ -n "${HF_HOME:-}" ]] && require_dir HF_HOME
  [[ -n "${DARLING_CODE_DIR:-}" ]] && require_dir DARLING_CODE_DIR
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

print_environment() {
  log "container image: $CONTAINER_IMAGE"
  log "environment passed to the containers: HF_HOME=${HF_HOME:-<unset>}" \
    "HF_HUB_OFFLINE=$HF_HUB_OFFLINE WANDB_API_KEY=$([[ -n "${WANDB_API_KEY:-}" ]] && echo '<set, hidden>' || echo '<unset>')"
}

darling_train() {
  parse_args "$@"
  common_setup
  : "${JOB_RECIPE:?the .sub must set JOB_RECIPE}" "${JOB_CONFIG:?the .sub must set JOB_CONFIG}"
  CONFIG=${CONFIG:-$JOB_CONFIG}
  [[ -f "$DARLING_ROOT/$CONFIG" ]] || die "CONFIG=$CONFIG: no such file under $DARLING_ROOT"
  RUN_NAME=${RUN_NAME:-${SLURM_JOB_NAME:-darling}-${SLURM_JOB_ID:-dryrun}}
  RUN_DIR=$RESULTS_DIR/$RUN_NAME
  LOG_DIR=$RUN_DIR/slurm/${SLURM_JOB_ID:-dryrun}-r${SLURM_RESTART_COUNT:-0}
  local layout_file=$LOG_DIR/layout.env
  if is_dry_run; then
    layout_file=$(mktemp)
    log "dry run: nothing is started; commands are printed as '+ ...'"
  else
    mkdir -p "$LOG_DIR"
    trap cleanup EXIT
    trap on_usr1 USR1
  fi
  log "run $RUN_NAME: logs in $LOG_DIR"
  print_environment

  # Site model paths replace the config's hub names (interpolations follow them).
  [[ -n "${POLICY_MODEL:-}" ]] && USER_OVERRIDES+=("policy.model_name=$POLICY_MODEL")
  [[ -n "${REWARD_MODEL:-}" ]] && USER_OVERRIDES+=("env.reward_model.model_name=$REWARD_MODEL")

  read_nodes
  run_plan "${NODES[0]:-node001}" "$layout_file" "${USER_OVERRIDES[@]}"
  is_dry_run && rm -f "$layout_file"

  # Where the classifiers run: servers of a serve_classifiers job (CLASSIFIER_ENDPOINTS), an
  # extra node (default), or the head node's GPUs the policy does not use.
  local placement=none
  if [[ "$CFG_JUDGE_KIND" == served ]]; then
    if [[ -n "${CLASSIFIER_ENDPOINTS:-}" ]]; then
      placement=external
    else
      placement=${CLASSIFIER_PLACEMENT:-node}
    fi
  fi
  local want_nodes=$CFG_NUM_NODES
  [[ "$placement" == node ]] && want_nodes=$((CFG_NUM_NODES + 1))
  if [[ ${#NODES[@]} -eq 0 ]]; then
    local i
    for ((i = 1; i <= want_nodes; i++)); do
      NODES+=("$(printf 'node%03d' "$i")")
    done
    log "dry run without an allocation: pretending nodes ${NODES[*]}"
  fi
  if [[ ${#NODES[@]} -ne $want_nodes ]]; then
    local why="cluster.num_nodes=$CFG_NUM_NODES"
    [[ "$placement" == node ]] && why+=" + 1 classifier node"
    die "the config needs $want_nodes nodes ($why; judge $CFG_JUDGE_KIND, classifiers" \
      "$placement) but the allocation has ${#NODES[@]}: submit with sbatch --nodes=$want_nodes"
  fi
  ((CFG_GPUS_PER_NODE <= GPUS_PER_NODE)) ||
    die "cluster.gpus_per_node=$CFG_GPUS_PER_NODE but the nodes have $GPUS_PER_NODE GPUs"

  local ray_visible=""
  case "$placement" in
    none) log "judge '$CFG_JUDGE_KIND': no classifier servers" ;;
    external) ENDPOINTS=$CLASSIFIER_ENDPOINTS ;;
    node)
      local all
      all=$(seq -s, 0 $((${CLASSIFIER_GPUS:-$GPUS_PER_NODE} - 1)))
      start_classifiers "${NODES[$CFG_NUM_NODES]}" "$all" "${CLASSIFIER_MODEL:-$CFG_CLASSIFIER_MODEL}"
      ;;
    gpus)
      local spare=$((GPUS_PER_NODE - CFG_GPUS_PER_NODE))
      ((CFG_NUM_NODES == 1 && spare > 0)) ||
        die "CLASSIFIER_PLACEMENT=gpus needs cluster.num_nodes=1 and cluster.gpus_per_node" \
          "below the node's $GPUS_PER_NODE GPUs (got $CFG_NUM_NODES x $CFG_GPUS_PER_NODE)"
      ray_visible=$(seq -s, 0 $((CFG_GPUS_PER_NODE - 1)))
      start_classifiers "${NODES[0]}" "$(seq -s, "$CFG_GPUS_PER_NODE" $((GPUS_PER_NODE - 1)))" \
        "${CLASSIFIER_MODEL:-$CFG_CLASSIFIER_MODEL}"
      ;;
    *) die "CLASSIFIER_PLACEMENT=$placement: expected node or gpus" ;;
  esac

  # Overrides the launcher adds: where this run's state goes, so that a requeued job finds
  # its checkpoints (NeMo-RL resumes from the newest step_N in checkpoint_dir by itself).
  local overrides=("${USER_OVERRIDES[@]}"
    "checkpointing.enabled=true" "checkpointing.checkpoint_dir=$RUN_DIR/checkpoints"
    "logger.log_dir=$RUN_DIR/logs")
  [[ -n "${ENDPOINTS:-}" ]] && overrides+=("darling.judge.endpoints=[$ENDPOINTS]")
  if [[ -n "${WANDB_API_KEY:-}" ]]; then
    overrides+=("logger.wandb_enabled=true" "logger.wandb.name=$RUN_NAME")
    [[ -n "${WANDB_PROJECT:-}" ]] && overrides+=("logger.wandb.project=$WANDB_PROJECT")
  fi
  local start_step
  start_step=$(newest_step)
  if ((start_step >= 0)); then
    log "resuming from $RUN_DIR/checkpoints/step_$start_step (restart ${SLURM_RESTART_COUNT:-0})"
  else
    log "no checkpoint in $RUN_DIR/checkpoints: starting from step 0"
  fi

  # The save deadline travels as the job's end time: the driver sets
  # checkpointing.checkpoint_must_save_by from it once NeMo-RL's setup is done.
  local driver_env="ALL" end_epoch margin_min=${SAVE_MARGIN_MIN:-20}
  [[ "$margin_min" =~ ^[0-9]+$ ]] || die "SAVE_MARGIN_MIN=$margin_min is not a whole number of minutes"
  end_epoch=$(job_end_epoch)
  if [[ -n "$end_epoch" ]]; then
    driver_env+=",DARLING_JOB_END_EPOCH=$end_epoch,DARLING_SAVE_MARGIN_S=$((margin_min * 60))"
    log "job ends at $(date -d "@$end_epoch" '+%F %T %Z' 2>/dev/null || echo "epoch $end_epoch"):" \
      "NeMo-RL saves and stops $margin_min min before"
  else
    log "no time limit reported by squeue: no save deadline"
  fi

  start_ray "$CFG_NUM_NODES" "$CFG_GPUS_PER_NODE" "$ray_visible"

  container_srun "${NODES[0]}" "$(container_name head)" "$LOG_DIR/driver.log"
  local driver=("${SRUN[@]}" --export="$driver_env,RAY_ADDRESS=$RAY_HEAD_ADDRESS"
    python "$JOB_RECIPE" --config "$CONFIG" "${overrides[@]}")
  print_cmd "${driver[@]}"
  is_dry_run && return 0
  local rc=0 when=""
  run_to_the_end "$LOG_DIR/driver.rc" "${driver[@]}" || rc=$?
  ((USR1_RECEIVED)) && when=" after the time-limit signal"
  log "driver exited with $rc$when; logs in $LOG_DIR"
  if ((rc == 0)); then
    requeue_if_unfinished "$start_step"
  fi
  return "$rc"
}

# run_to_the_end STATUS_FILE CMD...: runs CMD in the background, waits for it through any
# number of USR1s (on_usr1) and returns its exit status. The status goes through STATUS_FILE,
# not `wait`: when a trapped signal interrupts `wait` just as the child exits, bash 5.2 can
# lose the status, and a later `wait` returns -1 or blocks until every other step ends. The
# subshell ignores USR1 so that a signal sent to the whole job cannot kill it first.
run_to_the_end() {
  local status_file=$1 pid status
  shift
  rm -f "$status_file"
  (
    trap '' USR1
    status=0
    "$@" || status=$?
    echo "$status" >"$status_file"
  ) &
  pid=$!
  wait "$pid" 2>/dev/null || true # returns early (138) when USR1 arrives
  # Then poll: short naps first (the child is often exiting), 1 s once it runs on.
  local naps=(0.05 0.1 0.2 0.5 1) nap=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep "${naps[nap]}"
    nap=$((nap < ${#naps[@]} - 1 ? nap + 1 : nap))
  done
  [[ -s "$status_file" ]] || die "${1##*/} ended without an exit status in $status_file"
  status=$(<"$status_file")
  return "$status"
}

# What grpo_train (NeMo-RL v0.4.0) prints when it returns at checkpoint_must_save_by.
NEMO_RL_TIMEOUT_LINE="Timeout has been reached, stopping training early"

# After the driver exited 0: if NeMo-RL stopped at the save deadline with steps left (the
# timeout line in driver.log, the newest step_N below grpo.max_num_steps and newer than the
# one this run started from), requeue the job; the next run resumes from that checkpoint.
# SLURM then ends this run and puts the job back in the queue. Exit 0 either way.
requeue_if_unfinished() {
  local start_step=$1 latest max=${CFG_MAX_NUM_STEPS:-}
  grep -qF "$NEMO_RL_TIMEOUT_LINE" "$LOG_DIR/driver.log" 2>/dev/null || return 0
  latest=$(newest_step)
  if [[ -n "$max" ]] && ((latest >= max)); then
    log "the save deadline came at the last step ($latest of $max): training is done"
  elif ((latest <= start_step)); then
    log "warning: NeMo-RL stopped at the save deadline but no checkpoint newer than step" \
      "$start_step exists; not requeueing (raise the time limit or lower SAVE_MARGIN_MIN)"
  elif [[ "${AUTO_REQUEUE:-1}" != 1 || -z "${SLURM_JOB_ID:-}" ]]; then
    log "stopped at the save deadline at step $latest of ${max:-?}; AUTO_REQUEUE=0:" \
      "resubmit with RUN_NAME=$RUN_NAME to resume"
  else
    log "stopped at the save deadline at step $latest of ${max:-?}: requeueing job $SLURM_JOB_ID"
    run scontrol requeue "$SLURM_JOB_ID" ||
      die "scontrol requeue $SLURM_JOB_ID failed: resubmit with RUN_NAME=$RUN_NAME to resume"
  fi
}

# #SBATCH --signal=B:USR1@600: the time limit is 10 minutes away. Only noted: NeMo-RL saves
# by checkpoint_must_save_by (SAVE_MARGIN_MIN before the end) and the job requeues after the
# driver exits (requeue_if_unfinished); a requeue now would kill the driver in a save.
USR1_RECEIVED=0
on_usr1() {
  USR1_RECEIVED=1
  log "time limit in about 10 minutes (USR1): the driver keeps running"
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
  start_classifiers "${NODES[0]}" "$(seq -s, 0 $((${CLASSIFIER_GPUS:-$GPUS_PER_NODE} - 1)))" \
    "$CLASSIFIER_MODEL"
  log "endpoints for training jobs: CLASSIFIER_ENDPOINTS=$ENDPOINTS"
  is_dry_run && return 0
  # Serve until the job ends (time limit or scancel); fail if the servers die.
  local rc=0
  wait "${BG_PIDS[classifiers]}" || rc=$?
  return "$rc"
}
