//! The programs' own formats: perftest's command lines and results tables, qperf's result
//! lines; `run_perftest` runs one perftest pair through the harness and parses both sides.

use super::*;

/// One perftest benchmark (`ib_send_bw`, `ib_write_lat`, …), RC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Perftest {
    /// The program.
    pub tool: &'static str,
    /// `-R`: connect the QPs through rdma_cm instead of the out-of-band TCP exchange.
    pub rdma_cm: bool,
    /// `-n`.
    pub iters: u32,
    /// `-s`; `None`: the tool's default ([`perftest_default_size`]).
    pub size: Option<u64>,
    /// More arguments, given to both sides.
    pub extra: Vec<String>,
    /// More options of `rnic exec`, both sides.
    pub exec_args: Vec<String>,
}

/// perftest's default message size (`--help`): 65536 bytes for the bandwidth tests, 2 for the
/// latency tests.
pub fn perftest_default_size(tool: &str) -> u64 {
    if tool.ends_with("_lat") {
        2
    } else {
        65536
    }
}

impl Perftest {
    /// Whether the server must print a results table too: the server of a SEND bandwidth test
    /// counts what it received; both sides of a latency test measure. (The passive side of a
    /// WRITE or READ bandwidth test only repeats the client's figures, in perftest versions
    /// that print them at all.)
    pub fn server_prints_table(&self) -> bool {
        self.tool.ends_with("_lat") || self.tool == "ib_send_bw"
    }

    /// The program and its arguments: the server's without `server`, the client's with the
    /// server's address.
    pub fn argv(&self, server: Option<&str>, port: u16) -> Vec<String> {
        let mut a: Vec<String> = vec![
            self.tool.into(),
            "-d".into(),
            DEVICE.into(),
            "-p".into(),
            port.to_string(),
            "-n".into(),
            self.iters.to_string(),
            // No warning about the CPU frequency governor (not at its maximum on a VM): the
            // figures do not change, the output gets shorter.
            "-F".into(),
        ];
        if let Some(s) = self.size {
            a.extend(["-s".into(), s.to_string()]);
        }
        if self.rdma_cm {
            a.push("-R".into());
        }
        a.extend(self.extra.iter().cloned());
        a.extend(server.map(str::to_string));
        a
    }
}

/// perftest's results table: the header line (` #bytes     #iterations    BW peak[MB/sec] …`)
/// and the data lines under it, up to the closing `-----` line.
#[derive(Debug, Clone, PartialEq)]
pub struct PerftestTable {
    /// The column names, e.g. `#bytes`, `#iterations`, `BW average[MB/sec]`, `t_avg[usec]`.
    pub header: Vec<String>,
    /// The data lines, one number per column.
    pub rows: Vec<Vec<f64>>,
}

impl PerftestTable {
    /// The first table of `stdout`, if there is a header line; its data lines are the lines
    /// after it whose fields are all numbers.
    pub fn parse(stdout: &str) -> Option<PerftestTable> {
        let mut lines = stdout.lines();
        let header = lines
            .by_ref()
            .find(|l| l.trim_start().starts_with("#bytes"))?;
        let header = Self::columns(header);
        let mut rows = Vec::new();
        for l in lines {
            let t = l.trim();
            if t.starts_with("---") {
                break;
            }
            let fields: Option<Vec<f64>> = t.split_whitespace().map(|f| f.parse().ok()).collect();
            if let Some(f) = fields.filter(|f| !f.is_empty()) {
                rows.push(f);
            }
        }
        Some(PerftestTable { header, rows })
    }

    /// The column names of a header line: words joined until one ends a name (`#…` names are
    /// one word; the others end with their unit, `…]`), so `BW peak[MB/sec]` and
    /// `99% percentile[usec]` are one column each.
    fn columns(header: &str) -> Vec<String> {
        let mut cols = Vec::new();
        let mut cur: Vec<&str> = Vec::new();
        for w in header.split_whitespace() {
            cur.push(w);
            if w.starts_with('#') || w.ends_with(']') {
                cols.push(cur.join(" "));
                cur.clear();
            }
        }
        if !cur.is_empty() {
            cols.push(cur.join(" "));
        }
        cols
    }

    /// The index of the first column whose name starts with `prefix` (`"BW average"`,
    /// `"t_avg"`).
    pub fn column(&self, prefix: &str) -> Option<usize> {
        self.header.iter().position(|h| h.starts_with(prefix))
    }

    /// The value in data line `row`, column `prefix` ([`PerftestTable::column`]).
    pub fn value(&self, row: usize, prefix: &str) -> Option<f64> {
        self.rows.get(row)?.get(self.column(prefix)?).copied()
    }

    /// The first data line for message size `size`.
    pub fn row_for_size(&self, size: u64) -> Option<usize> {
        #[allow(clippy::cast_precision_loss)] // sizes are far below 2^53
        let size = size as f64;
        self.rows.iter().position(|r| r.first() == Some(&size))
    }
}

