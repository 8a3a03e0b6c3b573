# shellcheck shell=bash
# The training job of slurm/common.sh (sourced by it): the memory plan, the classifier
# servers, Ray, the driver, and what follows it (the save deadline and the requeue). In a
# dry run with NeMo-RL importable it also rehearses the job's own command line here.

# ---------------------------------------------------------------------------------------------
# Time limit and checkpoints
# ---------------------------------------------------------------------------------------------

# The job's end as epoch seconds (now + the time squeue says is left); empty if unlimited or
# unknown. The driver turns it into NeMo-RL's checkpointing.checkpoint_must_save_by right
# before grpo_train (darling_nemo/nemo_rl/adapter.py: train): NeMo-RL counts that deadline from the start of
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

# SMOKE=1: the job's own command with the recipe's --smoke (3 steps, a resume, a report).
is_smoke() {
  [[ "${SMOKE:-0}" == 1 ]]
}

# A smoke needs minutes, not the .sub's 24 hours: the job lowers its own time limit to
# SMOKE_TIME_LIMIT (default 1:30:00, SLURM's [D-]HH:MM:SS; users may lower their own jobs'
# limits) and is never requeued. Without scontrol (a dry run without an allocation) it says so.
shorten_for_smoke() {
  local limit=${SMOKE_TIME_LIMIT:-01:30:00}
  [[ "$limit" =~ ^([0-9]+-)?[0-9]+:[0-9]{2}:[0-9]{2}$ ]] ||
    die "SMOKE_TIME_LIMIT=$limit: expected [D-]HH:MM:SS, e.g. 01:30:00"
  if [[ -z "${SLURM_JOB_ID:-}" ]]; then
    log "smoke: time limit $limit (applied by the job itself under sbatch)"
    return 0
  fi
  run scontrol update "JobId=$SLURM_JOB_ID" "TimeLimit=$limit" Requeue=0 ||
    log "warning: scontrol could not lower the time limit to $limit; the smoke keeps the" \
      ".sub's (submit with sbatch --time=$limit to choose it)"
}

# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------

