//! Configuration from the environment, read once when the library first needs its RNIC.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `RNIC_ADDR` | the IP of this process's simulated RNIC: its GID, and the address its UDP socket binds (port 4791, the RoCEv2 port) | the first of 127.0.0.1 … 127.0.0.254 whose port 4791 is free |
//! | `RNIC_DEVICE` | the device name `ibv_get_device_name` returns | `rnic0` |
//! | `RNIC_MTU` | the port's active MTU in bytes (256 … 4096), the path MTU rdma_cm uses | 1024 |
//! | `RNIC_DROP_RATE` | drop each datagram, in either direction, with this probability (0 … 1) | 0 |
//! | `RNIC_SEED` | seed of the drop decisions, of the CM's identifiers (comm IDs, transaction IDs, start PSNs) and of the RNIC's (QPNs, lkeys/rkeys, MR addresses); set it to repeat a run | from the OS (`/dev/urandom`) |
//! | `RNIC_RESOLVE_US` | how long address and route resolution each take before their event is reported, µs (Linux runs them on work queues) | 1000 |
//! | `RNIC_FAST_TIMERS` | `1` (or `true`, `yes`): short CM and transport timers (as `rnic ping --fast-timers`); `0`, `false`, `no`: Linux's | off |
//! | `RNIC_POISON_WC` | `1` (or `true`, `yes`): junk, not zeros, in the fields of an error work completion that ibv_poll_cq(3) leaves undefined (`SimDeviceConfig::poison_undefined_wc_fields`; docs/semantics-verbs.md "Entering ERR and flushing"); `0`, `false`, `no`: zeros, as rxe | off |
//! | `RNIC_FAULTS` | `;`-separated faults on this RNIC (`rnic exec --fault`; grammar in docs/check.md, "Faults"), seeded by `RNIC_SEED` | none |
//! | `RNIC_STATS` | `1` (or `table`): the RNIC's counters on stderr at exit, as a table of those not zero; `json`: as one JSON object a line, every counter; `every:MS` (MS ≥ 10): also every MS ms; combined with a comma, e.g. `json,every:250`; `0`: off | off |
//! | `RUST_LOG` | `tracing` filter for the library's log on stderr (e.g. `rnic=debug`) | warnings |
//!
//! Each process is one simulated RNIC whose GID is its IP, as on a real RoCE NIC; two
//! processes on one machine therefore use two loopback addresses.

use std::net::{IpAddr, Ipv4Addr};
use verbs_core::Mtu;

/// The RoCEv2 UDP port (IANA), where every simulated RNIC listens by default.
pub const ROCE_PORT: u16 = 4791;

/// The library's configuration. See the module docs for the variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `RNIC_ADDR`, if set; `None`: pick the first free loopback address.
    pub addr: Option<IpAddr>,
    /// `RNIC_DEVICE`.
    pub device: String,
    /// `RNIC_MTU`.
    pub mtu: Mtu,
    /// `RNIC_DROP_RATE`.
    pub drop_rate: f64,
    /// `RNIC_SEED`; `None`: drawn from the OS.
    pub seed: Option<u64>,
    /// `RNIC_FAST_TIMERS`.
    pub fast_timers: bool,
    /// `RNIC_POISON_WC`.
    pub poison_wc: bool,
    /// `RNIC_REMOVE_DEVICE_MS`: remove the device this many ms after the library started (a
    /// hot-unplug, for testing an application's `RDMA_CM_EVENT_DEVICE_REMOVAL` and
    /// `IBV_EVENT_DEVICE_FATAL` handling); `None`: never.
    pub remove_device_ms: Option<u64>,
    /// `RNIC_RESOLVE_US`, µs.
    pub resolve_us: u64,
    /// `RNIC_STATS`: print the counters at exit, how and how often; `None`: never.
    pub stats: Option<StatsConfig>,
    /// `RNIC_FAULTS`.
    pub faults: Vec<crate::inject::spec::FaultSpec>,
}

