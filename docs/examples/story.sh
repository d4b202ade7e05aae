#!/usr/bin/env bash
# The seeds' story from a shell, on a broker in test mode whose clock this script moves with `rollcall advance`:
# alice online on two devices; the phone is killed (kill -9) and she stays online; the desktop freezes (SIGSTOP)
# and, once the TTL is reached by advance, she is offline with reason timeout; the group goes from 3 of 5 to 2 of 5.
# Needs `rollcall` on the PATH, or ROLLCALL_BIN. Prints what it checks; exits non-zero at the first surprise.
set -euo pipefail
rc=${ROLLCALL_BIN:-rollcall}
work=$(mktemp -d)
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT

"$rc" serve --test-mode --print-endpoints --offline-grace-ms 2000 --group-batch-ms 0 >"$work/broker" 2>/dev/null &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/broker" ] && break; sleep 0.05; done
field() { sed -E "s/.*\"$1\":\"([^\"]+)\".*/\1/" "$work/broker"; }
export ROLLCALL_COMMAND_ENDPOINT=$(field command) ROLLCALL_UPDATE_ENDPOINT=$(field update)

# wait_for FILE TEXT: until FILE holds TEXT, at most 5 s.
wait_for() {
    for _ in $(seq 100); do grep -q "$2" "$1" && return 0; sleep 0.05; done
    echo "FAIL: no '$2' in $1:" >&2; cat "$1" >&2; exit 1
}

"$rc" watch alice >"$work/watch" 2>/dev/null &
pids+=($!)
wait_for "$work/watch" '"user":"alice"'
"$rc" group team --members alice,bob,carol,dave,erin >/dev/null
"$rc" online alice --device phone >/dev/null 2>&1 &
phone=$!
pids+=($phone)
"$rc" online alice --device desktop --status busy >/dev/null 2>&1 &
desktop=$!
pids+=($desktop)
# Real clients heartbeat on the real clock, which does not move the broker's: the bystanders get a TTL far past
# every advance of this script, so that only alice's devices can run out.
"$rc" online bob --ttl-ms 600000 >/dev/null 2>&1 &
pids+=($!)
"$rc" online carol --status away --ttl-ms 600000 >/dev/null 2>&1 &
pids+=($!)
wait_for "$work/watch" '"sessions":2'
for _ in $(seq 100); do "$rc" group team | grep -q "3 of 5 online" && break; sleep 0.05; done
echo "ok: alice online on two devices; $("$rc" group team)"

kill -9 "$phone"
wait "$phone" 2>/dev/null || true
"$rc" advance 2000 >/dev/null  # the phone's grace period runs out
wait_for "$work/watch" '"status":"busy","since":[0-9]*,"last_seen":[0-9]*,"sessions":1'
echo "ok: phone killed, alice still online (busy, one session)"

kill -STOP "$desktop"
"$rc" advance 3000 >/dev/null  # the desktop's TTL runs out: it sent nothing on the broker's clock
wait_for "$work/watch" '"reason":"timeout"'
"$rc" group team | grep -q "2 of 5 online" || { echo "FAIL: $("$rc" group team)" >&2; exit 1; }
echo "ok: desktop frozen, alice offline (timeout); $("$rc" group team)"