# NeMo-RL converts the policy's Hugging Face weights to Megatron once, into
# $NRL_MEGATRON_CHECKPOINT_DIR/<model> (else $HF_HOME/nemo_rl, else ~/.cache, neither shared
# here: HF_HOME is optional and the containers run without the home mount), and every rank on
# every node loads it from there. Default: RESULTS_DIR/megatron_checkpoints, shared and
# reused by later runs of the same model; a site value wins. Every step gets it (STEP_ENV)
# and the containers mount it when no other mount holds it (container_args).
megatron_checkpoint_dir() {
  local dir=${NRL_MEGATRON_CHECKPOINT_DIR:-$RESULTS_DIR/megatron_checkpoints}
  [[ "$dir" == /* ]] || die "NRL_MEGATRON_CHECKPOINT_DIR=$dir: must be an absolute path on a shared filesystem"
  [[ "$dir" != *[,:]* ]] || die "NRL_MEGATRON_CHECKPOINT_DIR=$dir: no ',' or ':' (srun --export and --container-mounts split on them)"
  if ! is_dry_run; then
    mkdir -p "$dir" || die "NRL_MEGATRON_CHECKPOINT_DIR=$dir: cannot create it"
  fi
  NRL_MEGATRON_CHECKPOINT_DIR=$dir
  STEP_ENV+=("NRL_MEGATRON_CHECKPOINT_DIR=$dir")
  container_args
  log "HF->Megatron conversion (once per model, read by every node): NRL_MEGATRON_CHECKPOINT_DIR=$dir"
}

# DRIVER_ENV (array): the job's end and the save margin for the driver, which sets
# checkpointing.checkpoint_must_save_by from them once NeMo-RL's setup is done.
save_deadline_env() {
  local end_epoch margin_min=${SAVE_MARGIN_MIN:-20}
  [[ "$margin_min" =~ ^[0-9]+$ ]] || die "SAVE_MARGIN_MIN=$margin_min is not a whole number of minutes"
  DRIVER_ENV=()
  end_epoch=$(job_end_epoch)
  if [[ -n "$end_epoch" ]]; then
    DRIVER_ENV=("DARLING_JOB_END_EPOCH=$end_epoch" "DARLING_SAVE_MARGIN_S=$((margin_min * 60))")
    log "job ends at $(date -d "@$end_epoch" '+%F %T %Z' 2>/dev/null || echo "epoch $end_epoch"):" \
      "NeMo-RL saves and stops $margin_min min before"
  else
    log "no time limit reported by squeue: no save deadline"
  fi
}

# CONFIG: relative to the checkout (as the containers' working directory, the image's copy
# of it), or a path inside a container mount: USER_DIR, mounted at the same path. A relative
# path that leads out of the checkout (../mine/nemo.yaml) is taken as the absolute path it
# names, which a container must mount.
check_config_path() {
  if [[ "$CONFIG" != /* ]]; then
    local root outside
    root=$(realpath -m -s "$DARLING_ROOT")
    outside=$(realpath -m -s "$root/$CONFIG")
    if [[ "$outside" == "$root"/* ]]; then
      [[ -f "$DARLING_ROOT/$CONFIG" ]] || die "CONFIG=$CONFIG: no such file under $DARLING_ROOT" \
        "(a config of your own: an absolute path under USER_DIR, your task's folder)"
      return 0
    fi
    CONFIG=$outside
  fi
  [[ -f "$CONFIG" ]] || die "CONFIG=$CONFIG: no such file"
  is_mounted "$(dirname "$CONFIG")" || die "CONFIG=$CONFIG is in no folder the containers" \
    "mount: set USER_DIR to your task's folder (mounted at the same path in every container)"
  log "config $CONFIG (inside a container mount, the same path in the containers)"
}

# Dry run where NeMo-RL does not import: the recipe's own --dry-run of the driver's config and
# overrides, here (NeMo-RL's keys, the data, a user's reward functions imported, checked and
# called once on the first prompt); a problem stops the dry run with the recipe's line.
check_driver_config() {
  local python out rc=0
  read -r -a python <<<"${DARLING_PYTHON:-python3}"
  local check=("${python[@]}" "$JOB_RECIPE" --config "$CONFIG" "$@" --dry-run)
  log "dry run: checking the driver's config here: $(print_cmd "${check[@]}" | cut -c3-)"
  out=$(cd "$DARLING_ROOT" && "${check[@]}" 2>&1) || rc=$?
  [[ -n "$out" ]] && printf '%s\n' "$out"
  ((rc == 0)) || die "the driver's config check failed (exit status $rc): $(tail -n 1 <<<"$out")"
}

# Dry run only: the recipe's --rehearse runs the driver's own config and overrides here, end
# to end at toy scale (it serves its own classifier in place of the job's endpoints), when
# DARLING_PYTHON can import nemo_rl: the container on a login node. It passes only with
# exit status 0 and `rehearsal: PASS` as its last line.
rehearse() {
  local python out import_error last rc=0
  read -r -a python <<<"${DARLING_PYTHON:-python3}"
  if ! import_error=$(cd "$DARLING_ROOT" && "${python[@]}" -c "import nemo_rl" 2>&1); then
    last=$(tail -n 1 <<<"$import_error")
    log "rehearsal skipped: DARLING_PYTHON=${DARLING_PYTHON:-python3} cannot import nemo_rl" \
      "(${last:-no message}); run the dry run in the container to rehearse"
    check_driver_config "$@"
    return 0
  fi
  local rehearsal=("${python[@]}" "$JOB_RECIPE" --config "$CONFIG" --rehearse "$@")
  log "dry run: rehearsing the driver's command line here: $(print_cmd "${rehearsal[@]}" | cut -c3-)"
  out=$(mktemp)
  (cd "$DARLING_ROOT" && "${rehearsal[@]}") 2>&1 | tee "$out" || rc=$?
  last=$(tail -n 1 "$out")
  rm -f "$out"
  if ((rc != 0)) || [[ "$last" != "rehearsal: PASS" ]]; then
    die "rehearsal failed (exit status $rc): ${last:-no output}"
  fi
  log "rehearsal passed"
}

# Where the classifiers run, after the plan (CFG_*): servers of a serve_classifiers job
# (CLASSIFIER_ENDPOINTS), an extra node (default), or the head node's GPUs the policy does
# not use. Checks the allocation against that, starts the servers, sets ENDPOINTS and
# RAY_VISIBLE (the GPUs Ray may use on the head node; empty: all).
place_classifiers() {
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

  RAY_VISIBLE=""
  case "$placement" in
    none) log "judge '$CFG_JUDGE_KIND': no classifier servers" ;;
    external)
      # another job's servers: their token, from the file that job wrote (its log names it)
      unset DARLING_JUDGE_TOKEN
      require DARLING_JUDGE_TOKEN_FILE "the token file of the serve_classifiers job whose servers CLASSIFIER_ENDPOINTS names (that job's log prints both)"
      is_dry_run || [[ -r "$DARLING_JUDGE_TOKEN_FILE" ]] ||
        die "DARLING_JUDGE_TOKEN_FILE=$DARLING_JUDGE_TOKEN_FILE: no such readable file"
      export DARLING_JUDGE_TOKEN_FILE
      ENDPOINTS=$CLASSIFIER_ENDPOINTS
      ;;
    node)
      make_job_token
      local all
      all=$(seq -s, 0 $((${CLASSIFIER_GPUS:-$GPUS_PER_NODE} - 1)))
      start_classifiers "${NODES[$CFG_NUM_NODES]}" "$all" "${CLASSIFIER_MODEL:-$CFG_CLASSIFIER_MODEL}"
      ;;
    gpus)
      local spare=$((GPUS_PER_NODE - CFG_GPUS_PER_NODE))
      ((CFG_NUM_NODES == 1 && spare > 0)) ||
        die "CLASSIFIER_PLACEMENT=gpus needs cluster.num_nodes=1 and cluster.gpus_per_node" \
          "below the node's $GPUS_PER_NODE GPUs (got $CFG_NUM_NODES x $CFG_GPUS_PER_NODE)"
      RAY_VISIBLE=$(seq -s, 0 $((CFG_GPUS_PER_NODE - 1)))
      make_job_token
      start_classifiers "${NODES[0]}" "$(seq -s, "$CFG_GPUS_PER_NODE" $((GPUS_PER_NODE - 1)))" \
        "${CLASSIFIER_MODEL:-$CFG_CLASSIFIER_MODEL}"
      ;;
    *) die "CLASSIFIER_PLACEMENT=$placement: expected node or gpus" ;;
  esac
}

darling_train() {
  parse_args "$@"
  common_setup
  megatron_checkpoint_dir
  : "${JOB_RECIPE:?the .sub must set JOB_RECIPE}" "${JOB_CONFIG:?the .sub must set JOB_CONFIG}"
  CONFIG=${CONFIG:-$JOB_CONFIG}
  check_config_path
  RUN_NAME=${RUN_NAME:-${SLURM_JOB_NAME:-darling}-${SLURM_JOB_ID:-dryrun}}
  RUN_DIR=$RESULTS_DIR/$RUN_NAME
  LOG_DIR=$RUN_DIR/slurm/${SLURM_JOB_ID:-dryrun}-r${SLURM_RESTART_COUNT:-0}
  if is_smoke; then
    # Everything of a smoke (its checkpoints, logs and report) stays in its own folder.
    SMOKE_DIR=$RUN_DIR/smoke/${SLURM_JOB_ID:-dryrun}-r${SLURM_RESTART_COUNT:-0}
    LOG_DIR=$SMOKE_DIR/slurm
  fi
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
  is_smoke && shorten_for_smoke
  print_environment

  # Site model paths replace the config's hub names (interpolations follow them).
  [[ -n "${POLICY_MODEL:-}" ]] && USER_OVERRIDES+=("policy.model_name=$POLICY_MODEL")
  [[ -n "${REWARD_MODEL:-}" ]] && USER_OVERRIDES+=("env.reward_model.model_name=$REWARD_MODEL")

  read_nodes
  run_plan "${NODES[0]:-node001}" "$layout_file" "${USER_OVERRIDES[@]}"
  is_dry_run && rm -f "$layout_file"

  place_classifiers

  # Overrides the launcher adds: where this run's state goes, so that a requeued job finds
  # its checkpoints (NeMo-RL resumes from the newest step_N in checkpoint_dir by itself).
  # A smoke's folders are its own (the recipe's --smoke-dir): the run's are not named at all.
  local state_dir=$RUN_DIR wandb_name=$RUN_NAME
  if is_smoke; then
    state_dir=$SMOKE_DIR
    wandb_name=$RUN_NAME-smoke
  fi
  local overrides=("${USER_OVERRIDES[@]}"
    "checkpointing.enabled=true" "checkpointing.checkpoint_dir=$state_dir/checkpoints"
    "logger.log_dir=$state_dir/logs")
  [[ -n "${ENDPOINTS:-}" ]] && overrides+=("darling.judge.endpoints=[$ENDPOINTS]")
  if [[ -n "${WANDB_API_KEY:-}" ]]; then
    overrides+=("logger.wandb_enabled=true" "logger.wandb.name=$wandb_name")
    [[ -n "${WANDB_PROJECT:-}" ]] && overrides+=("logger.wandb.project=$WANDB_PROJECT")
  fi
  local start_step=-1
  if is_smoke; then
    log "smoke: 3 steps and a resume in $SMOKE_DIR (the run's checkpoints in" \
      "$RUN_DIR/checkpoints are not touched)"
  else
    start_step=$(newest_step)
    if ((start_step >= 0)); then
      log "resuming from $RUN_DIR/checkpoints/step_$start_step (restart ${SLURM_RESTART_COUNT:-0})"
    else
      log "no checkpoint in $RUN_DIR/checkpoints: starting from step 0"
    fi
  fi

  save_deadline_env

  start_ray "$CFG_NUM_NODES" "$CFG_GPUS_PER_NODE" "$RAY_VISIBLE"

  # `uv run` as NeMo-RL's own jobs: the image sets UV_NO_SYNC=1, so it runs NeMo-RL's driver
  # environment as installed (containers/Dockerfile).
  container_srun "${NODES[0]}" "$(container_name head)" "$LOG_DIR/driver.log" \
    "${DRIVER_ENV[@]}" "RAY_ADDRESS=$RAY_HEAD_ADDRESS"
  local driver=("${SRUN[@]}" uv run "$JOB_RECIPE" --config "$CONFIG")
  is_smoke && driver+=(--smoke --smoke-dir "$SMOKE_DIR")
  driver+=("${overrides[@]}")
  print_cmd "${driver[@]}"
  if is_dry_run; then
    rehearse "${overrides[@]}"
    return 0
  fi
  local rc=0 when=""
  run_to_the_end "$LOG_DIR/driver.rc" "${driver[@]}" || rc=$?
  ((USR1_RECEIVED)) && when=" after the time-limit signal"
  log "driver exited with $rc$when; logs in $LOG_DIR"
  if is_smoke; then
    log "smoke report: $SMOKE_DIR/smoke_report.txt (last line: the verdict)"
    return "$rc"
  fi
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
