//! `rnic ping --device` on the hardware backend (crate `hw/`, feature `hw`): libibverbs loaded
//! at run time, the CM's MADs on the ping socket, the data through the device.
//!
//! No machine here has an RDMA NIC, so by default the "hardware" is librnic.so (crate `capi/`)
//! loaded *as* `libibverbs.so.1` from a directory on `LD_LIBRARY_PATH`: every FFI call of the
//! backend — dlopen, the real struct layouts, the inline helpers through `ibv_context.ops` —
//! runs against a libibverbs ABI, and each process gets a simulated RNIC of its own
//! (`rnic0`, GID = `RNIC_ADDR`) under the backend. With `RNIC_HW_DEVICE=rxe0` (and optionally
//! `RNIC_HW_IP`, else the device's first RoCEv2 IPv4 GID) the same tests run on that device
//! instead (docs/hardware.md).
//!
//!     cargo test -p rnic-cli --features hw --test hw
//!
//! Without the feature, only the answer to `--device` is checked: a clear error.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::process::{Command, Output};

mod ping_report;

const RNIC: &str = env!("CARGO_BIN_EXE_rnic");

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[cfg(not(feature = "hw"))]
#[test]
fn device_without_the_hw_feature_is_a_clear_error() {
    let (code, out, err) =
        run(Command::new(RNIC).args(["ping", "--connect", "127.0.0.1:7471", "--device", "rxe0"]));
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("--features hw"), "{err}");
}

#[cfg(feature = "hw")]
mod hw {
    use super::ping_report::{events, listening_addr, report};
    use super::{run, RNIC};
    use std::io::{BufRead, BufReader, Read};
    use std::net::SocketAddr;
    use std::path::{Path, PathBuf};
    use std::process::{Child, ChildStdout, Command, Stdio};
    use std::sync::OnceLock;

    /// Where the two ends run: a real device, or librnic.so posing as libibverbs.
    struct Target {
        device: String,
        server_ip: String,
        client_ip: String,
        /// librnic.so as libibverbs.so.1 (`None` on a real device).
        lib_dir: Option<PathBuf>,
    }

    impl Target {
        /// `RNIC_HW_DEVICE`'s device, or librnic.so with two loopback addresses from `base`
        /// (127.0.0.base and base+1: each process is an RNIC whose GID is its address).
        fn new(base: u8) -> Target {
            if let Ok(device) = std::env::var("RNIC_HW_DEVICE") {
                let ip = std::env::var("RNIC_HW_IP")
                    .ok()
                    .or_else(|| sysfs_roce_v2_ipv4(&device))
                    .expect("RNIC_HW_IP, or a RoCEv2 IPv4 GID on port 1 of RNIC_HW_DEVICE");
                return Target {
                    device,
                    server_ip: ip.clone(),
                    client_ip: ip,
                    lib_dir: None,
                };
            }
            Target {
                device: "rnic0".into(),
                server_ip: format!("127.0.0.{base}"),
                client_ip: format!("127.0.0.{}", base + 1),
                lib_dir: Some(librnic_as_libibverbs()),
            }
        }

        /// `rnic ping --device DEVICE …` as the side whose RNIC has address `ip`.
        fn ping(&self, ip: &str) -> Command {
            self.ping_on(ip, &self.device)
        }

        /// [`ping`](Self::ping) asking for `device`.
        fn ping_on(&self, ip: &str, device: &str) -> Command {
            let mut cmd = Command::new(RNIC);
            cmd.args(["ping", "--device", device]);
            if let Some(dir) = &self.lib_dir {
                cmd.env("LD_LIBRARY_PATH", dir)
                    .env("RNIC_ADDR", ip)
                    .env("RNIC_FAST_TIMERS", "1")
                    .env("RNIC_STATS", "json");
            }
            cmd
        }
    }

