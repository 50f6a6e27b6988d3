//! The fuzz targets' seed corpora and past crashes, replayed on stable (issue 12, item 5).
//!
//! Every file under `fuzz/corpus/<target>/` and `fuzz/artifacts/<target>/` runs through the
//! same body the cargo-fuzz target runs (`fuzz/src/harness/`, compiled in here through
//! `#[path]`), so a crash the fuzzer once found stays fixed without nightly or libFuzzer.
//!
//! `regenerate_corpus` (ignored) rebuilds the seed corpora from real captures: the pcaps in
//! `$RNIC_FUZZ_PCAPS` (what `fuzz/gen-corpus.sh` writes with `rnic replay --pcap` and
//! `rnic ping --pcap`), or, without that variable, the captures of `rnic replay --seed N` for
//! a few seeds, made in-process; `capi_calls`'s seeds are call sequences its harness writes
//! (`capi_calls::seeds`). See `fuzz/README.md`.

#[path = "../../fuzz/src/harness/mod.rs"]
mod harness;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use harness::input::Output;
use harness::{cm_engine, rc_responder, roce_decode};
use rnic_sim::roce::{decode, encode, Flow, Opcode, Packet};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of `dir`, sorted; none if it does not exist.
#[allow(clippy::unwrap_used)] // test helper: an unreadable directory fails the test
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_none_or(|n| n != ".gitkeep"))
        .collect();
    v.sort();
    v
}

/// Runs every corpus entry and artifact of `target`; fails naming each input that panics.
#[allow(clippy::unwrap_used)] // test helper
fn replay(target: &str) {
    let corpus = files(&fuzz_dir().join("corpus").join(target));
    assert!(
        !corpus.is_empty(),
        "no seed corpus for {target} under fuzz/corpus/{target}"
    );
    let artifacts = files(&fuzz_dir().join("artifacts").join(target));
    let mut failed = Vec::new();
    for path in corpus.iter().chain(&artifacts) {
        let data = std::fs::read(path).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| harness::run(target, &data)));
        match r {
            Ok(true) => {}
            Ok(false) => panic!("no harness for target {target}"),
            Err(_) => failed.push(path.display().to_string()),
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs panicked (messages above):\n{}",
        failed.len(),
        corpus.len() + artifacts.len(),
        failed.join("\n")
    );
}

#[test]
fn every_target_has_a_fuzz_target_file() {
    for t in harness::TARGETS {
        let f = fuzz_dir().join("fuzz_targets").join(format!("{t}.rs"));
        assert!(f.is_file(), "{} missing", f.display());
    }
}

#[test]
fn roce_decode_corpus_and_artifacts() {
    replay("roce_decode");
}

#[test]
fn mad_decode_corpus_and_artifacts() {
    replay("mad_decode");
}

#[test]
fn cm_engine_corpus_and_artifacts() {
    replay("cm_engine");
}

#[test]
fn rc_responder_corpus_and_artifacts() {
    replay("rc_responder");
}

/// Runs librnic's runtime in this process (one UDP socket on a free 127.0.0.x, every datagram
/// dropped): the harness starts it with its own configuration, not the environment's.
#[test]
fn capi_calls_corpus_and_artifacts() {
    replay("capi_calls");
}

// ---- corpus generation ----------------------------------------------------------------------

/// One captured datagram: where it came from, its flow and its UDP payload.
struct Datagram {
    source: String,
    flow: Flow,
    bytes: Vec<u8>,
}

/// The RoCEv2 datagrams of a pcap written by `PcapWriter` (Ethernet, IPv4 or IPv6, UDP).
#[allow(clippy::unwrap_used)] // generator: a bad capture fails it
fn read_pcap(source: &str, file: &[u8]) -> Vec<Datagram> {
    let mut r = pcap_file::pcap::PcapReader::new(file).unwrap();
    let mut out = Vec::new();
    while let Some(pkt) = r.next_packet() {
        let f = pkt.unwrap().data.to_vec();
        let ethertype = u16::from_be_bytes([f[12], f[13]]);
        let (src_ip, dst_ip, udp): (IpAddr, IpAddr, usize) = match ethertype {
            0x0800 => {
                let ihl = usize::from(f[14] & 0x0F) * 4;
                let a: [u8; 4] = f[26..30].try_into().unwrap();
                let b: [u8; 4] = f[30..34].try_into().unwrap();
                (Ipv4Addr::from(a).into(), Ipv4Addr::from(b).into(), 14 + ihl)
            }
            0x86DD => {
                let a: [u8; 16] = f[22..38].try_into().unwrap();
                let b: [u8; 16] = f[38..54].try_into().unwrap();
                (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into(), 54)
            }
            _ => continue,
        };
        let port = |o: usize| u16::from_be_bytes([f[udp + o], f[udp + o + 1]]);
        out.push(Datagram {
            source: source.to_string(),
            flow: Flow::new(
                SocketAddr::new(src_ip, port(0)),
                SocketAddr::new(dst_ip, port(2)),
            ),
            bytes: f[udp + 8..].to_vec(),
        });
    }
    out
}

