//! The state file `rnic exec` shares with the program it supervises: what the program's RNIC
//! knows that the supervisor needs once the program is dead (docs/capi.md, "Process death").
//!
//! On Linux the RNIC and the CM live in the kernel, which outlives a process: when it dies,
//! `ucma_close` destroys its rdma_cm ids and the CM sends what each connection's state calls for
//! (`cm_destroy_id`). A simulated RNIC dies with its process, so `rnic exec` stays its parent and
//! does that part: the program's librnic writes its connections here as they change, and the
//! supervisor reads them back after the program's death, whatever killed it.
//!
//! The file is a memfd the supervisor creates and the program inherits (`RNIC_SUPERVISOR`).
//! Every record is written with one `pwrite` of at most 128 bytes that does not cross a page:
//! a write to a memfd happens whole or not at all, so no death of the writer can leave a torn
//! record. The reader trusts nothing it reads (a crashing program wrote it): every record is
//! checked and a bad one is skipped.
//!
//! Layout (all integers little-endian; the geometry says where each region is, so a later
//! version can move them):
//!
//! | offset | bytes | written by | content |
//! |---|---|---|---|
//! | 0 | 64 | supervisor, once | geometry (byte 0 also carries the owner's claim, a record lock: [`StateFile::claim`]): magic `RNICSTF1`, version, supervisor pid, slot size and count, offsets and size of the regions below |
//! | 256 | 128 | program, at start | owner: magic `RNICOWN1`, pid, the RNIC's socket address and GID, the CM's CA GUID and timers (what a CM of the supervisor's needs to speak for it), connections not published for want of a slot, whether the RNIC was removed |
//! | 512 | 16 | program | report control: which report copy is current and its length |
//! | 4096 | 128 × slots | program | one slot per IB CM connection that destroying would send something for or answer ([`ConnSnapshot::needs_teardown`]): its [`ConnSnapshot`] (96 B) and the peer's UDP socket address; all zeros when free |
//! | after the slots, page-aligned | 2 × capacity | program | the report (e.g. a checker's JSON), in two copies: a new report goes to the copy the control record does not name, then the control record names it, so the last complete report survives any death |
//!
//! The file is sparse: only written pages take memory.

use cm_core::engine::{Backoff, CmConfig, ConnSnapshot, SNAPSHOT_LEN};
use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::FileExt;
use verbs_core::{Gid, Mtu};

/// Magic of the geometry record.
const MAGIC: &[u8; 8] = b"RNICSTF1";
/// Magic of the owner record.
const OWNER_MAGIC: &[u8; 8] = b"RNICOWN1";
/// Layout version: bumped with any incompatible change.
pub const VERSION: u32 = 1;
/// Where the owner record is.
const OWNER_OFFSET: u64 = 256;
/// Bytes of the owner record.
const OWNER_LEN: usize = 128;
/// Where the report control record is.
const REPORT_CONTROL_OFFSET: u64 = 512;
/// Bytes of one slot.
pub const SLOT_LEN: usize = 128;
/// Slots of a file made by [`StateFile::create`]: the connections one program can have
/// published at once (more are counted in [`Owner::unpublished`]).
pub const DEFAULT_SLOTS: u32 = 65_536;
/// Bytes of one report copy of a file made by [`StateFile::create`].
pub const DEFAULT_REPORT_CAPACITY: u64 = 1 << 20;
const PAGE: u64 = 4096;
/// Largest slot count a reader accepts (bounds what it reads).
const MAX_SLOTS: u32 = 1 << 20;
/// Largest report copy a reader accepts.
const MAX_REPORT_CAPACITY: u64 = 64 << 20;

/// Where the regions of a state file are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// The supervisor's process ID.
    pub supervisor_pid: u32,
    /// Number of slots.
    pub slot_count: u32,
    /// Offset of slot 0.
    pub slots_offset: u64,
    /// Offset of the first report copy (the second follows it).
    pub report_offset: u64,
    /// Bytes of one report copy.
    pub report_capacity: u64,
}

