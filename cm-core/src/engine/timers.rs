//! CM timer arithmetic (Linux cm.c, cm-spec §3.2) and the retransmission schedule (§1.7).

use super::CmConfig;

/// `cm_convert_to_ms`: an IBA time exponent `t` (4.096 µs × 2^t) in ms, as Linux approximates
/// it: `1 << max(t − 8, 0)` (t = 16 → 256 ms, 20 → 4096 ms). Exponents above 31 are clamped.
pub fn cm_convert_to_ms(t: u8) -> u64 {
    1u64 << t.min(31).saturating_sub(8)
}

/// `cm_ack_timeout`: the local ACK timeout exponent from the CA ACK delay and the path packet
/// lifetime (≈ max(ack delay, PLT + 1), one more when the two are close; capped at 31).
/// `cm_ack_timeout(15, 16)` = 17 (TimeWait 512 ms), `cm_ack_timeout(15, 18)` = 19.
pub fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let mut ack = u32::from(packet_life_time) + 1;
    let delay = u32::from(ca_ack_delay);
    if ack >= delay {
        ack += u32::from(delay + 1 >= ack);
    } else {
        ack = delay + u32::from(ack + 1 >= delay);
    }
    ack.min(31) as u8
}

/// The MAD retransmission schedule (cm-spec §1.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    /// Classic Linux MAD layer: every attempt waits the same timeout.
    Linear,
    /// rdma-next "mad-linear-timeouts" (lkml-mad, Dec 2024): the first `linear_attempts` sends
    /// wait the base timeout, each later one doubles it, capped at `max_timeout_ms`.
    Exponential {
        /// Sends that use the base timeout (Linux: 4).
        linear_attempts: u32,
        /// Upper bound of one wait, ms (Linux: 60 000).
        max_timeout_ms: u64,
    },
}

impl Backoff {
    /// The wait after send number `send` (1 = the first transmission), ms.
    pub fn timeout_ms(self, base_ms: u64, send: u32) -> u64 {
        match self {
            Backoff::Linear => base_ms,
            Backoff::Exponential {
                linear_attempts,
                max_timeout_ms,
            } => {
                let doublings = send.saturating_sub(linear_attempts.max(1)).min(40);
                base_ms
                    .saturating_mul(1u64 << doublings)
                    .min(max_timeout_ms.max(base_ms))
            }
        }
    }
}

// Durations derived from a configuration: the timer formulas live in this file.
impl CmConfig {
    /// How long a sent DREQ waits for its DREP before it is sent again, in ms:
    /// `2·ms(packet life time) + ms(response timeout)` (cm-spec §3.2).
    pub fn dreq_timeout_ms(&self) -> u64 {
        2 * cm_convert_to_ms(self.packet_life_time) + cm_convert_to_ms(self.cm_response_timeout)
    }

    /// Upper bound, in ms, of how long an active DREQ can go unanswered before DISCONNECTED
    /// (−110): `(max_cm_retries + 1) ×` [`dreq_timeout_ms`](Self::dreq_timeout_ms).
    pub fn dreq_give_up_ms(&self) -> u64 {
        (u64::from(self.max_cm_retries) + 1) * self.dreq_timeout_ms()
    }

    /// Short timers for real-network runs that exercise timeouts (`rnic ping --fast-timers`,
    /// librnic's `RNIC_FAST_TIMERS`): packet lifetime and ACK delay 4 ms, so av.timeout =
    /// cm_ack_timeout = 12 → RC ACK timeout 16.8 ms (RETRY_EXC_ERR after 8 tries ≈ 134 ms),
    /// TimeWait ms(12) = 16 ms; REQ/DREQ timeout 2·4 + 16 = 24 ms with 4 retries: −110 after
    /// 5 × 24 ms (cm-spec §3.2).
    pub fn with_fast_timers(self) -> CmConfig {
        CmConfig {
            packet_life_time: 10,
            ack_delay: 10,
            cm_response_timeout: 12,
            max_cm_retries: 4,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_convert_to_ms_is_one_shl_t_minus_8() {
        assert_eq!(cm_convert_to_ms(16), 256);
        assert_eq!(cm_convert_to_ms(17), 512);
        assert_eq!(cm_convert_to_ms(20), 4096);
        assert_eq!(cm_convert_to_ms(24), 65536);
        assert_eq!(cm_convert_to_ms(3), 1);
    }

    #[test]
    fn cm_ack_timeout_matches_linux_worked_numbers() {
        assert_eq!(cm_ack_timeout(15, 16), 17);
        assert_eq!(cm_ack_timeout(15, 18), 19);
        assert_eq!(cm_ack_timeout(20, 10), 20);
        assert_eq!(cm_ack_timeout(20, 18), 21);
        assert_eq!(cm_ack_timeout(31, 31), 31);
    }

    #[test]
    fn exponential_backoff_doubles_after_linear_attempts_and_caps() {
        let b = Backoff::Exponential {
            linear_attempts: 4,
            max_timeout_ms: 60_000,
        };
        let seq: Vec<u64> = (1..=8).map(|n| b.timeout_ms(4608, n)).collect();
        assert_eq!(seq, [4608, 4608, 4608, 4608, 9216, 18432, 36864, 60000]);
        assert_eq!(Backoff::Linear.timeout_ms(4608, 9), 4608);
    }
}