/// The captures to build from: `$RNIC_FUZZ_PCAPS/*.pcap`, or `rnic replay` of a few seeds.
#[allow(clippy::unwrap_used)] // generator
fn captures() -> Vec<Datagram> {
    if let Some(dir) = std::env::var_os("RNIC_FUZZ_PCAPS") {
        let mut all = Vec::new();
        for p in files(Path::new(&dir)) {
            if p.extension().is_some_and(|e| e == "pcap") {
                let name = p.file_stem().unwrap().to_string_lossy().to_string();
                all.extend(read_pcap(&name, &std::fs::read(&p).unwrap()));
            }
        }
        assert!(!all.is_empty(), "no pcap in {}", dir.to_string_lossy());
        return all;
    }
    let mut all = Vec::new();
    for seed in 1..=SEEDS {
        let pcap = rnic_testbed::scenario::replay_seed(seed).pcap();
        all.extend(read_pcap(&format!("replay-s{seed}"), &pcap));
    }
    all
}

/// Seeds 1..=SEEDS of `rnic replay` are used when `$RNIC_FUZZ_PCAPS` is not set
/// (gen-corpus.sh replays the same).
const SEEDS: u64 = 200;

fn opcode_name(op: Opcode) -> String {
    format!("{op:?}")
        .chars()
        .flat_map(|c| {
            let lower = c.to_ascii_lowercase();
            if c.is_ascii_uppercase() {
                vec!['-', lower]
            } else {
                vec![c]
            }
        })
        .collect::<String>()
        .trim_start_matches('-')
        .to_string()
}

/// Writes `files` (name, bytes) as the seed corpus of `target`, replacing the old one.
#[allow(clippy::unwrap_used)] // generator
fn write_corpus(target: &str, files_: &[(String, Vec<u8>)]) {
    let dir = fuzz_dir().join("corpus").join(target);
    for old in files(&dir) {
        std::fs::remove_file(old).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in files_ {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    println!("{target}: {} files", files_.len());
}

fn is_gsi(p: &Packet) -> bool {
    p.bth.dest_qp == rnic_sim::GSI_QPN && p.bth.opcode == Opcode::UdSendOnly
}

fn attr_id(mad: &[u8]) -> u16 {
    mad.get(16..18)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

fn attr_name(id: u16) -> &'static str {
    match id {
        0x10 => "req",
        0x11 => "mra",
        0x12 => "rej",
        0x13 => "rep",
        0x14 => "rtu",
        0x15 => "dreq",
        0x16 => "drep",
        0x17 => "sidr-req",
        0x18 => "sidr-rep",
        _ => "other",
    }
}

fn records<R>(rs: &[R], write: impl Fn(&R, &mut Output)) -> Vec<u8> {
    let mut out = Output::default();
    for r in rs {
        write(r, &mut out);
    }
    out.bytes
}

/// A SIDR_REQ (UDP port space, port 7174, an IP-CM header from 127.0.90.2) and its SIDR_REP
/// (status 0, QPN, RDMA_UDP_QKEY), as two engines exchange them.
#[allow(clippy::unwrap_used)] // generator
fn sidr_mads() -> Vec<Vec<u8>> {
    use cm_core::engine::{
        CmConfig, CmEngine, IbCmEventKind, SidrRepParams, SidrReqParams, SidrStatus,
    };
    use cm_core::wire::{ip_service_id, IpCmHeader, RdmaPortSpace};
    use verbs_core::{Gid, SimTime};
    let gid = |d| Gid::from_ipv4(Ipv4Addr::new(127, 0, 90, d));
    let mut a = CmEngine::new(CmConfig {
        ca_guid: 2,
        seed: 2,
        ..CmConfig::default()
    });
    let mut b = CmEngine::new(CmConfig {
        ca_guid: 1,
        seed: 1,
        ..CmConfig::default()
    });
    let service = ip_service_id(RdmaPortSpace::Udp, 7174);
    let l = b.create_id();
    b.listen(l, service, 1).unwrap();
    let hdr = IpCmHeader {
        src_port: 40123,
        src_addr: IpAddr::V4(Ipv4Addr::new(127, 0, 90, 2)),
        dst_addr: IpAddr::V4(Ipv4Addr::new(127, 0, 90, 1)),
    };
    let ia = a.create_id();
    let req = SidrReqParams {
        service_id: service,
        local_gid: gid(2),
        remote_gid: gid(1),
        pkey: 0xFFFF,
        private_data: hdr.sidr_req_private_data(&[]).unwrap(),
    };
    a.send_sidr_req(SimTime::ZERO, ia, &req).unwrap();
    let (_, sidr_req) = a.poll_transmit().unwrap();
    b.handle_datagram(SimTime::ZERO, gid(2), &sidr_req);
    let ev = b.poll_event().unwrap();
    assert!(matches!(ev.kind, IbCmEventKind::SidrReqReceived(_)));
    let rep = SidrRepParams {
        qpn: 0x12c,
        qkey: cm_core::api::RDMA_UDP_QKEY,
        ..SidrRepParams::status(SidrStatus::Success)
    };
    b.send_sidr_rep(ev.id, &rep).unwrap();
    let (_, sidr_rep) = b.poll_transmit().unwrap();
    vec![sidr_req.to_vec(), sidr_rep.to_vec()]
}

/// The SIDR seeds of `mad_decode` are what `sidr_mads` makes now (the corpus is committed;
/// this keeps it honest).
#[test]
#[allow(clippy::unwrap_used)]
fn the_sidr_seeds_are_real_engine_mads() {
    let dir = fuzz_dir().join("corpus").join("mad_decode");
    let committed: BTreeSet<Vec<u8>> = files(&dir)
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("engine-sidr-"))
        })
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert_eq!(committed, sidr_mads().into_iter().collect::<BTreeSet<_>>());
}