impl Geometry {
    /// The layout [`StateFile::create`] uses.
    pub fn standard(supervisor_pid: u32) -> Geometry {
        let slots_offset = PAGE;
        let slots_end = slots_offset + u64::from(DEFAULT_SLOTS) * SLOT_LEN as u64;
        Geometry {
            supervisor_pid,
            slot_count: DEFAULT_SLOTS,
            slots_offset,
            report_offset: slots_end.div_ceil(PAGE) * PAGE,
            report_capacity: DEFAULT_REPORT_CAPACITY,
        }
    }

    /// The file's length.
    pub fn len(&self) -> u64 {
        self.report_offset + 2 * self.report_capacity
    }

    /// Always false (a state file is never empty); for symmetry with [`Geometry::len`].
    pub fn is_empty(&self) -> bool {
        false
    }

    fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.supervisor_pid.to_le_bytes());
        b[16..20].copy_from_slice(&(SLOT_LEN as u32).to_le_bytes());
        b[20..24].copy_from_slice(&self.slot_count.to_le_bytes());
        b[24..32].copy_from_slice(&self.slots_offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.report_offset.to_le_bytes());
        b[40..48].copy_from_slice(&self.report_capacity.to_le_bytes());
        b
    }

    fn decode(b: &[u8; 64]) -> Result<Geometry, String> {
        if &b[0..8] != MAGIC {
            return Err("not an rnic state file (bad magic)".into());
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(format!(
                "state file version {version}, this librnic reads {VERSION}"
            ));
        }
        let g = Geometry {
            supervisor_pid: u32_at(b, 12),
            slot_count: u32_at(b, 20),
            slots_offset: u64_at(b, 24),
            report_offset: u64_at(b, 32),
            report_capacity: u64_at(b, 40),
        };
        let slots_end = g
            .slots_offset
            .checked_add(u64::from(g.slot_count) * SLOT_LEN as u64);
        let ok = u32_at(b, 16) as usize == SLOT_LEN
            && g.slot_count <= MAX_SLOTS
            && g.slots_offset >= REPORT_CONTROL_OFFSET + 16
            && g.slots_offset.is_multiple_of(SLOT_LEN as u64)
            && g.report_capacity <= MAX_REPORT_CAPACITY
            && slots_end.is_some_and(|e| e <= g.report_offset);
        if ok {
            Ok(g)
        } else {
            Err(format!("state file geometry out of bounds: {g:?}"))
        }
    }
}

/// What the program's librnic says of itself when it takes the RNIC: enough for another CM to
/// speak for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The program's process ID.
    pub pid: u32,
    /// The RNIC's UDP socket address.
    pub addr: SocketAddr,
    /// The RNIC's GID.
    pub local_gid: Gid,
    /// The CM's configuration (CA GUID, timers; the seed is not kept).
    pub cm: CmConfig,
    /// Connections that needed a slot when none was free: the supervisor cannot finish them.
    pub unpublished: u64,
    /// The RNIC was removed (`RNIC_REMOVE_DEVICE_MS`), or went silent (`RNIC_FAULTS`'s
    /// `silence:`): it can send nothing, before the death or after.
    pub device_removed: bool,
}

impl Owner {
    fn encode(&self) -> [u8; OWNER_LEN] {
        let mut b = [0u8; OWNER_LEN];
        b[0..8].copy_from_slice(OWNER_MAGIC);
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        encode_addr(&mut b[12..31], Some(self.addr));
        b[32..48].copy_from_slice(&self.local_gid.0);
        let c = &self.cm;
        b[48..56].copy_from_slice(&c.ca_guid.to_le_bytes());
        b[56] = c.cm_response_timeout;
        b[57] = c.max_cm_retries;
        b[58] = c.packet_life_time;
        b[59] = c.ack_delay;
        b[60] = c.mra_service_timeout;
        b[61] = c.hop_limit;
        b[62..64].copy_from_slice(&(c.path_mtu.bytes() as u16).to_le_bytes());
        match c.backoff {
            Backoff::Linear => b[64] = 0,
            Backoff::Exponential {
                linear_attempts,
                max_timeout_ms,
            } => {
                b[64] = 1;
                b[68..72].copy_from_slice(&linear_attempts.to_le_bytes());
                b[72..80].copy_from_slice(&max_timeout_ms.to_le_bytes());
            }
        }
        b[80..88].copy_from_slice(&self.unpublished.to_le_bytes());
        b[88] = u8::from(self.device_removed);
        b
    }

