//! Writes seed N's trace, Mermaid diagram and pcap to /tmp/rnic-replay.* (development aid).
#![allow(missing_docs)]
fn main() {
    let seed: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let r = rnic_testbed::scenario::replay_seed(seed);
    let _ = std::fs::write("/tmp/rnic-replay.txt", r.trace());
    let _ = std::fs::write("/tmp/rnic-replay.mmd", r.mermaid());
    let _ = std::fs::write("/tmp/rnic-replay.pcap", r.pcap());
}