/// What a perftest run measured.
#[derive(Debug, Clone)]
pub struct PerftestResult {
    /// The client's table.
    pub client: PerftestTable,
    /// The server's table, when it prints one (always where [`Perftest::server_prints_table`]).
    pub server: Option<PerftestTable>,
    /// The message size of the data lines.
    pub size: u64,
    /// The run (commands, outputs).
    pub outcome: PairOutcome,
}

impl PerftestResult {
    /// The client's value of column `prefix` on the line of [`PerftestResult::size`], e.g.
    /// `"BW average"` (MB/sec) or `"t_avg"` (µs).
    pub fn client_value(&self, prefix: &str) -> Option<f64> {
        self.client
            .value(self.client.row_for_size(self.size)?, prefix)
    }
}

/// Runs `p` between a server on `net.server_ip()` and a client on `net.client_ip()`, and checks
/// that both exit 0 and that the client (and the server, where it prints one) printed a results
/// table with a data line for the message size whose fields are numbers, one per column, with a
/// positive bandwidth (BW tests) or consistent positive latencies (latency tests). `None`: the
/// test is skipped ([`tools_available`]).
pub fn run_perftest(name: &str, net: Net, p: &Perftest) -> Option<PerftestResult> {
    if !tools_available(name, &[p.tool]) {
        return None;
    }
    let with_exec = |mut prog: Program| {
        prog.exec_args = p.exec_args.clone();
        prog
    };
    let server_ip = net.server_ip();
    let spec = PairSpec {
        name: name.to_string(),
        server: with_exec(Program::new(&server_ip, &p.argv(None, net.port))),
        client: with_exec(Program::new(
            &net.client_ip(),
            &p.argv(Some(&server_ip), net.port),
        )),
        ready: if p.rdma_cm {
            Ready::RdmaListen
        } else {
            Ready::TcpListen(net.port)
        },
        server_stays: false,
    };
    let mut outcome = run_pair(&spec);
    // Two ways perftest 4.5 fails on its own, which are retried (at most twice, reported):
    // * with `-R` it connects its data QP as soon as its control connection is up, while the
    //   server may still be creating the data listener; losing that race is a REJ "invalid
    //   service ID" (8), on real hardware too, and this version's own retry path reads freed
    //   memory (perftest_communication.c `rdma_cm_client_connection` after
    //   `rdma_cm_destroy_cma`). The library makes it rare (RNIC_RESOLVE_US);
    // * on a loaded machine its CPU clock calibration fails ("Correlation coefficient r^2 …
    //   < 0.9", get_clock.c), and it then prints every rate as 0.
    for _ in 0..2 {
        let lost_race = p.rdma_cm
            && outcome
                .client
                .stderr
                .contains("RDMA_CM_EVENT_REJECTED; error: 8");
        let no_clock = [&outcome.client.stderr, &outcome.server.stderr]
            .iter()
            .any(|e| e.contains("Correlation coefficient r^2"));
        if !lost_race && !no_clock {
            break;
        }
        println!(
            "{name}: perftest failed on its own ({}); retrying",
            if lost_race {
                "lost its -R listen race: REJECTED 8 on the data connection"
            } else {
                "could not calibrate its CPU clock on this loaded machine"
            }
        );
        outcome = run_pair(&spec);
    }
    outcome.assert_success();
    let size = p.size.unwrap_or_else(|| perftest_default_size(p.tool));
    let check_table = |side: &str, stdout: &str| -> PerftestTable {
        let Some(t) = PerftestTable::parse(stdout) else {
            outcome.fail(&format!(
                "no results table (`#bytes` header) on the {side}'s stdout"
            ))
        };
        let Some(row) = t.row_for_size(size) else {
            outcome.fail(&format!(
                "the {side}'s table has no data line for {size} bytes: {t:?}"
            ))
        };
        outcome.check(t.rows[row].len() == t.header.len(), || {
            format!("the {side}'s data line does not have one number per column: {t:?}")
        });
        outcome.check(t.value(row, "#iterations").is_some_and(|n| n > 0.0), || {
            format!("the {side}'s #iterations is not positive: {t:?}")
        });
        if p.tool.ends_with("_bw") {
            for col in ["BW average", "MsgRate"] {
                outcome.check(t.value(row, col).is_some_and(|v| v > 0.0), || {
                    format!("the {side}'s `{col}` is missing or not positive: {t:?}")
                });
            }
        } else {
            let v = |c| t.value(row, c);
            let (min, typ, max, avg) = (v("t_min"), v("t_typical"), v("t_max"), v("t_avg"));
            outcome.check(avg.is_some_and(|a| a > 0.0), || {
                format!("the {side}'s t_avg is missing or not positive: {t:?}")
            });
            // t_max excludes the top outliers in some perftest versions: it bounds the median,
            // not the mean.
            outcome.check(
                matches!((min, typ, max), (Some(a), Some(b), Some(c)) if a <= b && b <= c),
                || format!("the {side}'s t_min <= t_typical <= t_max does not hold: {t:?}"),
            );
        }
        t
    };
    let client = check_table("client", &outcome.client.stdout);
    // The server's table is checked where it prints one; it must where it measures itself.
    let server = (p.server_prints_table()
        || PerftestTable::parse(&outcome.server.stdout).is_some())
    .then(|| check_table("server", &outcome.server.stdout));
    outcome.show();
    Some(PerftestResult {
        client,
        server,
        size,
        outcome,
    })
}