    fn decode(b: &[u8; OWNER_LEN]) -> Option<Owner> {
        if &b[0..8] != OWNER_MAGIC {
            return None;
        }
        let backoff = match b[64] {
            0 => Backoff::Linear,
            1 => Backoff::Exponential {
                linear_attempts: u32_at(b, 68),
                max_timeout_ms: u64_at(b, 72),
            },
            _ => return None,
        };
        let cm = CmConfig {
            ca_guid: u64_at(b, 48),
            seed: 0,
            cm_response_timeout: b[56].min(31),
            max_cm_retries: b[57].min(15),
            packet_life_time: b[58].min(31),
            ack_delay: b[59].min(31),
            mra_service_timeout: b[60].min(31),
            hop_limit: b[61],
            path_mtu: Mtu::from_bytes(u32::from(u16::from_le_bytes([b[62], b[63]])))?,
            backoff,
        };
        Some(Owner {
            pid: u32_at(b, 8),
            addr: decode_addr(&b[12..31])?,
            local_gid: Gid(b[32..48].try_into().ok()?),
            cm,
            unpublished: u64_at(b, 80),
            device_removed: b[88] != 0,
        })
    }
}

/// One published connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The connection as the IB CM holds it.
    pub conn: ConnSnapshot,
    /// Where the peer's datagrams go, when not port 4791 of its GID's IP.
    pub peer: Option<SocketAddr>,
}

impl Slot {
    /// The slot's bytes: the snapshot, then the peer's address (family, port, IP).
    pub fn encode(&self) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        b[..SNAPSHOT_LEN].copy_from_slice(&self.conn.encode());
        encode_addr(&mut b[SNAPSHOT_LEN..SNAPSHOT_LEN + 19], self.peer);
        b
    }

    /// Decodes [`Slot::encode`]'s output; `None` for a free slot or junk.
    pub fn decode(b: &[u8]) -> Option<Slot> {
        let b: &[u8; SLOT_LEN] = b.try_into().ok()?;
        let conn = ConnSnapshot::decode(&b[..SNAPSHOT_LEN])?;
        let a = &b[SNAPSHOT_LEN..SNAPSHOT_LEN + 19];
        let peer = if a[0] == 0 {
            None
        } else {
            Some(decode_addr(a)?)
        };
        Some(Slot { conn, peer })
    }
}

/// `family (0 none, 4, 6) | port u16 | 16 bytes of IP` (19 bytes).
fn encode_addr(b: &mut [u8], addr: Option<SocketAddr>) {
    let Some(a) = addr else { return };
    b[1..3].copy_from_slice(&a.port().to_le_bytes());
    match a.ip() {
        IpAddr::V4(v4) => {
            b[0] = 4;
            b[3..7].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            b[0] = 6;
            b[3..19].copy_from_slice(&v6.octets());
        }
    }
}

fn decode_addr(b: &[u8]) -> Option<SocketAddr> {
    let port = u16::from_le_bytes([b[1], b[2]]);
    let ip = match b[0] {
        4 => IpAddr::V4(Ipv4Addr::new(b[3], b[4], b[5], b[6])),
        6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[3..19]).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The record lock of [`StateFile::claim`]: byte 0.
fn claim_lock(kind: libc::c_int) -> libc::flock {
    libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 1,
        l_pid: 0,
    }
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

/// What a reader found in the slots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slots {
    /// The published connections, in slot order.
    pub slots: Vec<Slot>,
    /// The index of each of [`slots`](Self::slots).
    pub indices: Vec<u32>,
    /// Slots that were neither free nor a valid record (skipped).
    pub invalid: u64,
}

