#!/usr/bin/env bash
# Emulated hosts on this machine, for multi-node tests: each host is a network namespace with its
# own address on a bridge, its own host name (UTS namespace) and its own /etc/hosts naming every
# host of the cluster. Ranks on different hosts can only talk over TCP through the bridge.
#
#   scripts/netns_cluster.sh up N      make hosts zrt-h1..zrt-hN (removes an earlier cluster first)
#   scripts/netns_cluster.sh down      remove every host, kill what runs in them, leave nothing
#   scripts/netns_cluster.sh status    hosts, addresses, processes per host
#   scripts/netns_cluster.sh exec HOST CMD...     run CMD on HOST (a shell command line)
#   scripts/netns_cluster.sh agent HOST CMD...    the same, in the form Open MPI's rsh agent is
#                                                 called (plm_rsh_agent): how mpirun starts orted
#   scripts/netns_cluster.sh link HOST up|down    the host's network link
#   scripts/netns_cluster.sh shape HOST RATE DELAY  HOST's link: RATE each way (e.g. 1gbit,
#                                                 none) and DELAY one way out of HOST (e.g.
#                                                 2ms, 0); "shape HOST none" removes both
#   scripts/netns_cluster.sh kill HOST            SIGKILL every process of HOST
#   scripts/netns_cluster.sh hostfile FILE SLOTS [HOSTS...]  a DeepSpeed hostfile of the hosts
#   scripts/netns_cluster.sh mpirun-args          the mpirun options that start orted through
#                                                 `agent` and keep Open MPI on the bridge, TCP
#                                                 only (for zrt-launch --launcher_args)
#
# Addresses: 10.213.0.1 is the bridge (this machine's root namespace), host i is 10.213.0.(10+i).
# Test traffic goes only to these addresses and loopback. Needs root (ip, unshare).
set -euo pipefail
PREFIX="zrt-h"
BRIDGE="zrtbr0"
NET="10.213.0"
ETC_NETNS="/etc/netns"

die() { echo "netns_cluster: $*" >&2; exit 2; }
hosts() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$" | sort -V || true; }
index_of() {  # zrt-hK or 10.213.0.(10+K) -> K
  local h="$1"
  if [[ "$h" =~ ^${PREFIX}([0-9]+)$ ]]; then echo "${BASH_REMATCH[1]}"
  elif [[ "$h" =~ ^${NET//./\\.}\.([0-9]+)$ ]]; then echo $((BASH_REMATCH[1] - 10))
  else die "unknown host '$h' (expected ${PREFIX}K or ${NET}.(10+K))"; fi
}
ns_of() {
  local k; k="$(index_of "$1")"
  ip netns list | awk '{print $1}' | grep -qx "${PREFIX}$k" || die "host ${PREFIX}$k is not up"
  echo "${PREFIX}$k"
}

kill_host() {  # kill every process in the namespace, wait until none is left (5 s at most)
  local ns="$1" i pids
  for i in $(seq 50); do
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    [[ -z "$pids" ]] && return 0
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
  echo "netns_cluster: processes still running in $ns: $(ip netns pids "$ns" | tr '\n' ' ')" >&2
  return 1
}

down() {
  local ns status=0
  for ns in $(hosts); do
    unshape "$ns"
    kill_host "$ns" || status=1
    ip link del "${ns}b" 2>/dev/null || true
    ip netns del "$ns" || status=1
    rm -rf "${ETC_NETNS:?}/$ns"
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  # veth ends whose namespace went away on their own are deleted with it; anything left is ours.
  for ns in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
              grep -E "^${PREFIX}[0-9]+b$" || true); do
    ip link del "$ns" 2>/dev/null || true
  done
  return $status
}

up() {
  local n="$1" i ns
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 200 ]] || die "up: N must be 1..200, got '$n'"
  down
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for i in $(seq "$n"); do
    ns="${PREFIX}$i"
    ip netns add "$ns"
    ip link add "${ns}b" type veth peer name eth0 netns "$ns"
    ip link set "${ns}b" master "$BRIDGE" up
    ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # Give up on an unanswered TCP connection after ~13 s instead of Linux's ~15 min
    # (tcp_retries2=15): how long mpirun and its daemons take to notice a host that dropped off
    # the network. A cluster that wants jobs to fail fast sets the same; see launch/README.md.
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2="${ZRT_NETNS_TCP_RETRIES2:-5}"
    mkdir -p "$ETC_NETNS/$ns"
    {
      echo "127.0.0.1 localhost"
      echo "$NET.1 zrt-bridge"
      local j
      for j in $(seq "$n"); do echo "$NET.$((10 + j)) ${PREFIX}$j"; done
    } >"$ETC_NETNS/$ns/hosts"
  done
  for i in $(seq "$n"); do  # every host reaches every other one
    ip netns exec "${PREFIX}$i" ping -c 1 -W 2 "$NET.$((10 + n - i + 1))" >/dev/null ||
      die "host ${PREFIX}$i cannot reach $NET.$((10 + n - i + 1))"
  done
  echo "netns_cluster: $n host(s) up: $(hosts | tr '\n' ' ')"
}

# run_in NS CMDLINE: CMDLINE under sh in the host's network namespace, with the host's name (own
# UTS namespace) and its /etc/hosts (ip netns exec bind-mounts /etc/netns/NS/hosts).
run_in() {
  local ns="$1"; shift
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0"; exec sh -c "$1"' "$ns" "$*"
}

