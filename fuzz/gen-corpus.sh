#!/usr/bin/env bash
# Regenerates the seed corpora fuzz/corpus/<target>/ from real captures:
#   * `rnic replay --seed N --pcap` for seeds 1..200 (the deterministic fabric, full RNIC + CM);
#   * one `rnic ping` session over loopback UDP, both sides with --pcap (MTU 256, 1000-byte
#     messages, 5 % loss: multi-packet messages, retransmissions, duplicates).
# The datagrams are extracted and turned into seeds by the ignored test `regenerate_corpus`
# in tests/tests/fuzz_corpus.rs (selection rules there), which then replays every seed.
# Deterministic except for the ping session (real sockets and timing).
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# The test profile: the same build the replay test uses (no second optimised build).
cargo build --profile test -p rnic-cli --bin rnic
rnic=$target_dir/debug/rnic

for seed in $(seq 1 200); do
    # A seed whose oracle verdict is FAIL still has a valid capture.
    "$rnic" replay --seed "$seed" --quiet --pcap "$work/replay-s$seed.pcap" >/dev/null || true
done

"$rnic" ping --listen 127.0.0.1:0 --once --mtu 256 --fast-timers --drop-rate 0.05 --seed 7 \
    --pcap "$work/ping-server.pcap" >"$work/server.out" 2>&1 &
for _ in $(seq 100); do
    grep -q '^listening on' "$work/server.out" && break
    sleep 0.1
done
addr=$(sed -n 's/^listening on //p' "$work/server.out")
"$rnic" ping --connect "$addr" --count 3 --size 1000 --mtu 256 --fast-timers \
    --drop-rate 0.05 --seed 8 --pcap "$work/ping-client.pcap" >/dev/null || true
wait || true

RNIC_FUZZ_PCAPS=$work cargo test -p rnic-testbed --test fuzz_corpus -- \
    --ignored --exact regenerate_corpus --nocapture