/// An open state file. See the module docs. Methods take `&self`: each record is one
/// positioned write; the caller keeps one writer per region.
#[derive(Debug)]
pub struct StateFile {
    file: File,
    geometry: Geometry,
}

impl StateFile {
    /// Makes `file` (empty, e.g. a new memfd) a state file of the standard geometry for the
    /// supervisor `supervisor_pid`.
    ///
    /// # Errors
    /// What `ftruncate` or `pwrite` return.
    pub fn create(file: File, supervisor_pid: u32) -> io::Result<StateFile> {
        let geometry = Geometry::standard(supervisor_pid);
        file.set_len(geometry.len())?;
        file.write_all_at(&geometry.encode(), 0)?;
        Ok(StateFile { file, geometry })
    }

    /// Opens a state file another process made, checking its geometry.
    ///
    /// # Errors
    /// The file cannot be read, or is not a state file of this version (the message says why).
    pub fn open(file: File) -> Result<StateFile, String> {
        let mut b = [0u8; 64];
        file.read_exact_at(&mut b, 0)
            .map_err(|e| format!("cannot read the state file: {e}"))?;
        let geometry = Geometry::decode(&b)?;
        let len = file
            .metadata()
            .map_err(|e| format!("cannot stat the state file: {e}"))?
            .len();
        if len < geometry.len() {
            return Err(format!(
                "state file of {len} bytes, its geometry needs {}",
                geometry.len()
            ));
        }
        Ok(StateFile { file, geometry })
    }

    /// Where the regions are.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Writes the owner record.
    ///
    /// # Errors
    /// What `pwrite` returns.
    pub fn write_owner(&self, owner: &Owner) -> io::Result<()> {
        self.file.write_all_at(&owner.encode(), OWNER_OFFSET)
    }

    /// The owner record, `None` when no program took the RNIC (or it is junk).
    ///
    /// # Errors
    /// What `pread` returns.
    pub fn read_owner(&self) -> io::Result<Option<Owner>> {
        let mut b = [0u8; OWNER_LEN];
        self.file.read_exact_at(&mut b, OWNER_OFFSET)?;
        Ok(Owner::decode(&b))
    }

