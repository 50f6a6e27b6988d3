//! The NICs `rnic ping` runs on: the simulated RNIC (the default) or a hardware RNIC through
//! libibverbs (`--device`, feature `hw`; docs/hardware.md).

use super::endpoint::PingEndpoint;
use super::{PingError, WireOptions};
use crate::hw_nic::HwNic;
use rnic_hw::{EventWaiter, HwDevice, HwError, HwOptions};
use rnic_sim::fabric::udp::UdpHandle;
use rnic_sim::nic::{NicCounters, SimNic};
use rnic_sim::{SimDevice, SimDeviceConfig};
use rnic_testbed::host::Nic;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use verbs_core::{CompChannel, Device, Gid, Mtu};

/// What a ping node needs of its NIC beyond [`Nic`].
pub trait PingNic: Nic + Send + Sized + 'static {
    /// The NIC of the node named `name` whose UDP socket is bound at `addr`; `device` selects
    /// a hardware device (`--device`), which only [`HwNic`] accepts.
    ///
    /// # Errors
    /// [`PingError::Hardware`] when the device cannot be opened (which and why: no library,
    /// no device, no active port, no RoCEv2 GID for `addr`'s IP); [`PingError::Verbs`].
    fn open(
        name: &str,
        addr: SocketAddr,
        wire: &WireOptions,
        device: Option<&HwOptions>,
    ) -> Result<Self, PingError>;

    /// The IP a client's socket binds: `route_ip` is the address the OS would use to reach
    /// the server.
    ///
    /// # Errors
    /// [`PingError::Hardware`] when the device cannot be opened.
    fn client_ip(route_ip: IpAddr, device: Option<&HwOptions>) -> Result<IpAddr, PingError>;

    /// Limits each RC QP's packets in flight to `bytes` (the simulated RNIC's
    /// [`SimDevice::set_max_unacked_bytes`](rnic_sim::SimDevice::set_max_unacked_bytes)),
    /// sized from the socket's receive buffer. A hardware RNIC has its own flow control:
    /// nothing to do.
    fn set_window_bytes(&mut self, _bytes: u64) {}

    /// Keeps up to `n` routes learned from the wire (one per client whose handshake the lobby
    /// runs: a route refused would send its REP to the wrong socket).
    fn set_route_capacity(&mut self, n: usize);

    /// Datagrams sent and received on the node's socket.
    fn datagram_counters(&self) -> NicCounters;

    /// RC retransmissions (simulated RNIC; 0 where the device does not tell).
    fn rc_retransmits(&self) -> u64;

    /// RC retransmission-timer expiries that led to a retry (simulated RNIC; 0 where the
    /// device does not tell).
    fn rc_timeouts(&self) -> u64;

    /// QP `qpn`'s own go-back-N retries and retransmission-timer expiries over its life
    /// (simulated RNIC; `None` where the device does not tell, or the QP is gone).
    fn qp_rc_counters(&self, _qpn: u32) -> Option<(u64, u64)> {
        None
    }

    /// Datagrams and packets the NIC refused, by reason (`nic.*` for the socket's datagrams,
    /// `rnic.*` for the device's packets).
    fn drop_counters(&self) -> Vec<(&'static str, u64)>;

    /// What the node runs on, for the report: the simulated RNIC, or the device, port and GID.
    fn describe(&self) -> String;

    /// The largest path MTU the port carries (`None`: whatever is asked): the CM negotiates
    /// no more, as rdma_cm takes the MTU of its path record from the netdev.
    fn max_path_mtu(&self) -> Option<Mtu> {
        None
    }

    /// Takes the device's own events (completion channel, async), for a NIC with
    /// [`Nic::ASYNC_COMPLETIONS`]. Returns how many.
    fn device_events(&mut self) -> usize {
        0
    }

    /// What the driver waits on for [`device_events`](Self::device_events), if anything.
    ///
    /// # Errors
    /// The device's event file descriptors cannot be duplicated.
    fn event_waiter(&self) -> std::io::Result<Option<EventWaiter>> {
        Ok(None)
    }
}

