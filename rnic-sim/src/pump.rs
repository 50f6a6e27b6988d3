//! A lossless, deterministic wire between two devices, for tests and examples. The real
//! fabrics (with faults, delays and time) live elsewhere; this one only moves packets.

use crate::device::SimDevice;
use verbs_core::SimTime;

/// Moves packets between `a` and `b` until both are idle: all of `a`'s pending packets in
/// order, then all of `b`'s, repeated. A packet whose destination GID is not the other
/// device's is dropped. Time stands still at `now` (no timer fires). Returns the number of
/// packets delivered.
pub fn pump_pair(a: &mut SimDevice, b: &mut SimDevice, now: SimTime) -> usize {
    let mut moved = 0;
    loop {
        let mut any = false;
        while let Some(t) = a.poll_transmit(now) {
            any = true;
            if t.dst == b.gid() {
                b.handle_packet(now, a.gid(), t.packet);
                moved += 1;
            }
        }
        while let Some(t) = b.poll_transmit(now) {
            any = true;
            if t.dst == a.gid() {
                a.handle_packet(now, b.gid(), t.packet);
                moved += 1;
            }
        }
        if !any {
            return moved;
        }
    }
}
