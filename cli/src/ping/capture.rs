//! `--pcap FILE`, written as it goes: the fault layer ([`FaultyEndpoint`](super::wire::FaultyEndpoint))
//! hands every datagram to a [`CaptureSink`] the moment it crosses; [`PcapFile`] appends it to
//! the file at once, one `write(2)` of record header and frame per datagram, unbuffered. A
//! process that is interrupted, panics or is killed (`kill -9`) leaves a valid capture of
//! everything up to its last datagram, and memory does not grow with the capture.
//!
//! Each frame is cut to the snap length (`--snaplen`, [`DEFAULT_SNAPLEN`] bytes: headers and
//! a CM MAD whole, a data packet's first bytes), as tcpdump's `-s`. Timestamps are wall-clock
//! (UTC) times, so that two processes' captures line up with each other and with their logs:
//! the first datagram's is the wall clock when it was recorded, each later one's that plus the
//! driver's time since (the clock of the report's and log's times, which count from the
//! driver's start).

use super::PingError;
use rnic_sim::roce::pcap::{datagram_record_cut, PcapWriter};
use rnic_sim::roce::Flow;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use verbs_core::SimTime;

/// `--snaplen`'s default, bytes of each frame kept: Ethernet, IP, UDP, BTH and extension
/// headers and a whole CM MAD (322 bytes with IPv4).
pub const DEFAULT_SNAPLEN: u32 = 384;

/// Where the fault layer records the datagrams of one side (`--pcap`).
pub trait CaptureSink: Send {
    /// One datagram of `flow` (the UDP payload `bytes`, BTH … ICRC), sent or received at `at`.
    /// Must not block for long: it runs on the driver's thread, under the endpoint's lock.
    fn record(&mut self, at: SimTime, flow: &Flow, bytes: &[u8]);

    /// Datagrams not recorded because writing failed.
    fn not_written(&self) -> u64;

    /// The first write error, if any (recording stops at the first one).
    fn error(&self) -> Option<String>;
}

/// A pcap file that each datagram is appended to as it is recorded. See the module docs.
pub struct PcapFile {
    path: PathBuf,
    file: File,
    snaplen: u32,
    /// The wall-clock time (since the Unix epoch) of the driver's time zero, taken at the
    /// first record.
    origin: Option<Duration>,
    error: Option<String>,
    not_written: u64,
}

impl std::fmt::Debug for PcapFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapFile")
            .field("path", &self.path)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl PcapFile {
    /// Creates (or truncates) `path` and writes the pcap file header
    /// ([`PcapWriter::new`]: Ethernet, nanosecond timestamps); each record keeps `snaplen`
    /// bytes of its frame.
    ///
    /// # Errors
    /// [`PingError::Pcap`] naming the file if it cannot be created or written.
    pub fn create(path: &Path, snaplen: u32) -> Result<PcapFile, PingError> {
        let named = |e: &dyn std::fmt::Display| PingError::Pcap(format!("{}: {e}", path.display()));
        let mut file = File::create(path).map_err(|e| named(&e))?;
        let header = PcapWriter::new(Vec::new())
            .map_err(|e| named(&e))?
            .into_inner();
        file.write_all(&header).map_err(|e| named(&e))?;
        Ok(PcapFile {
            path: path.to_path_buf(),
            file,
            snaplen,
            origin: None,
            error: None,
            not_written: 0,
        })
    }

    /// The wall-clock time of `at`: the origin, taken from the system clock at the first
    /// record, plus `at`.
    #[allow(clippy::disallowed_methods)] // a driver's capture: wall-clock timestamps
    fn wall_clock(&mut self, at: SimTime) -> Duration {
        let at = Duration::from_nanos(at.as_nanos());
        let origin = *self.origin.get_or_insert_with(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .saturating_sub(at)
        });
        origin + at
    }
}

impl CaptureSink for PcapFile {
    fn record(&mut self, at: SimTime, flow: &Flow, bytes: &[u8]) {
        if self.error.is_some() {
            self.not_written += 1;
            return;
        }
        // One write of the whole record (a regular file takes it whole): a reader, or a
        // process killed in between, never sees a record header without its frame.
        let ts = self.wall_clock(at);
        let written = datagram_record_cut(ts, flow, bytes, self.snaplen)
            .map_err(|e| e.to_string())
            .and_then(|rec| self.file.write_all(&rec).map_err(|e| e.to_string()));
        if let Err(e) = written {
            self.error = Some(format!("{}: {e}", self.path.display()));
            self.not_written += 1;
        }
    }

    fn not_written(&self) -> u64 {
        self.not_written
    }

    fn error(&self) -> Option<String> {
        self.error.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::PcapReader;

    #[test]
    fn every_record_is_in_the_file_as_soon_as_it_is_recorded_cut_and_wall_clock_stamped() {
        let dir = std::env::temp_dir().join(format!("rnic-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.pcap");
        let mut sink = PcapFile::create(&path, 64).unwrap();
        let flow = Flow::new(
            "127.0.0.1:5000".parse().unwrap(),
            "127.0.0.2:6000".parse().unwrap(),
        );
        let mut firsts = None;
        for i in 0..3u64 {
            sink.record(SimTime::from_nanos(1_000 * i), &flow, &[i as u8; 40]);
            // Read back while the sink is still open: all records so far, nothing pending.
            let bytes = std::fs::read(&path).unwrap();
            let mut r = PcapReader::new(&bytes[..]).unwrap();
            let mut n = 0;
            while let Some(p) = r.next_packet() {
                let p = p.unwrap();
                // Ethernet 14 + IPv4 20 + UDP 8 + 40 bytes, cut to 64: 22 of the 40 kept.
                assert_eq!((p.data.len(), p.orig_len), (64, 82));
                assert_eq!(p.data[42..], [n as u8; 22]);
                // Wall-clock times (after 2020), 1 µs apart as recorded.
                assert!(p.timestamp.as_secs() > 1_577_836_800, "{:?}", p.timestamp);
                let first = *firsts.get_or_insert(p.timestamp);
                assert_eq!(p.timestamp - first, Duration::from_micros(n));
                n += 1;
            }
            assert_eq!(n, i + 1);
        }
        assert_eq!((sink.error(), sink.not_written()), (None, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