    /// Writes slot `index` (`None`: frees it).
    ///
    /// # Errors
    /// `EINVAL` for an index past the last slot; what `pwrite` returns.
    pub fn write_slot(&self, index: u32, slot: Option<&Slot>) -> io::Result<()> {
        if index >= self.geometry.slot_count {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let b = slot.map_or([0u8; SLOT_LEN], Slot::encode);
        let at = self.geometry.slots_offset + u64::from(index) * SLOT_LEN as u64;
        self.file.write_all_at(&b, at)
    }

    /// Every published connection.
    ///
    /// # Errors
    /// What `pread` returns.
    pub fn read_slots(&self) -> io::Result<Slots> {
        let mut out = Slots::default();
        let per_read = 512usize;
        let mut buf = vec![0u8; per_read * SLOT_LEN];
        let mut i = 0u32;
        while i < self.geometry.slot_count {
            let n = per_read.min((self.geometry.slot_count - i) as usize);
            let chunk = &mut buf[..n * SLOT_LEN];
            let at = self.geometry.slots_offset + u64::from(i) * SLOT_LEN as u64;
            self.file.read_exact_at(chunk, at)?;
            for (k, raw) in chunk.chunks_exact(SLOT_LEN).enumerate() {
                if raw.iter().all(|&b| b == 0) {
                    continue;
                }
                match Slot::decode(raw) {
                    Some(s) => {
                        out.slots.push(s);
                        out.indices.push(i + k as u32);
                    }
                    None => out.invalid += 1,
                }
            }
            i += n as u32;
        }
        Ok(out)
    }

    /// Claims the RNIC for this process: a POSIX record lock (`F_SETLK`, write, byte 0) that
    /// the kernel drops when the process dies (or closes any descriptor of this file), and that a
    /// `fork`ed child does not inherit. One process of the program's tree at a time owns the
    /// RNIC, as one process at a time could bind its address.
    ///
    /// # Errors
    /// `Err(Some(pid))`: process `pid` holds it; `Err(None)`: the lock call failed.
    pub fn claim(&self) -> Result<(), Option<u32>> {
        use nix::fcntl::{fcntl, FcntlArg};
        let lock = claim_lock(libc::F_WRLCK);
        match fcntl(&self.file, FcntlArg::F_SETLK(&lock)) {
            Ok(_) => Ok(()),
            Err(nix::errno::Errno::EACCES | nix::errno::Errno::EAGAIN) => Err(self.owner_pid()),
            Err(_) => Err(None),
        }
    }

    /// The process that holds the claim ([`claim`](Self::claim)) now, if another one does.
    pub fn owner_pid(&self) -> Option<u32> {
        use nix::fcntl::{fcntl, FcntlArg};
        let mut lock = claim_lock(libc::F_WRLCK);
        fcntl(&self.file, FcntlArg::F_GETLK(&mut lock)).ok()?;
        (i32::from(lock.l_type) != libc::F_UNLCK).then_some(lock.l_pid as u32)
    }

    /// Writes a report (e.g. a checker's JSON) so that [`read_report`](Self::read_report)
    /// returns it, or the previous one if the writer dies before it is complete.
    ///
    /// # Errors
    /// `EFBIG` when it is larger than the geometry's report capacity; what `pwrite` returns.
    pub fn write_report(&self, report: &[u8]) -> io::Result<()> {
        let cap = self.geometry.report_capacity;
        if report.len() as u64 > cap {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        let (current, _, seq) = self.report_control()?;
        let next = if seq == 0 { 0 } else { 1 - current };
        self.file
            .write_all_at(report, self.geometry.report_offset + u64::from(next) * cap)?;
        let mut c = [0u8; 16];
        c[0..4].copy_from_slice(&next.to_le_bytes());
        c[4..8].copy_from_slice(&(report.len() as u32).to_le_bytes());
        c[8..16].copy_from_slice(&seq.wrapping_add(1).max(1).to_le_bytes());
        self.file.write_all_at(&c, REPORT_CONTROL_OFFSET)
    }

    /// The last complete report, if one was written.
    ///
    /// # Errors
    /// What `pread` returns.
    pub fn read_report(&self) -> io::Result<Option<Vec<u8>>> {
        let (current, len, seq) = self.report_control()?;
        if seq == 0 || current > 1 || u64::from(len) > self.geometry.report_capacity {
            return Ok(None);
        }
        let mut b = vec![0u8; len as usize];
        let at = self.geometry.report_offset + u64::from(current) * self.geometry.report_capacity;
        self.file.read_exact_at(&mut b, at)?;
        Ok(Some(b))
    }

    /// (copy, length, sequence number; 0: no report yet).
    fn report_control(&self) -> io::Result<(u32, u32, u64)> {
        let mut c = [0u8; 16];
        self.file.read_exact_at(&mut c, REPORT_CONTROL_OFFSET)?;
        Ok((u32_at(&c, 0), u32_at(&c, 4), u64_at(&c, 8)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cm_core::engine::IbCmState;

    fn temp_file() -> File {
        let path = std::env::temp_dir().join(format!(
            "rnic-state-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let _ = std::fs::remove_file(&path);
        f
    }

    fn reopen(f: &File) -> File {
        f.try_clone().unwrap_or_else(|e| panic!("{e}"))
    }

    fn snapshot(comm: u32) -> ConnSnapshot {
        ConnSnapshot {
            state: IbCmState::Established,
            local_comm_id: comm,
            remote_comm_id: 7,
            local_gid: Gid::from_ipv4([127, 0, 50, 1].into()),
            remote_gid: Gid::from_ipv4([127, 0, 50, 2].into()),
            remote_ca_guid: 42,
            local_qpn: 0x11,
            remote_qpn: 0x22,
            av_timeout: 17,
            timeout_ms: 4096,
            max_cm_retries: 15,
            tid: 5,
            dreq_tid: 0,
        }
    }

    #[test]
    fn what_the_program_writes_the_supervisor_reads() {
        let f = temp_file();
        let sup = StateFile::create(reopen(&f), 1234).unwrap_or_else(|e| panic!("{e}"));
        let prog = StateFile::open(reopen(&f)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(prog.geometry().supervisor_pid, 1234);
        assert_eq!(sup.read_owner().ok(), Some(None), "no owner yet");
        let owner = Owner {
            pid: 99,
            addr: "127.0.50.1:4791".parse().unwrap_or_else(|e| panic!("{e}")),
            local_gid: Gid::from_ipv4([127, 0, 50, 1].into()),
            cm: CmConfig {
                ca_guid: 0xabc,
                ..CmConfig::default().with_fast_timers()
            },
            unpublished: 3,
            device_removed: true,
        };
        prog.write_owner(&owner).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sup.read_owner().ok(), Some(Some(owner)));
        let a = Slot {
            conn: snapshot(1),
            peer: None,
        };
        let b = Slot {
            conn: snapshot(2),
            peer: Some("[::1]:5000".parse().unwrap_or_else(|e| panic!("{e}"))),
        };
        let last = sup.geometry().slot_count - 1;
        for (i, s) in [(0, &a), (last, &b), (7, &a)] {
            prog.write_slot(i, Some(s))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        prog.write_slot(7, None).unwrap_or_else(|e| panic!("{e}"));
        assert!(prog.write_slot(last + 1, Some(&a)).is_err(), "past the end");
        let read = sup.read_slots().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read.slots, vec![a, b]);
        assert_eq!(read.indices, vec![0, last]);
        assert_eq!(read.invalid, 0);
    }

    #[test]
    fn junk_is_skipped_and_counted() {
        let f = temp_file();
        let sup = StateFile::create(reopen(&f), 1).unwrap_or_else(|e| panic!("{e}"));
        let at = sup.geometry().slots_offset + 3 * SLOT_LEN as u64;
        f.write_all_at(&[0xff; SLOT_LEN], at)
            .unwrap_or_else(|e| panic!("{e}"));
        f.write_all_at(&[0x55; OWNER_LEN], OWNER_OFFSET)
            .unwrap_or_else(|e| panic!("{e}"));
        let read = sup.read_slots().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((read.slots.len(), read.invalid), (0, 1));
        assert_eq!(sup.read_owner().ok(), Some(None));
        f.write_all_at(b"NOTSTATE", 0)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(StateFile::open(reopen(&f)).is_err(), "bad magic");
    }

    #[test]
    fn a_claim_is_per_process() {
        let f = temp_file();
        let s = StateFile::create(reopen(&f), 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.owner_pid(), None);
        assert_eq!(s.claim(), Ok(()));
        // The holder sees no other holder, and may claim again.
        assert_eq!(s.owner_pid(), None);
        assert_eq!(s.claim(), Ok(()));
    }

    #[test]
    fn a_report_is_the_last_complete_one() {
        let f = temp_file();
        let s = StateFile::create(reopen(&f), 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.read_report().ok(), Some(None));
        s.write_report(b"{\"a\":1}")
            .unwrap_or_else(|e| panic!("{e}"));
        s.write_report(b"{\"b\":22}")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.read_report().ok(), Some(Some(b"{\"b\":22}".to_vec())));
        // A writer killed while writing the next report's bytes: the control record still
        // names the complete one.
        let g = *s.geometry();
        f.write_all_at(b"torn", g.report_offset)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.read_report().ok(), Some(Some(b"{\"b\":22}".to_vec())));
        let too_big = vec![b'x'; g.report_capacity as usize + 1];
        assert!(s.write_report(&too_big).is_err());
    }
}
