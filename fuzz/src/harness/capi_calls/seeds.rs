//! The seed corpus: call sequences written by hand.

use super::super::input::Output;
use super::records::{Call, ParamSpec, RecvSpec, SendSpec, SgeSpec};

/// The seed corpus (`regenerate_corpus` in `tests/tests/fuzz_corpus.rs` writes it): call
/// sequences written by hand (there is nothing to capture: API calls are not on the wire),
/// each `(name, input)`.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let enc = |calls: &[Call]| {
        let mut o = Output::default();
        for c in calls {
            c.write(&mut o);
        }
        o.bytes
    };
    let sge = |len: u16| SgeSpec {
        mr: 0,
        off: 0,
        len,
        key: 0,
    };
    // Contexts: index 0 is the first opened device, the rdma_cm context is last.
    let verbs_setup = vec![
        Call::OpenDevice { null: 0 },
        Call::AllocPd { ctx: 0 },
        Call::RegMr {
            pd: 0,
            off: 0,
            len: 8192,
            iova: 0,
            v: 0,
            access: 0b111,
        },
        Call::CreateCompChannel { ctx: 0 },
        Call::CreateCq {
            ctx: 0,
            cqe: 3, // 16
            raw: 0,
            ch: 0,
        },
        Call::CreateQp {
            pd: 0,
            null: 0,
            scq: 0,
            rcq: 0,
            qp_type: 0,
            caps: 8 | 8 << 6 | 4 << 12 | 4 << 18 | 1 << 24,
            sig: 1,
        },
    ];
    let to_rts = |qp: u8| {
        (0..3).map(move |_| Call::ModifyQp {
            qp,
            null: 0,
            target: 0,
            mode: 0,
            mask: 0,
            fix: 0xFF,
            v: 0,
        })
    };
    let mut good = verbs_setup.clone();
    good.extend(to_rts(0));
    good.push(Call::PostRecv {
        qp: 0,
        bad: 0,
        wrs: vec![RecvSpec {
            nsge: 1,
            sges: vec![sge(64)],
        }],
    });
    good.push(Call::ReqNotifyCq {
        cq: 0,
        solicited: 0,
    });
    good.push(Call::PostSend {
        qp: 0,
        bad: 0,
        wrs: vec![
            SendSpec {
                opcode: 2, // SEND
                flags: 2,  // SIGNALED
                nsge: 1,
                sges: vec![sge(64)],
                ..SendSpec::default()
            },
            SendSpec {
                opcode: 0, // RDMA WRITE
                flags: 2 | 8,
                nsge: 1,
                sges: vec![sge(32)],
                remote: 0,
                roff: 128,
                ah: 0xFF,
            },
            SendSpec {
                opcode: 6, // FETCH_AND_ADD
                flags: 2,
                nsge: 1,
                sges: vec![sge(8)],
                remote: 0,
                roff: 64,
                ah: 0xFF,
            },
        ],
    });
    good.push(Call::PollCq {
        cq: 0,
        n: 4,
        null: 0,
    });
    good.push(Call::QueryQp { qp: 0, null: 0 });
    good.push(Call::ModifyQp {
        qp: 0,
        null: 0,
        target: 14, // ERR
        mode: 0,
        mask: 0,
        fix: 0xFF,
        v: 0,
    });
    good.push(Call::PollAll {});
    good.push(Call::DestroyQp { qp: 0 });
    good.push(Call::DestroyCq { cq: 0 });
    good.push(Call::DestroyCompChannel { ch: 0 });
    good.push(Call::DeregMr { mr: 0 });
    good.push(Call::DeallocPd { pd: 0 });
    good.push(Call::CloseDevice { ctx: 0 });

    let mut bad_verbs = verbs_setup.clone();
    bad_verbs.extend([
        // Post in RESET, modify with a missing bit, an unknown mask bit, a bad port.
        Call::PostSend {
            qp: 0,
            bad: 0,
            wrs: vec![SendSpec {
                opcode: 2,
                nsge: 1,
                sges: vec![sge(16)],
                ..SendSpec::default()
            }],
        },
        Call::ModifyQp {
            qp: 0,
            null: 0,
            target: 0,
            mode: 1,
            mask: 5,
            fix: 0xFF,
            v: 0,
        },
        Call::ModifyQp {
            qp: 0,
            null: 0,
            target: 0,
            mode: 3,
            mask: 25,
            fix: 0xFF,
            v: 0,
        },
        Call::ModifyQp {
            qp: 0,
            null: 0,
            target: 0,
            mode: 0,
            mask: 0,
            fix: 3,
            v: 2,
        },
        Call::ModifyQp {
            qp: 0xFF,
            null: 0,
            target: 0,
            mode: 0,
            mask: 0,
            fix: 0xFF,
            v: 0,
        },
        // In use: PD, CQ, channel.
        Call::DeallocPd { pd: 0 },
        Call::DestroyCq { cq: 0 },
        Call::DestroyCompChannel { ch: 0 },
        // Bad registrations and CQ sizes, a QP above the limits.
        Call::RegMr {
            pd: 0,
            off: 0,
            len: 100,
            iova: 0,
            v: 0,
            access: 0b10,
        },
        Call::RegMr {
            pd: 0,
            off: 16,
            len: 100,
            iova: 3,
            v: 0x1000,
            access: 1,
        },
        Call::RegMr {
            pd: 0,
            off: 0,
            len: 0,
            iova: 0,
            v: 0,
            access: 1,
        },
        Call::CreateCq {
            ctx: 0,
            cqe: 4,
            raw: 0,
            ch: 0xFF,
        },
        Call::CreateQp {
            pd: 0,
            null: 0,
            scq: 0,
            rcq: 0,
            qp_type: 0,
            caps: 2 | 1 << 6,
            sig: 0,
        },
        Call::CreateQp {
            pd: 0,
            null: 0,
            scq: 0xFF,
            rcq: 0,
            qp_type: 6,
            caps: 8,
            sig: 0,
        },
        Call::Query {
            ctx: 0,
            what: 2,
            port: 2,
            index: 0,
            null: 0,
        },
        Call::PollCq {
            cq: 0,
            n: 0xFF,
            null: 0,
        },
    ]);

    let cm_good = vec![
        Call::CreateId {
            ch: 0,
            ps: 0,
            null: 0,
        },
        Call::ResolveAddr {
            id: 0,
            src: 0xFF,
            dst: 3,
            port: 7,
        },
        Call::GetCmEvent { ch: 0, null: 0 },
        Call::AckCmEvent { ev: 0 },
        Call::ResolveRoute { id: 0 },
        Call::GetCmEvent { ch: 0, null: 0 },
        Call::AckCmEvent { ev: 0 },
        Call::OpenDevice { null: 0 },
        Call::AllocPd { ctx: 1 }, // the rdma_cm context
        Call::RdmaCreateQp {
            id: 0,
            pd: 0x80,
            null: 0,
            scq: 0xFF,
            rcq: 0xFF,
            qp_type: 0,
            caps: 8 | 8 << 6 | 1 << 12 | 1 << 18,
        },
        Call::InitQpAttr {
            id: 0,
            state: 0,
            null: 0,
        },
        Call::Connect {
            id: 0,
            param: ParamSpec {
                null: 0,
                len: 16,
                data_null: 0,
                rr: 1,
                depth: 1,
                retries: 0x77,
            },
        },
        Call::Ports { id: 0 },
        Call::Disconnect { id: 0 },
        Call::RdmaDestroyQp { id: 0 },
        Call::DestroyId { id: 0 },
    ];

    let cm_bad = vec![
        Call::CreateId {
            ch: 1,
            ps: 0,
            null: 0,
        },
        Call::CreateId {
            ch: 2,
            ps: 0,
            null: 0,
        },
        Call::CreateId {
            ch: 0,
            ps: 6,
            null: 0,
        },
        Call::ResolveRoute { id: 0 },
        Call::Connect {
            id: 0,
            param: ParamSpec {
                null: 0xFF,
                ..ParamSpec::default()
            },
        },
        Call::BindAddr {
            id: 0,
            addr: 3,
            port: 0,
        },
        Call::BindAddr {
            id: 0,
            addr: 0,
            port: 3,
        },
        Call::BindAddr {
            id: 0,
            addr: 0,
            port: 4,
        },
        Call::RdmaCreateQp {
            id: 0,
            pd: 0,
            null: 0,
            scq: 0xFF,
            rcq: 0xFF,
            qp_type: 0,
            caps: 4 | 4 << 6 | 1 << 12 | 1 << 18,
        },
        Call::RdmaCreateQp {
            id: 0,
            pd: 0,
            null: 0,
            scq: 0xFF,
            rcq: 0xFF,
            qp_type: 0,
            caps: 4 | 4 << 6 | 1 << 12 | 1 << 18,
        },
        Call::Listen { id: 0, backlog: 0 },
        Call::Accept {
            id: 0,
            param: ParamSpec {
                null: 0xFF,
                ..ParamSpec::default()
            },
        },
        Call::Reject {
            id: 0,
            null: 0,
            len: 200,
        },
        Call::Connect {
            id: 0,
            param: ParamSpec {
                null: 0,
                len: 57,
                data_null: 0,
                rr: 200,
                depth: 1,
                retries: 0,
            },
        },
        Call::InitQpAttr {
            id: 0,
            state: 4,
            null: 0,
        },
        Call::SetOption {
            id: 0,
            opt: 5,
            null: 0,
        },
        Call::GetCmEvent { ch: 1, null: 0 },
        Call::Disconnect { id: 0 },
    ];

    let ud = vec![
        Call::OpenDevice { null: 0 },
        Call::AllocPd { ctx: 0 },
        Call::RegMr {
            pd: 0,
            off: 4096,
            len: 4096,
            iova: 2,
            v: 0x40,
            access: 1,
        },
        Call::CreateCq {
            ctx: 0,
            cqe: 3,
            raw: 0,
            ch: 0xFF,
        },
        Call::CreateQp {
            pd: 0,
            null: 0,
            scq: 0,
            rcq: 0,
            qp_type: 4,
            caps: 4 | 4 << 6 | 11 << 12 | 11 << 18, // 4 WRs, 2 SGEs each way
            sig: 1,
        },
        Call::CreateAh {
            pd: 0,
            null: 0,
            fix: 7,
            v: 0,
        },
        Call::CreateAh {
            pd: 0,
            null: 0,
            fix: 0,
            v: 0,
        },
    ]
    .into_iter()
    .chain(to_rts(0))
    .chain([
        Call::PostSend {
            qp: 0,
            bad: 0,
            wrs: vec![
                SendSpec {
                    opcode: 2,
                    flags: 2,
                    nsge: 1,
                    sges: vec![sge(100)],
                    ah: 0,
                    ..SendSpec::default()
                },
                SendSpec {
                    opcode: 0, // WRITE on UD
                    flags: 2,
                    nsge: 1,
                    sges: vec![sge(100)],
                    ah: 0,
                    ..SendSpec::default()
                },
            ],
        },
        Call::PollAll {},
        Call::GetAsyncEvent { ctx: 0, null: 0 },
        Call::DeallocPd { pd: 0 },
    ])
    .collect::<Vec<_>>();

    vec![
        ("verbs-rc-good", enc(&good)),
        ("verbs-bad-arguments", enc(&bad_verbs)),
        ("cm-good", enc(&cm_good)),
        ("cm-bad-states", enc(&cm_bad)),
        ("verbs-ud", enc(&ud)),
    ]
}