/// Rebuilds `fuzz/corpus/*` from real captures (module docs). Run by `fuzz/gen-corpus.sh`.
#[test]
#[ignore = "rewrites fuzz/corpus; run by fuzz/gen-corpus.sh"]
#[allow(clippy::too_many_lines)]
fn regenerate_corpus() {
    let caps = captures();
    // Decoded with the ICRC checked on the capture's own flow; corrupted ones kept apart.
    let mut valid: Vec<(&Datagram, Packet)> = Vec::new();
    let mut corrupt: Vec<&Datagram> = Vec::new();
    for d in &caps {
        match decode(&d.bytes, &d.flow, true) {
            Ok(p) => valid.push((d, p)),
            Err(_) => corrupt.push(d),
        }
    }
    let mut hist = std::collections::BTreeMap::<String, usize>::new();
    for (_, p) in &valid {
        *hist.entry(opcode_name(p.bth.opcode)).or_default() += 1;
    }
    println!("opcodes: {hist:?}");
    println!(
        "{} datagrams ({} undecodable) from {} sources",
        caps.len(),
        corrupt.len(),
        caps.iter()
            .map(|d| &d.source)
            .collect::<BTreeSet<_>>()
            .len()
    );

    // roce_decode: one datagram per (opcode, payload size class), ICRC recomputed for the
    // harness's flow; plus a few that failed to decode, as captured.
    let mut roce = Vec::new();
    let mut seen = BTreeSet::new();
    for (d, p) in &valid {
        let class = match p.payload.len() {
            0 => 0,
            1..=255 => 1,
            256 => 2,
            _ => 3,
        };
        if roce.len() < 40 && seen.insert((p.bth.opcode as u8, class)) {
            let bytes = encode(p, &roce_decode::FLOW).map(|b| b.to_vec());
            if let Ok(bytes) = bytes {
                let name = format!("{}-{}-{}", d.source, opcode_name(p.bth.opcode), roce.len());
                roce.push((name, bytes));
            }
        }
    }
    for d in corrupt.iter().take(4) {
        roce.push((
            format!("{}-undecodable-{}", d.source, roce.len()),
            d.bytes.clone(),
        ));
    }
    write_corpus("roce_decode", &roce);

    // mad_decode: the MADs carried to QP1, up to three per attribute ID.
    let mads: Vec<(&Datagram, Vec<u8>)> = valid
        .iter()
        .filter(|(_, p)| is_gsi(p))
        .map(|(d, p)| (*d, p.payload.to_vec()))
        .collect();
    let mut mad_files = Vec::new();
    let mut per_attr = std::collections::BTreeMap::<u16, usize>::new();
    for (d, m) in &mads {
        let n = per_attr.entry(attr_id(m)).or_default();
        if *n < 3 && mad_files.len() < 30 {
            *n += 1;
            let name = format!("{}-{}-{}", d.source, attr_name(attr_id(m)), mad_files.len());
            mad_files.push((name, m.clone()));
        }
    }
    // No capture carries SIDR (neither `rnic replay` nor `rnic ping` resolves a UD service):
    // the SIDR_REQ and SIDR_REP of two engines' exchange.
    for m in sidr_mads() {
        let name = format!("engine-{}-{}", attr_name(attr_id(&m)), mad_files.len());
        mad_files.push((name, m));
    }
    write_corpus("mad_decode", &mad_files);

    // cm_engine: each template of the harness's own connection (real MADs of its CMs) to its
    // natural receiver, rebased; captured MADs of every kind, rebased onto the live
    // connection and as captured; and a few application sequences.
    use cm_engine::{AppCall as C, Record as R};
    use harness::input::Route as Rt;
    let w = cm_engine::World::established();
    let mut cm_files = Vec::new();
    for (i, (from, mad)) in w.templates().iter().enumerate() {
        let route = if *from == cm_engine::A {
            Rt::ToBFromA
        } else {
            Rt::ToAFromB
        };
        let name = attr_name(attr_id(mad));
        for (tag, route) in [("", route), ("-foreign", Rt::ToBFromForeign)] {
            let rs = [
                R::Template {
                    route,
                    rebase: true,
                    index: i as u8,
                    patches: Vec::new(),
                },
                R::Advance(30),
            ];
            cm_files.push((format!("template-{i}-{name}{tag}"), records(&rs, R::write)));
        }
    }
    let mut per_attr = std::collections::BTreeMap::<u16, usize>::new();
    for (d, m) in &mads {
        let n = per_attr.entry(attr_id(m)).or_default();
        if *n >= 2 {
            continue;
        }
        *n += 1;
        let to_a = (0x11..=0x13).contains(&attr_id(m)) /* MRA, REJ, REP */ || *n == 2;
        let route = if to_a { Rt::ToAFromB } else { Rt::ToBFromA };
        let rs = [
            R::Raw {
                route,
                rebase: true,
                mad: m.clone(),
            },
            R::Raw {
                route,
                rebase: false,
                mad: m.clone(),
            },
            R::Advance(32),
        ];
        let name = format!("{}-{}-{}", d.source, attr_name(attr_id(m)), cm_files.len());
        cm_files.push((name, records(&rs, R::write)));
    }
    let apps: [(&str, Vec<R>); 6] = [
        (
            "app-disconnect-a",
            vec![R::App(C::DisconnectA), R::Advance(33), R::Advance(39)],
        ),
        (
            "app-disconnect-b",
            vec![R::App(C::DisconnectB), R::Advance(39)],
        ),
        (
            "app-crossing-disconnects",
            vec![
                R::App(C::DisconnectA),
                R::App(C::DisconnectB),
                R::Advance(39),
            ],
        ),
        (
            "app-second-connection",
            vec![
                R::App(C::ConnectAgain),
                R::App(C::AcceptPending),
                R::App(C::DisconnectA),
                R::Advance(39),
            ],
        ),
        (
            "app-reject-second",
            vec![
                R::App(C::ConnectAgain),
                R::App(C::RejectPending),
                R::Advance(35),
            ],
        ),
        (
            "app-destroy-live",
            vec![R::App(C::DestroyA), R::App(C::DestroyB), R::Advance(39)],
        ),
    ];
    for (name, rs) in apps {
        cm_files.push((name.to_string(), records(&rs, R::write)));
    }
    write_corpus("cm_engine", &cm_files);

    // rc_responder: windows of captured RC packets, in capture order, retargeted at the
    // harness's QPs (requests to B at its expected PSN, responses to A at its last PSN), after
    // a few receives; each window chosen for an opcode fewer than three earlier windows had;
    // and a few
    // work-request sequences.
    use harness::input::Route as Pr;
    use rc_responder::{AppCall as W, Record as P, Rewrite};
    let mut rc_files = Vec::new();
    let mut covered = std::collections::BTreeMap::<u8, usize>::new();
    let mut by_source = std::collections::BTreeMap::<&str, Vec<&(&Datagram, Packet)>>::new();
    for v in valid.iter().filter(|(_, p)| !is_gsi(p)) {
        by_source.entry(v.0.source.as_str()).or_default().push(v);
    }
    for window in by_source.values().flat_map(|v| v.chunks(12)) {
        if rc_files.len() >= 24 {
            break;
        }
        let new = window
            .iter()
            .any(|(_, p)| covered.get(&(p.bth.opcode as u8)).is_none_or(|n| *n < 3));
        if !new {
            continue;
        }
        let mut rs = vec![
            P::App(W::RecvB, 10),
            P::App(W::RecvB, 20),
            P::App(W::RecvB, 30),
            P::App(W::RecvA, 40),
        ];
        for (_, p) in window {
            *covered.entry(p.bth.opcode as u8).or_default() += 1;
            let request = rc_responder::is_request(p.bth.opcode);
            let (route, off) = if request {
                (Pr::ToBFromA, 0)
            } else {
                (Pr::ToAFromB, -1)
            };
            if let Some(bytes) = rc_responder::with_psn_offset(p, off) {
                rs.push(P::Packet {
                    route,
                    rewrite: Rewrite {
                        retarget: true,
                        rebase_psn: true,
                        rebind_keys: request,
                    },
                    bytes,
                });
            }
        }
        rs.push(P::Advance(24));
        let name = format!(
            "{}-{}-{}",
            window[0].0.source,
            opcode_name(window[0].1.bth.opcode),
            rc_files.len()
        );
        rc_files.push((name, records(&rs, P::write)));
    }
    let work: [(&str, Vec<P>); 7] = [
        (
            "wr-send",
            vec![P::App(W::RecvB, 50), P::App(W::SendA, 50), P::Advance(20)],
        ),
        (
            "wr-send-imm-multi-packet",
            vec![P::App(W::RecvB, 70), P::App(W::SendA, 71), P::Advance(20)],
        ),
        (
            "wr-write-read-atomic",
            vec![
                P::App(W::WriteA, 60),
                P::App(W::ReadA, 60),
                P::App(W::FetchAddA, 8),
                P::Advance(20),
            ],
        ),
        (
            "wr-write-imm",
            vec![P::App(W::RecvB, 10), P::App(W::WriteA, 33), P::Advance(20)],
        ),
        (
            "wr-rnr",
            vec![P::App(W::SendA, 10), P::Advance(26), P::Advance(30)],
        ),
        (
            "wr-err-flush",
            vec![
                P::App(W::RecvB, 1),
                P::App(W::RecvB, 2),
                P::App(W::SendA, 3),
                P::App(W::ToErr, 0),
                P::Advance(30),
            ],
        ),
        (
            "wr-send-b",
            vec![P::App(W::RecvA, 5), P::App(W::SendB, 5), P::Advance(20)],
        ),
    ];
    for (name, rs) in work {
        rc_files.push((name.to_string(), records(&rs, P::write)));
    }
    write_corpus("rc_responder", &rc_files);

    write_capi_calls_corpus();

    // Every new seed passes.
    for t in harness::TARGETS {
        replay(t);
    }
}