    /// The first IPv4-mapped GID of port 1 whose type is RoCE v2, from sysfs.
    fn sysfs_roce_v2_ipv4(device: &str) -> Option<String> {
        let port = PathBuf::from(format!("/sys/class/infiniband/{device}/ports/1"));
        (0..256).find_map(|i| {
            let gid = std::fs::read_to_string(port.join(format!("gids/{i}"))).ok()?;
            let ty = std::fs::read_to_string(port.join(format!("gid_attrs/types/{i}"))).ok()?;
            let g = gid.trim();
            if !ty.contains("RoCE v2") || !g.starts_with("0000:0000:0000:0000:0000:ffff:") {
                return None;
            }
            let hex: String = g[30..].replace(':', "");
            let v = u32::from_str_radix(&hex, 16).ok()?;
            Some(std::net::Ipv4Addr::from(v).to_string())
        })
    }

    /// A directory holding `libibverbs.so.1` and `librdmacm.so.1` → librnic.so (built next to
    /// the `rnic` binary, which depends on it); made once per test process.
    fn librnic_as_libibverbs() -> PathBuf {
        static DIR: OnceLock<PathBuf> = OnceLock::new();
        DIR.get_or_init(make_lib_dir).clone()
    }

    fn make_lib_dir() -> PathBuf {
        // (The newer copy: the one in deps/ is refreshed whenever the rnic binary is built.)
        let lib = rnic_cli::exec::find_library().expect("librnic.so next to the test binary");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("librnic-as-libibverbs");
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["libibverbs.so.1", "librdmacm.so.1"] {
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&lib, &link).unwrap();
        }
        dir
    }

    struct ServerProc {
        child: Child,
        out: BufReader<ChildStdout>,
        addr: SocketAddr,
    }

    fn spawn_server(t: &Target, args: &[&str]) -> ServerProc {
        let mut cmd = t.ping(&t.server_ip);
        let listen = format!("{}:0", t.server_ip);
        cmd.args(["--listen", &listen, "--once", "--json"])
            .args(args);
        spawn(cmd)
    }

    /// Starts a server command and waits for its listening line.
    fn spawn(mut cmd: Command) -> ServerProc {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let Some(addr) = listening_addr(&line) else {
            let mut err = String::new();
            let mut e = child.stderr.take().unwrap();
            e.read_to_string(&mut err).unwrap();
            panic!("server did not start: {line}{err}");
        };
        ServerProc { child, out, addr }
    }

    impl ServerProc {
        fn finish(mut self) -> (i32, String, String) {
            let mut rest = String::new();
            self.out.read_to_string(&mut rest).unwrap();
            let mut err = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                e.read_to_string(&mut err).unwrap();
            }
            let status = self.child.wait().unwrap();
            (status.code().unwrap_or(-1), rest, err)
        }
    }

    /// One librnic counter from its `RNIC_STATS=json` dump on stderr: `group` (e.g.
    /// `datagrams`), `name` (e.g. `tx_datagrams`).
    fn librnic_counter(stderr: &str, group: &str, name: &str) -> u64 {
        let dump: serde_json::Value = stderr
            .lines()
            .rev()
            .find(|l| l.starts_with("{\"librnic\""))
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no librnic stats on stderr:\n{stderr}"));
        dump[group][name]
            .as_u64()
            .unwrap_or_else(|| panic!("no {group}.{name} in librnic's stats: {dump}"))
    }

    /// Both ends on the backend: connect, `count` verified iterations of `op`, disconnect by
    /// `by`, with every posted receive flushed; and (on librnic) the data crossed the device,
    /// not the ping socket, whose CM MADs never reached librnic's own QP1.
    /// Returns the server's address; the client's datagrams are in `pcap` if given.
    fn ping_pair(
        base: u8,
        op: &str,
        by: &str,
        count: u64,
        size: u64,
        pcap: Option<&Path>,
    ) -> SocketAddr {
        let t = Target::new(base);
        let common = ["--fast-timers", "--recvs", "4"];
        let s = spawn_server(&t, &common);
        let server = s.addr;
        let mut client = t.ping(&t.client_ip);
        if let Some(p) = pcap {
            client.arg("--pcap").arg(p);
        }
        // More than any port's MTU on librnic (1024): the CM must negotiate the port's.
        client.args(["--mtu", "4096"]);
        let (code, out, err) = run(client
            .args(["--connect", &s.addr.to_string(), "--json"])
            .args(["--op", op, "--disconnect-by", by])
            .args(["--count", &count.to_string(), "--size", &size.to_string()])
            .args(common));
        let (scode, sout, serr) = s.finish();
        assert_eq!(code, 0, "client:\n{out}{err}\nserver:\n{sout}{serr}");
        assert_eq!(scode, 0, "server:\n{sout}{serr}");
        let reports = [(report(&out), &err), (report(&sout), &serr)];
        // Every side checks what it received (with --op write only the server, the last WRITE).
        let verified: u64 = reports
            .iter()
            .map(|(r, _)| r["bytes_verified"].as_u64().unwrap())
            .sum();
        assert!(verified >= size, "{verified} bytes verified");
        for (r, stderr) in reports {
            assert_eq!(r["verdict"], "PASS", "{r:#}");
            assert_eq!(r["iterations"], count, "{r:#}");
            let on = r["device"].as_str().unwrap();
            assert!(on.contains(&format!("RDMA device {}", t.device)), "{on}");
            if t.lib_dir.is_some() {
                assert_eq!(r["path_mtu"], 1024, "{r:#}");
            }
            if r["role"] == "client" && op != "write" {
                // Round trips are timed from the post to the step that sees the reply: never
                // 0, though the device runs beside the step.
                let min = r["latency"]["min_us"].as_f64().unwrap();
                assert!(min > 0.0, "{r:#}");
            }
            let ev = events(&r);
            assert_eq!(
                ev[ev.len() - 2..],
                [("DISCONNECTED".into(), 0), ("TIMEWAIT_EXIT".into(), 0)],
                "{r:#}"
            );
            assert_eq!(r["completions"]["flushed_recvs"], 4, "{r:#}");
            assert_eq!(r["completions"]["recvs_posted_at_err"], 4, "{r:#}");
            assert_eq!(
                r["qp_states"].as_array().unwrap().last().unwrap()["state"],
                "ERR"
            );
            // The ping socket carried the CM's MADs only: REQ/REP/RTU/DREQ/DREP and the few
            // retransmissions, whatever the data.
            let mads =
                r["wire"]["nic_tx"].as_u64().unwrap() + r["wire"]["nic_rx"].as_u64().unwrap();
            assert!(
                (4..=40).contains(&mads),
                "{mads} datagrams on the CM socket: {r:#}"
            );
            if t.lib_dir.is_some() {
                // The device (librnic's RNIC) moved the data on its own RoCEv2 socket, and no
                // MAD went through its QP1: the backend's CM is ours, over the ping socket.
                let tx = librnic_counter(stderr, "datagrams", "tx_datagrams");
                assert!(tx >= count, "librnic sent {tx} datagrams:\n{stderr}");
                assert_eq!(librnic_counter(stderr, "cm", "rx_mads"), 0, "{stderr}");
            }
        }
        server
    }

    /// …and the client's capture of the CM socket decodes in tshark as the CM exchange:
    /// REQ, REP, RTU, then DREQ and DREP, nothing else (the data never crossed it).
    #[test]
    fn ping_all_ops_client_disconnects() {
        let pcap = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hw-client.pcap");
        let server = ping_pair(61, "all", "client", 20, 4096, Some(&pcap));
        if Command::new("tshark").arg("--version").output().is_err() {
            assert!(
                std::env::var_os("RNIC_REQUIRE_TSHARK").is_none(),
                "RNIC_REQUIRE_TSHARK is set but tshark is not on PATH"
            );
            println!("SKIP: tshark not installed: the capture is not decoded");
            return;
        }
        let out = Command::new("tshark")
            .arg("-r")
            .arg(&pcap)
            .args(["-d", &format!("udp.port=={},infiniband", server.port())])
            .args(["-T", "fields", "-e", "infiniband.mad.attributeid"])
            .output()
            .unwrap();
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        // CM attribute IDs: REQ 0x10, REP 0x13, RTU 0x14, DREQ 0x15, DREP 0x16.
        assert_eq!(
            ids,
            ["0x0010", "0x0013", "0x0014", "0x0015", "0x0016"],
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn ping_send_server_disconnects() {
        ping_pair(63, "send", "server", 50, 64, None);
    }

    #[test]
    fn ping_write_large_messages() {
        ping_pair(65, "write", "client", 10, 65536, None);
    }

    /// One end on hardware, the other on the simulated RNIC: the CM could connect, but the data
    /// never meet, so the server refuses the client and says why; the client reports it.
    #[test]
    fn mixed_ends_are_refused_with_the_reason() {
        let t = Target::new(69);
        let mut sim = Command::new(RNIC);
        sim.args([
            "ping",
            "--listen",
            "127.0.0.69:0",
            "--json",
            "--fast-timers",
        ]);
        let mut s = spawn(sim);
        let (code, out, err) =
            run(t
                .ping(&t.client_ip)
                .args(["--connect", &s.addr.to_string(), "--fast-timers"]));
        // (A server serves on after a refusal.)
        s.child.kill().unwrap();
        let (_, _, serr) = s.finish();
        assert_eq!(code, 1, "{out}{err}");
        let why = "give --device on both sides or on neither";
        assert!(out.contains("REJECTED") && out.contains(why), "{out}");
        assert!(
            serr.contains("refused a client") && serr.contains(why),
            "{serr}"
        );
    }

    /// `--gid-index`: the client binds its socket to that GID's address; a server whose
    /// `--listen` address is not that GID's is refused at start (peers would aim their QPs
    /// where nothing listens).
    #[test]
    fn gid_index_and_the_socket_address_agree() {
        let t = Target::new(73);
        if t.lib_dir.is_none() {
            return; // which index holds which address depends on the machine
        }
        let s = spawn_server(&t, &["--fast-timers"]);
        let (code, out, err) = run(t
            .ping(&t.client_ip)
            .args(["--gid-index", "0", "--connect", &s.addr.to_string()])
            .args(["--json", "--fast-timers", "--count", "3"]));
        let (scode, sout, serr) = s.finish();
        assert_eq!((code, scode), (0, 0), "{out}{err}\n{sout}{serr}");
        let r = report(&out);
        assert!(
            r["local"].as_str().unwrap().starts_with(&t.client_ip),
            "{r:#}"
        );
        // A server told to listen on an address its GID is not.
        let (code, out, err) = run(t.ping(&t.server_ip).args([
            "--gid-index",
            "0",
            "--listen",
            "127.0.0.75:0",
            "--once",
        ]));
        assert_eq!(code, 2, "{out}{err}");
        assert!(
            err.contains(&format!("is {}, not 127.0.0.75", t.server_ip)),
            "{err}"
        );
    }

    /// No device by that name: the answer names the devices there are.
    #[test]
    fn unknown_device_names_the_ones_there_are() {
        let t = Target::new(67);
        if t.lib_dir.is_none() {
            return; // the list depends on the machine's devices
        }
        let (code, out, err) = run(t
            .ping_on(&t.client_ip, "nosuch0")
            .args(["--connect", "127.0.0.67:7471"]));
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains("nosuch0") && err.contains("rnic0"), "{err}");
    }

    /// Without librnic on the library path: libibverbs is either missing (no library) or the
    /// system's, which finds no device here; either way a clear message, exit 2, no panic.
    #[test]
    fn no_library_or_no_device_is_a_clear_error() {
        if std::env::var("RNIC_HW_DEVICE").is_ok() {
            return; // this machine has a device
        }
        // (No librnic on the path: LD_LIBRARY_PATH names no directory with a libibverbs.)
        let (code, out, err) = run(Command::new(RNIC)
            .env("LD_LIBRARY_PATH", "/nonexistent")
            .args(["ping", "--connect", "127.0.0.1:7471", "--device", "rxe0"]));
        assert_eq!(code, 2, "{out}{err}");
        assert!(!err.contains("panicked"), "{err}");
        let system_lib = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
            .iter()
            .any(|d| Path::new(d).join("libibverbs.so.1").exists());
        if system_lib {
            assert!(err.contains("no RDMA device"), "{err}");
            assert!(err.contains("rdma link add rxe0 type rxe netdev"), "{err}");
        } else {
            assert!(err.contains("libibverbs.so.1"), "{err}");
        }
    }
}