// ---------------------------------------------------------------------------------------------
// qperf

/// One result line of qperf (`    bw  =  1.23 GB/sec` under `rc_bw:`).
#[derive(Debug, Clone, PartialEq)]
pub struct QperfResult {
    /// The test (`rc_bw`).
    pub test: String,
    /// The quantity (`bw`, `latency`, `msg_rate`).
    pub name: String,
    /// The number.
    pub value: f64,
    /// Its unit as printed (`GB/sec`, `us`).
    pub unit: String,
}

impl QperfResult {
    /// The value in base units (bytes/sec, seconds, messages/sec), for the units qperf prints
    /// (decimal prefixes); `None` for another unit.
    pub fn base_value(&self) -> Option<f64> {
        let factor = match self.unit.as_str() {
            "bytes/sec" | "bits/sec" | "sec" | "/sec" => 1.0,
            "KB/sec" | "Kb/sec" | "K/sec" => 1e3,
            "MB/sec" | "Mb/sec" | "M/sec" => 1e6,
            "GB/sec" | "Gb/sec" | "G/sec" => 1e9,
            "TB/sec" | "Tb/sec" => 1e12,
            "ms" => 1e-3,
            "us" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        Some(self.value * factor)
    }

    /// Parses qperf's output: a `test:` line, then indented `name = value unit` lines.
    pub fn parse(stdout: &str) -> Vec<QperfResult> {
        let mut test = String::new();
        let mut out = Vec::new();
        for l in stdout.lines() {
            if !l.starts_with(char::is_whitespace) {
                if let Some(t) = l.trim().strip_suffix(':') {
                    test = t.to_string();
                }
                continue;
            }
            let Some((name, rest)) = l.split_once('=') else {
                continue;
            };
            let mut words = rest.split_whitespace();
            let Some(value) = words.next().and_then(|v| v.parse::<f64>().ok()) else {
                continue;
            };
            out.push(QperfResult {
                test: test.clone(),
                name: name.trim().to_string(),
                value,
                unit: words.collect::<Vec<_>>().join(" "),
            });
        }
        out
    }
}

/// The lines of `stdout` that start with `prefix`.
pub fn lines_starting_with<'a>(stdout: &'a str, prefix: &str) -> Vec<&'a str> {
    stdout.lines().filter(|l| l.starts_with(prefix)).collect()
}

#[cfg(test)]
mod parser_tests {
    use super::*;

    #[test]
    fn a_bandwidth_table_parses() {
        let out = "\
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      200              120.51             118.20\t\t   0.001891
---------------------------------------------------------------------------------------
";
        let t = PerftestTable::parse(out).unwrap_or_else(|| panic!("no table"));
        assert_eq!(t.header.len(), 5, "{t:?}");
        assert_eq!(t.header[2], "BW peak[MB/sec]");
        assert_eq!(t.row_for_size(65536), Some(0));
        assert_eq!(t.value(0, "BW average"), Some(118.20));
        assert_eq!(t.value(0, "#iterations"), Some(200.0));
    }

    #[test]
    fn a_latency_table_parses() {
        let out = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n 2       300          10.50          80.20        12.00     \t       13.10        \t2.50   \t\t40.00   \t\t80.20   \n---------------------------------------------------------------------------------------\n";
        let t = PerftestTable::parse(out).unwrap_or_else(|| panic!("no table"));
        assert_eq!(t.header.len(), 9, "{t:?}");
        assert_eq!(t.header[7], "99% percentile[usec]");
        assert_eq!(t.rows[0].len(), 9);
        assert_eq!(t.value(0, "t_avg"), Some(13.10));
    }

    #[test]
    fn qperf_results_parse() {
        let out = "rc_bw:\n    bw  =  1.52 GB/sec\nrc_lat:\n    latency  =  25.3 us\n";
        let r = QperfResult::parse(out);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].test.as_str(), r[0].name.as_str()), ("rc_bw", "bw"));
        assert_eq!(r[0].base_value(), Some(1.52e9));
        assert_eq!((r[1].test.as_str(), r[1].unit.as_str()), ("rc_lat", "us"));
    }
}