impl PingNic for SimNic {
    fn open(
        name: &str,
        addr: SocketAddr,
        wire: &WireOptions,
        device: Option<&HwOptions>,
    ) -> Result<SimNic, PingError> {
        if let Some(d) = device {
            return Err(PingError::Options(format!(
                "device {:?} asked of the simulated RNIC",
                d.device
            )));
        }
        let mut dcfg = SimDeviceConfig::new(name, Gid::from_ip(addr.ip()));
        dcfg.active_mtu = wire.mtu;
        dcfg.seed = super::node_config::device_seed(addr, wire);
        Ok(SimNic::new(SimDevice::new(dcfg), addr))
    }

    /// `route_ip`, but a loopback route gets an address of this process's own
    /// (127.a.b.c from the process ID): the simulated RNIC's GID is its IP.
    fn client_ip(route_ip: IpAddr, _device: Option<&HwOptions>) -> Result<IpAddr, PingError> {
        Ok(match route_ip {
            IpAddr::V4(v4) if v4.is_loopback() => super::own_loopback_ip(),
            ip => ip,
        })
    }

    fn set_window_bytes(&mut self, bytes: u64) {
        self.device_mut().set_max_unacked_bytes(bytes);
    }

    fn set_route_capacity(&mut self, n: usize) {
        SimNic::set_route_capacity(self, n);
    }

    fn datagram_counters(&self) -> NicCounters {
        SimNic::datagram_counters(self)
    }

    fn qp_rc_counters(&self, qpn: u32) -> Option<(u64, u64)> {
        self.device()
            .qp_counters(qpn)
            .map(|c| (c.retries, c.timeouts))
    }

    fn rc_retransmits(&self) -> u64 {
        self.device().counters().retries
    }

    fn rc_timeouts(&self) -> u64 {
        self.device().counters().timeouts
    }

    fn describe(&self) -> String {
        "the simulated RNIC".into()
    }

    fn drop_counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.device().counters();
        vec![
            ("nic.undecodable", self.datagram_counters().rx_decode_errors),
            (
                "nic.foreign_socket",
                self.datagram_counters().rx_foreign_socket,
            ),
            ("nic.route_in_use", self.peers().counters().route_in_use),
            (
                "nic.candidates_discarded",
                self.peers().counters().candidates_discarded,
            ),
            ("nic.peers_evicted", self.peers().evicted()),
            ("nic.peers_refused", self.peers().counters().refused_full),
            ("rnic.malformed", c.malformed),
            ("rnic.bad_pkey", c.bad_pkey),
            ("rnic.unknown_qp", c.unknown_qp),
            ("rnic.wrong_qp_type", c.wrong_qp_type),
            ("rnic.qp_not_ready", c.qp_not_ready),
            ("rnic.wrong_source", c.wrong_source),
            ("rnic.qkey_mismatch", c.qkey_mismatch),
            ("rnic.ud_no_recv", c.ud_no_recv),
        ]
    }
}

impl PingNic for HwNic {
    /// Opens the device `device` names (or the first with an active port) on the RoCEv2 GID
    /// of `addr`'s IP; the CM's MADs use the socket at `addr`.
    fn open(
        _name: &str,
        addr: SocketAddr,
        _wire: &WireOptions,
        device: Option<&HwOptions>,
    ) -> Result<HwNic, PingError> {
        let opts = HwOptions {
            ip: Some(addr.ip()),
            ..device.cloned().unwrap_or_default()
        };
        let dev = HwDevice::open(&opts)?;
        // The CM names this host by its socket's IP; the device's QPs by their GID. They must
        // be one address, or peers aim their QPs where nothing listens.
        if dev.gid().to_ip() != addr.ip() {
            return Err(PingError::Options(format!(
                "GID index {} of {} is {}, not {}, the address of this side's socket: give \
                 that address (or leave --gid-index out)",
                dev.gid_index(),
                Device::name(&dev),
                dev.gid().to_ip(),
                addr.ip()
            )));
        }
        Ok(HwNic::new(dev, addr))
    }