# The kernel here has no netem, so a link is shaped with what it has: a token bucket (tbf) on
# both ends of the host's veth pair for the rate, and scripts/netdelay.c (an NFQUEUE program in
# the host's namespace, fed by an iptables rule on eth0's output) for the one-way delay.
to_bps() {  # 10gbit, 100mbit, 1.5gbit -> bits/s
  local v="$1"
  [[ "$v" =~ ^([0-9.]+)(k|m|g)?bit$ ]] || die "rate '$v': expected e.g. 100mbit, 1gbit, 10gbit"
  local mult=1
  case "${BASH_REMATCH[2]}" in k) mult=1000 ;; m) mult=1000000 ;; g) mult=1000000000 ;; esac
  echo "${BASH_REMATCH[1]} * $mult / 1" | bc
}
to_us() {  # 2ms, 0.2ms, 200us, 0 -> microseconds
  local v="$1"
  [[ "$v" =~ ^([0-9.]+)(ms|us)?$ ]] || die "delay '$v': expected e.g. 0.2ms, 2ms, 200us or 0"
  if [[ "${BASH_REMATCH[2]}" == ms ]]; then echo "${BASH_REMATCH[1]} * 1000 / 1" | bc
  else echo "${BASH_REMATCH[1]} / 1" | bc; fi
}
netdelay_bin() {  # compiled once per source version, outside the clone
  local src; src="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/netdelay.c"
  local bin; bin="${XDG_CACHE_HOME:-$HOME/.cache}/zrt/netdelay-$(sha256sum "$src" | cut -c1-12)"
  if [[ ! -x "$bin" ]]; then
    mkdir -p "$(dirname "$bin")"
    cc -O2 -Wall -o "$bin.tmp.$$" "$src" -lnetfilter_queue -lnfnetlink ||
      die "cannot build $src (needs libnetfilter-queue-dev; scripts/install_deps.sh installs it)"
    mv "$bin.tmp.$$" "$bin"
  fi
  echo "$bin"
}
unshape() {
  local ns="$1"
  tc qdisc del dev "${ns}b" root 2>/dev/null || true
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  ip netns exec "$ns" iptables -w -F OUTPUT 2>/dev/null || true
  if [[ -f "/run/zrt-netdelay-$ns.pid" ]]; then
    kill -9 "$(cat "/run/zrt-netdelay-$ns.pid")" 2>/dev/null || true
    rm -f "/run/zrt-netdelay-$ns.pid" "/run/zrt-netdelay-$ns.log"
  fi
}
shape() {
  local ns="$1" rate="$2" delay="${3:-0}"
  unshape "$ns"
  if [[ "$rate" != none ]]; then
    local bps burst
    bps="$(to_bps "$rate")"
    burst=$(( bps / 8 / 1000 > 131072 ? bps / 8 / 1000 : 131072 ))  # 1 ms of data, >= 128 KiB
    tc qdisc add dev "${ns}b" root tbf rate "$bps" burst "$burst" latency 50ms
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$bps" burst "$burst" latency 50ms
  fi
  local us; us="$(to_us "$delay")"
  if [[ "$us" -gt 0 ]]; then
    local bin log="/run/zrt-netdelay-$ns.log" i
    bin="$(netdelay_bin)"
    ip netns exec "$ns" setsid "$bin" 0 "$us" >"$log" 2>&1 </dev/null &
    echo $! >"/run/zrt-netdelay-$ns.pid"
    for i in $(seq 50); do grep -q ready "$log" 2>/dev/null && break; sleep 0.1; done
    grep -q ready "$log" || die "netdelay did not start in $ns: $(cat "$log")"
    # iptables' NFQUEUE target (this kernel's nftables has no queue expression of its own).
    ip netns exec "$ns" iptables -w -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0
  fi
}

cmd="${1:-}"; shift || true
case "$cmd" in
  up) [[ $# -eq 1 ]] || die "usage: up N"; up "$1" ;;
  down) down ;;
  status)
    for ns in $(hosts); do
      echo "$ns $(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}')" \
           "link=$(ip -n "$ns" -o link show eth0 | grep -q 'state UP' && echo up || echo down)" \
           "processes=$(ip netns pids "$ns" | wc -l)"
    done ;;
  exec|agent)
    [[ $# -ge 2 ]] || die "usage: $cmd HOST CMD..."
    host="$1"; shift
    run_in "$(ns_of "$host")" "$@" ;;
  link)
    [[ $# -eq 2 && ( "$2" == up || "$2" == down ) ]] || die "usage: link HOST up|down"
    ip -n "$(ns_of "$1")" link set eth0 "$2" ;;
  shape) [[ $# -ge 2 ]] || die "usage: shape HOST RATE|none [DELAY] | shape HOST none"
    shape "$(ns_of "$1")" "$2" "${3:-0}" ;;
  kill) [[ $# -eq 1 ]] || die "usage: kill HOST"; kill_host "$(ns_of "$1")" ;;
  hostfile)
    [[ $# -ge 2 ]] || die "usage: hostfile FILE SLOTS [HOSTS...]"
    file="$1" slots="$2"; shift 2
    list=("$@"); [[ ${#list[@]} -gt 0 ]] || mapfile -t list < <(hosts)
    : >"$file"
    for h in "${list[@]}"; do echo "$(ns_of "$h") slots=$slots" >>"$file"; done ;;
  mpirun-args)
    # TCP only (no shared memory between "hosts"), on the bridge's subnet only; rsh agent = us.
    echo "--mca plm_rsh_agent '$(readlink -f "${BASH_SOURCE[0]}") agent'" \
         "--mca btl tcp,self --mca pml ob1" \
         "--mca btl_tcp_if_include $NET.0/24 --mca oob_tcp_if_include $NET.0/24" ;;
  *) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; [[ -z "$cmd" ]] || exit 2 ;;
esac
