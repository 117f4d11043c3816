# Memory cgroups for capped runs (sourced by tests/e2e/nvme_memory_cap_test.sh and
# bench/infinity_llama.sh): the kernel's own count of a process tree's memory, under a hard limit.
# cgroup v1's memory controller, or v2 with memory delegated to the root's children. Needs root.
#
#   memcg_detect || exit 77          # sets MEMCG_MODE (v1|v2); prints why not and fails otherwise
#   cg=$(memcg_make NAME CAP_MB)     # a fresh group capped at CAP_MB (no swap)
#   sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$cg" CMD...   # run CMD inside it
#   memcg_peak "$cg"                 # its peak usage in MB
#   memcg_oom_kills "$cg"            # OOM kills in it
#   memcg_remove "$cg"               # kills what is left in it and removes it

MEMCG_V1=/sys/fs/cgroup/memory
MEMCG_V2=/sys/fs/cgroup

memcg_detect() {
  if [[ $(id -u) -ne 0 ]]; then echo "SKIP: needs root for a memory cgroup"; return 1; fi
  if [[ -w "$MEMCG_V1" && -f "$MEMCG_V1/memory.limit_in_bytes" ]]; then
    MEMCG_MODE=v1
  elif [[ -f "$MEMCG_V2/cgroup.controllers" ]] && grep -qw memory "$MEMCG_V2/cgroup.subtree_control"; then
    MEMCG_MODE=v2
  else
    echo "SKIP: no writable memory cgroup controller"; return 1
  fi
}

memcg_make() {  # NAME CAP_MB
  local cg
  cg="$([[ $MEMCG_MODE == v1 ]] && echo "$MEMCG_V1" || echo "$MEMCG_V2")/$1"
  mkdir "$cg"
  if [[ $MEMCG_MODE == v1 ]]; then
    echo $(($2 << 20)) > "$cg/memory.limit_in_bytes"
  else
    echo $(($2 << 20)) > "$cg/memory.max"
    echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
  fi
  echo "$cg"
}

memcg_peak() {
  if [[ $MEMCG_MODE == v1 ]]; then
    echo $(( $(cat "$1/memory.max_usage_in_bytes") >> 20 ))
  else
    echo $(( $(cat "$1/memory.peak" 2>/dev/null || echo 0) >> 20 ))
  fi
}

memcg_oom_kills() {
  local n
  if [[ $MEMCG_MODE == v1 ]]; then
    n=$(awk '/^oom_kill /{print $2}' "$1/memory.oom_control")
  else
    n=$(awk '/^oom_kill /{print $2}' "$1/memory.events")
  fi
  echo "${n:-0}"
}

memcg_remove() {
  [[ -n "$1" && -d "$1" ]] || return 0
  while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done < "$1/cgroup.procs"
  sleep 0.2
  rmdir "$1" 2>/dev/null || true
}
