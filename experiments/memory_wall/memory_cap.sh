#!/usr/bin/env bash
# Runs a command under a memory limit given by a cgroup, where this machine lets one be made: a child
# of this shell's own memory cgroup, cgroup v2 (memory.max) or v1 (memory.limit_in_bytes). The kernel
# then reclaims or kills the command past LIMIT, whatever the command plans. Writes one line to REPORT:
# "cgroup v1|v2 PATH limit BYTES peak BYTES" (the cgroup's peak usage, page cache included), or
# "none: WHY" when no cgroup could be made (the command then runs uncapped). Exits with the command's
# status (137 when the kernel killed it for memory).
#   bash experiments/memory_wall/memory_cap.sh LIMIT REPORT COMMAND [ARGS...]    (LIMIT e.g. 2500M)
set -uo pipefail
limit=${1:?usage: memory_cap.sh LIMIT REPORT COMMAND [ARGS...]}
report=${2:?usage: memory_cap.sh LIMIT REPORT COMMAND [ARGS...]}
shift 2
bytes=$(numfmt --from=iec "$limit") || { echo "memory_cap: LIMIT '$limit' is not a size" >&2; exit 2; }

dir= version= parent=
v2_root=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
v2_path=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
v1_root=$(awk '$3 == "cgroup" && $4 ~ /(^|,)memory(,|$)/ {print $2; exit}' /proc/mounts)
v1_path=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
why="no writable memory cgroup"
if [ -n "$v2_root" ] && grep -qw memory "$v2_root$v2_path/cgroup.controllers" 2>/dev/null; then
  parent=$v2_root$v2_path
  if mkdir "$parent/zinf_cap_$$" 2>/dev/null; then
    dir=$parent/zinf_cap_$$ version=v2
    echo "$bytes" > "$dir/memory.max" && echo 0 > "$dir/memory.swap.max" 2>/dev/null
  fi
fi
if [ -z "$dir" ] && [ -n "$v1_root" ]; then
  parent=$v1_root$v1_path
  if mkdir "$parent/zinf_cap_$$" 2>/dev/null; then
    dir=$parent/zinf_cap_$$ version=v1
    echo "$bytes" > "$dir/memory.limit_in_bytes" || why="cannot set memory.limit_in_bytes"
  else
    why="cannot create a cgroup under $parent"
  fi
fi
if [ -z "$dir" ] || ! echo $$ > "$dir/cgroup.procs" 2>/dev/null; then
  [ -z "$dir" ] || rmdir "$dir" 2>/dev/null
  echo "none: $why" > "$report"
  "$@"
  exit $?
fi
"$@"
rc=$?
if [ "$version" = v2 ]; then peak=$(cat "$dir/memory.peak" 2>/dev/null || echo 0)
else peak=$(cat "$dir/memory.max_usage_in_bytes"); fi
echo $$ > "$parent/cgroup.procs"
rmdir "$dir"
echo "cgroup $version $dir limit $bytes peak $peak" > "$report"
exit $rc