    /// The IP of the GID the device is opened on: with `--gid-index`, that GID's; else
    /// `route_ip` when the device has a RoCEv2 GID for it, else the IP of the device's first
    /// RoCEv2 IPv4 GID (e.g. a loopback route, or a device on another interface).
    fn client_ip(route_ip: IpAddr, device: Option<&HwOptions>) -> Result<IpAddr, PingError> {
        let base = device.cloned().unwrap_or_default();
        let on_route = HwOptions {
            ip: Some(route_ip),
            ..base.clone()
        };
        match HwDevice::open(&on_route) {
            Ok(d) => Ok(d.gid().to_ip()),
            Err(HwError::NoRoceV2Gid { .. }) if base.ip.is_none() => {
                Ok(HwDevice::open(&base)?.gid().to_ip())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn set_route_capacity(&mut self, n: usize) {
        HwNic::set_route_capacity(self, n);
    }

    fn datagram_counters(&self) -> NicCounters {
        HwNic::datagram_counters(self)
    }

    fn rc_retransmits(&self) -> u64 {
        0
    }

    fn rc_timeouts(&self) -> u64 {
        0
    }

    fn drop_counters(&self) -> Vec<(&'static str, u64)> {
        HwNic::drop_counters(self)
    }

    fn describe(&self) -> String {
        let d = self.device();
        format!(
            "RDMA device {} port {}, GID index {} ({}), hardware backend",
            Device::name(d),
            d.port_num(),
            d.gid_index(),
            d.gid().to_ip()
        )
    }

    fn max_path_mtu(&self) -> Option<Mtu> {
        let d = self.device();
        d.query_port(d.port_num()).ok().map(|p| p.active_mtu)
    }

    fn device_events(&mut self) -> usize {
        HwNic::device_events(self)
    }

    fn event_waiter(&self) -> std::io::Result<Option<EventWaiter>> {
        self.device().event_waiter().map(Some)
    }
}

/// How long the [`DeviceWaker`] waits before it looks at its stop flag again.
const WAKER_TICK: Duration = Duration::from_millis(50);

/// The thread that waits for a hardware device's events (its completion channel and async
/// event file descriptors) and hands them to the endpoint, as the UDP driver does with
/// datagrams: the device's events go to the CQs' channels, the data phase steps, and waiters
/// wake. The simulated RNIC needs none: its completions only follow the driver's datagrams.
pub struct DeviceWaker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DeviceWaker {
    /// Starts the thread for the node whose driver `handle` reaches, draining `comp` (the
    /// node's completion channel: the application polls its CQ itself when it wakes).
    ///
    /// # Errors
    /// The thread cannot be created.
    pub fn spawn<N: PingNic>(
        waiter: EventWaiter,
        handle: UdpHandle<PingEndpoint<N>>,
        comp: CompChannel,
    ) -> std::io::Result<DeviceWaker> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("rnic-hw-events".into())
            .spawn(move || {
                while !stopped.load(Ordering::Acquire) {
                    match waiter.wait(WAKER_TICK) {
                        Ok(true) => {
                            handle.with(|ep, now| {
                                ep.note_event();
                                ep.inner_mut().host_mut().nic_mut().device_events();
                                ep.inner_mut().step(now);
                            });
                            while comp.try_get_cq_event().is_ok() {}
                        }
                        Ok(false) => {}
                        // The descriptors are gone: nothing more will come.
                        Err(_) => break,
                    }
                }
            })?;
        Ok(DeviceWaker {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it (at most 50 ms).
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            // A panic in the thread has been reported on stderr already.
            let _ = t.join();
        }
    }
}

impl Drop for DeviceWaker {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
