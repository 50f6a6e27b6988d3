//! `--pcap FILE`, written as it goes: the fault layer ([`FaultyEndpoint`](super::wire::FaultyEndpoint))
//! hands every datagram to a [`CaptureSink`] the moment it crosses; [`PcapFile`] appends it to
//! the file at once, one `write(2)` of record header and frame per datagram, unbuffered. A
//! process that is interrupted, panics or is killed (`kill -9`) leaves a valid capture of
//! everything up to its last datagram, and memory does not grow with the capture.

use super::PingError;
use rnic_sim::roce::pcap::{datagram_record, PcapWriter};
use rnic_sim::roce::Flow;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use verbs_core::SimTime;

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
    /// ([`PcapWriter::new`]: Ethernet, nanosecond timestamps).
    ///
    /// # Errors
    /// [`PingError::Pcap`] naming the file if it cannot be created or written.
    pub fn create(path: &Path) -> Result<PcapFile, PingError> {
        let named = |e: &dyn std::fmt::Display| PingError::Pcap(format!("{}: {e}", path.display()));
        let mut file = File::create(path).map_err(|e| named(&e))?;
        let header = PcapWriter::new(Vec::new())
            .map_err(|e| named(&e))?
            .into_inner();
        file.write_all(&header).map_err(|e| named(&e))?;
        Ok(PcapFile {
            path: path.to_path_buf(),
            file,
            error: None,
            not_written: 0,
        })
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
        let written = datagram_record(at, flow, bytes)
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
    fn every_record_is_in_the_file_as_soon_as_it_is_recorded() {
        let dir = std::env::temp_dir().join(format!("rnic-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.pcap");
        let mut sink = PcapFile::create(&path).unwrap();
        let flow = Flow::new(
            "127.0.0.1:5000".parse().unwrap(),
            "127.0.0.2:6000".parse().unwrap(),
        );
        for i in 0..3u64 {
            sink.record(SimTime::from_nanos(1_000 * i), &flow, &[i as u8; 40]);
            // Read back while the sink is still open: all records so far, nothing pending.
            let bytes = std::fs::read(&path).unwrap();
            let mut r = PcapReader::new(&bytes[..]).unwrap();
            let mut n = 0;
            while let Some(p) = r.next_packet() {
                let p = p.unwrap();
                assert_eq!(p.data[p.data.len() - 40..], [n as u8; 40]);
                n += 1;
            }
            assert_eq!(n, i + 1);
        }
        assert_eq!((sink.error(), sink.not_written()), (None, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
