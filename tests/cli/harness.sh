# The CLI tests' shared checks, sourced by tests/cli/*.sh: counters and pass/fail/expect.
#   expect NAME RC_WANTED REGEX LOG RC: the last command's exit code RC and its log LOG
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok: $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAILED: $1"; [ -f "${2:-}" ] && sed 's/^/    /' "$2" | tail -n 15; }
expect() {
  local name=$1 want=$2 regex=$3 log=$4 rc=$5
  if [ "$rc" != "$want" ]; then fail "$name: exit code $rc, wanted $want" "$log"; return; fi
  if [ -n "$regex" ] && ! grep -Eq -- "$regex" "$log"; then fail "$name: no line matches /$regex/" "$log"; return; fi
  pass "$name"
}
