//! The in-process RC data path, as `rnic-sim/benches/transport.rs` measures it: two
//! [`SimNic`]s (a `SimDevice` + the RoCEv2 codec with ICRC computed on send and checked on
//! receive) with one RC QP each, connected with [`connect_rc`] at path MTU 4096; datagrams
//! move directly through the [`Endpoint`] trait (`poll_transmit` → `handle_datagram`) in a
//! tight loop on one thread. Virtual time stays at zero, so no timer fires (nothing is lost).
//!
//! One WRITE ([`WritePair::write`]): post one signaled RDMA WRITE of the pair's length
//! (64 KiB: 16 packets and one coalesced ACK), pump to quiescence, poll its completion.

// A benchmark: it times the writes on the wall clock (`Instant::now`), which the workspace's
// clippy.toml forbids in the simulated, deterministic path only.
#![allow(clippy::disallowed_methods)]

use super::stats::per_second;
use super::{verbs, BenchError};
use rnic_sim::fabric::Endpoint;
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use std::net::Ipv4Addr;
use std::time::Instant;
use verbs_core::manual::{connect_rc, RcEndpoint, RcEndpointSpec, RcParams, RcPeerInfo};
use verbs_core::{
    AccessFlags, CqHandle, Device, Gid, Mr, Mtu, Qp, SendWr, SimTime, WcStatus, WorkCompletion,
};

/// Send queue depth and CQ size of each side.
const DEPTH: u32 = 1024;

/// One side: a NIC with one RC QP, its send CQ and one registered region.
struct Side {
    nic: SimNic,
    qp: Qp,
    scq: CqHandle,
    mr: Mr,
}

fn side(last: u8, len: usize) -> Result<Side, BenchError> {
    let gid = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, last));
    let mut cfg = SimDeviceConfig::new(format!("sim{last}"), gid);
    cfg.active_mtu = Mtu::Mtu4096;
    let mut nic = SimNic::at_gid(SimDevice::new(cfg));
    nic.set_check_icrc(true);
    let spec = RcEndpointSpec {
        mr_len: len,
        mr_access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        cqe: DEPTH,
        sq_sig_all: false,
        ..RcEndpointSpec::default()
    }
    .queues(DEPTH, 1, 0);
    let RcEndpoint {
        qp,
        send_cq: scq,
        mr,
        ..
    } = RcEndpoint::create(nic.device_mut(), &spec).map_err(verbs("the RC endpoint"))?;
    #[allow(clippy::cast_possible_truncation)] // a byte pattern
    let fill: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    nic.mr_write(mr.handle, 0, &fill)
        .map_err(verbs("fill the MR"))?;
    Ok(Side { nic, qp, scq, mr })
}

/// Two connected sides and the WRITE from the first's region to the second's.
pub struct WritePair {
    a: Side,
    b: Side,
    wr: [SendWr; 1],
    wcs: Vec<WorkCompletion>,
    len: usize,
}

impl WritePair {
    /// Two sides with regions of `len` bytes (1..=2^31), their RC QPs connected at path MTU
    /// 4096, ICRC checked on receive.
    ///
    /// # Errors
    /// [`BenchError::Options`] for a bad length; [`BenchError::Verbs`] when the verbs
    /// objects cannot be made or connected.
    pub fn new(len: usize) -> Result<WritePair, BenchError> {
        let Ok(len32) = u32::try_from(len) else {
            return Err(BenchError::Options(format!(
                "WRITE of {len} bytes: too long"
            )));
        };
        if len32 == 0 || len32 > 1 << 31 {
            return Err(BenchError::Options(format!("WRITE of {len} bytes")));
        }
        let mut a = side(1, len)?;
        let mut b = side(2, len)?;
        let ia = RcPeerInfo {
            gid: a.nic.gid(),
            qpn: a.qp.qp_num,
            psn: 0x100,
        };
        let ib = RcPeerInfo {
            gid: b.nic.gid(),
            qpn: b.qp.qp_num,
            psn: 0x200,
        };
        let p = RcParams {
            mtu: Mtu::Mtu4096,
            ..RcParams::default()
        };
        connect_rc(&mut *a.nic, a.qp.handle, &ia, &ib, &p).map_err(verbs("connect_rc"))?;
        connect_rc(&mut *b.nic, b.qp.handle, &ib, &ia, &p).map_err(verbs("connect_rc"))?;
        let wr = [SendWr::rdma_write(
            1,
            vec![a.mr.sge(0, len32)],
            b.mr.addr,
            b.mr.rkey,
        )];
        Ok(WritePair {
            a,
            b,
            wr,
            wcs: Vec::new(),
            len,
        })
    }

    /// Moves datagrams between the two NICs until neither has anything to send.
    fn pump(&mut self) {
        let now = SimTime::ZERO;
        let (a, b) = (&mut self.a.nic, &mut self.b.nic);
        let (aa, ba) = (a.addr(), b.addr());
        loop {
            let mut moved = false;
            while let Some((_, bytes)) = a.poll_transmit(now) {
                b.handle_datagram(now, aa, bytes);
                moved = true;
            }
            while let Some((_, bytes)) = b.poll_transmit(now) {
                a.handle_datagram(now, ba, bytes);
                moved = true;
            }
            if !moved {
                return;
            }
        }
    }

    /// One WRITE: post, pump to quiescence, poll its completion.
    ///
    /// # Errors
    /// [`BenchError::Verbs`] from `post_send` or `poll_cq`; [`BenchError::Measure`] when the
    /// WRITE did not complete successfully.
    pub fn write(&mut self) -> Result<(), BenchError> {
        self.a
            .nic
            .post_send(self.a.qp.handle, &self.wr)
            .map_err(|e| e.error)
            .map_err(verbs("ibv_post_send"))?;
        self.pump();
        self.wcs.clear();
        let n = self
            .a
            .nic
            .poll_cq(self.a.scq, DEPTH as usize, &mut self.wcs)
            .map_err(verbs("ibv_poll_cq"))?;
        match self.wcs.first() {
            Some(wc) if n == 1 && wc.status == WcStatus::Success => Ok(()),
            _ => Err(BenchError::Measure(format!(
                "in-process WRITE: completions {:?}",
                self.wcs
            ))),
        }
    }

    /// `warmup` WRITEs, then `count` timed ones: payload bytes per second. Also checks that no
    /// datagram failed to decode (a bad ICRC).
    ///
    /// # Errors
    /// As [`write`](Self::write); [`BenchError::Measure`] for decode errors or 0 WRITEs.
    pub fn bytes_per_s(&mut self, warmup: u64, count: u64) -> Result<f64, BenchError> {
        if count == 0 {
            return Err(BenchError::Measure("in-process WRITE: 0 WRITEs".into()));
        }
        for _ in 0..warmup {
            self.write()?;
        }
        let start = Instant::now();
        for _ in 0..count {
            self.write()?;
        }
        let elapsed = start.elapsed();
        let errors = self.a.nic.datagram_counters().rx_decode_errors
            + self.b.nic.datagram_counters().rx_decode_errors;
        if errors > 0 {
            return Err(BenchError::Measure(format!(
                "in-process WRITE: {errors} datagrams failed to decode"
            )));
        }
        Ok(per_second(count * self.len as u64, elapsed))
    }
}