/// `capi_calls`: call sequences written in the harness (`capi_calls::seeds`: a good and a bad
/// one each for verbs and rdma_cm, and UD). API calls are not on any wire: there is nothing to
/// capture.
fn write_capi_calls_corpus() {
    let capi: Vec<(String, Vec<u8>)> = harness::capi_calls::seeds()
        .into_iter()
        .map(|(n, b)| (n.to_string(), b))
        .collect();
    write_corpus("capi_calls", &capi);
}

/// Rewrites `fuzz/corpus/capi_calls/` alone (`regenerate_corpus` does it too, with the
/// others), then replays it.
#[test]
#[ignore = "rewrites fuzz/corpus/capi_calls"]
fn regenerate_capi_calls_corpus() {
    write_capi_calls_corpus();
    replay("capi_calls");
}

/// `capi_calls` keeps no state across inputs: replays up to 1 500 inputs of `$RNIC_FUZZ_DIR`
/// (default `fuzz/corpus/capi_calls`; point it at a fuzzing run's scratch directory) 8 times
/// in this process and prints the resident size after each pass, which must not grow by more
/// than 1 MiB from the second pass to the last (the first pass warms up caches and the
/// runtime). Each input also checks the library's object counts itself.
#[test]
#[ignore = "a measurement: run on a corpus of a fuzzing run"]
#[allow(clippy::unwrap_used)]
fn capi_calls_does_not_grow() {
    let dir = std::env::var_os("RNIC_FUZZ_DIR").map_or_else(
        || fuzz_dir().join("corpus").join("capi_calls"),
        PathBuf::from,
    );
    let inputs: Vec<Vec<u8>> = files(&dir)
        .iter()
        .take(1500)
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let rss = || {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap()
    };
    let mut after = Vec::new();
    for pass in 0..8 {
        for data in &inputs {
            harness::capi_calls::run(data);
        }
        after.push(rss());
        println!(
            "pass {pass}: {} inputs, VmRSS {} kB",
            inputs.len(),
            after[pass]
        );
    }
    assert!(
        after[7] <= after[1] + 1024,
        "resident size grew from {} kB to {} kB",
        after[1],
        after[7]
    );
}