/// What `RNIC_STATS` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsConfig {
    /// One JSON object a line (`json`) rather than a table.
    pub json: bool,
    /// Also every so many ms (`every:MS`), not only at exit.
    pub every_ms: Option<u64>,
}

impl StatsConfig {
    /// Parses `RNIC_STATS` other than `0`: `1` or `table`, `json`, `every:MS` (MS ≥ 10),
    /// comma-separated.
    fn parse(v: &str) -> Option<StatsConfig> {
        let mut c = StatsConfig::default();
        for word in v.split(',') {
            match word {
                "1" | "table" => c.json = false,
                "json" => c.json = true,
                _ => {
                    let ms = word.strip_prefix("every:")?.parse::<u64>().ok();
                    c.every_ms = Some(ms.filter(|ms| *ms >= 10)?);
                }
            }
        }
        Some(c)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: None,
            device: "rnic0".to_string(),
            mtu: Mtu::Mtu1024,
            drop_rate: 0.0,
            seed: None,
            fast_timers: false,
            poison_wc: false,
            remove_device_ms: None,
            resolve_us: 1000,
            stats: None,
            faults: Vec::new(),
        }
    }
}

/// A variable whose value cannot be used; the message names the variable, the value and what
/// is expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// The configuration from the process environment.
    ///
    /// # Errors
    /// A variable that is set but cannot be parsed (the message says which and why).
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// The configuration from `get(name)` (the environment, or a test's map).
    ///
    /// # Errors
    /// As [`Config::from_env`].
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        let bad = |k: &str, v: &str, want: &str| ConfigError(format!("{k}={v:?}: {want}"));
        let val = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if let Some(v) = val("RNIC_ADDR") {
            let ip: IpAddr = v
                .parse()
                .map_err(|_| bad("RNIC_ADDR", &v, "expected an IP address, e.g. 127.0.0.2"))?;
            if ip.is_unspecified() || ip.is_multicast() {
                return Err(bad(
                    "RNIC_ADDR",
                    &v,
                    "must be a unicast address of this host",
                ));
            }
            c.addr = Some(ip);
        }
        if let Some(v) = val("RNIC_DEVICE") {
            if v.len() >= 64 || !v.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(bad(
                    "RNIC_DEVICE",
                    &v,
                    "expected a name of 1 … 63 printable bytes",
                ));
            }
            c.device = v;
        }
        if let Some(v) = val("RNIC_MTU") {
            c.mtu = v
                .parse::<u32>()
                .ok()
                .and_then(Mtu::from_bytes)
                .ok_or_else(|| bad("RNIC_MTU", &v, "expected 256, 512, 1024, 2048 or 4096"))?;
        }
        if let Some(v) = val("RNIC_DROP_RATE") {
            c.drop_rate = v
                .parse::<f64>()
                .ok()
                .filter(|p| (0.0..=1.0).contains(p))
                .ok_or_else(|| bad("RNIC_DROP_RATE", &v, "expected a probability 0 … 1"))?;
        }
        if let Some(v) = val("RNIC_SEED") {
            c.seed = Some(
                v.parse()
                    .map_err(|_| bad("RNIC_SEED", &v, "expected an unsigned 64-bit integer"))?,
            );
        }
        if let Some(v) = val("RNIC_RESOLVE_US") {
            c.resolve_us = v
                .parse()
                .ok()
                .filter(|us| *us <= 10_000_000)
                .ok_or_else(|| bad("RNIC_RESOLVE_US", &v, "expected microseconds, 0 … 10000000"))?;
        }
        if let Some(v) = val("RNIC_FAULTS") {
            c.faults = crate::inject::spec::parse_list(&v)
                .map_err(|e| ConfigError(format!("RNIC_FAULTS: {e}")))?;
        }
        if let Some(v) = val("RNIC_REMOVE_DEVICE_MS") {
            c.remove_device_ms = Some(v.parse().map_err(|_| {
                bad(
                    "RNIC_REMOVE_DEVICE_MS",
                    &v,
                    "expected milliseconds, an unsigned integer",
                )
            })?);
        }
        if let Some(v) = val("RNIC_STATS") {
            c.stats = match v.as_str() {
                "0" => None,
                _ => Some(StatsConfig::parse(&v).ok_or_else(|| {
                    bad(
                        "RNIC_STATS",
                        &v,
                        "expected 0, or 1 (table), json, every:MS with MS >= 10, comma-separated",
                    )
                })?),
            };
        }
        let flag = |k: &str, v: &str| match v {
            "1" | "true" | "yes" => Ok(true),
            "0" | "false" | "no" => Ok(false),
            _ => Err(bad(k, v, "expected 1, true, yes, 0, false or no")),
        };
        if let Some(v) = val("RNIC_FAST_TIMERS") {
            c.fast_timers = flag("RNIC_FAST_TIMERS", &v)?;
        }
        if let Some(v) = val("RNIC_POISON_WC") {
            c.poison_wc = flag("RNIC_POISON_WC", &v)?;
        }
        Ok(c)
    }

    /// The addresses to try binding, in order: `RNIC_ADDR`, or 127.0.0.1 … 127.0.0.254.
    pub fn candidate_addrs(&self) -> Vec<IpAddr> {
        match self.addr {
            Some(a) => vec![a],
            None => (1..=254u8)
                .map(|d| IpAddr::V4(Ipv4Addr::new(127, 0, 0, d)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_pick_loopback_addresses_in_order() {
        let c = cfg(&[]).unwrap_or_default();
        assert_eq!(c, Config::default());
        let a = c.candidate_addrs();
        assert_eq!(a.len(), 254);
        assert_eq!(a[0], IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(a[1], IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
    }

    #[test]
    fn every_variable_is_parsed() {
        let c = cfg(&[
            ("RNIC_ADDR", "127.0.0.9"),
            ("RNIC_DEVICE", "rxe9"),
            ("RNIC_MTU", "4096"),
            ("RNIC_DROP_RATE", "0.25"),
            ("RNIC_SEED", "77"),
            ("RNIC_FAST_TIMERS", "1"),
            ("RNIC_RESOLVE_US", "0"),
            ("RNIC_STATS", "json,every:250"),
            ("RNIC_POISON_WC", "yes"),
            ("RNIC_REMOVE_DEVICE_MS", "1500"),
        ]);
        let c = match c {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            c.candidate_addrs(),
            vec![IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9))]
        );
        assert_eq!((c.device.as_str(), c.mtu), ("rxe9", Mtu::Mtu4096));
        assert_eq!((c.drop_rate, c.seed, c.fast_timers), (0.25, Some(77), true));
        let stats = StatsConfig {
            json: true,
            every_ms: Some(250),
        };
        assert_eq!((c.resolve_us, c.stats), (0, Some(stats)));
        assert!(c.poison_wc);
        assert_eq!(c.remove_device_ms, Some(1500));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("RNIC_ADDR", "nowhere"),
            ("RNIC_ADDR", "0.0.0.0"),
            ("RNIC_MTU", "1500"),
            ("RNIC_DROP_RATE", "2"),
            ("RNIC_SEED", "-1"),
            ("RNIC_FAST_TIMERS", "maybe"),
            ("RNIC_POISON_WC", "2"),
            ("RNIC_REMOVE_DEVICE_MS", "later"),
            ("RNIC_RESOLVE_US", "soon"),
            ("RNIC_STATS", "every:0"),
            ("RNIC_STATS", "2"),
            ("RNIC_STATS", "json,every:5"),
            ("RNIC_STATS", "yaml"),
        ] {
            match cfg(&[(k, v)]) {
                Err(e) => assert!(e.0.starts_with(k), "{e}"),
                Ok(_) => panic!("{k}={v} accepted"),
            }
        }
    }
}
