//! The checker's counters on the data path: entry-point calls and completions polled by
//! status, as relaxed atomics (no lock on `ibv_post_send`/`ibv_poll_cq`), and the names the
//! report gives them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// `enum ibv_wc_status` names, by value (verbs.h).
const WC_STATUS: [&str; 24] = [
    "IBV_WC_SUCCESS",
    "IBV_WC_LOC_LEN_ERR",
    "IBV_WC_LOC_QP_OP_ERR",
    "IBV_WC_LOC_EEC_OP_ERR",
    "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR",
    "IBV_WC_MW_BIND_ERR",
    "IBV_WC_BAD_RESP_ERR",
    "IBV_WC_LOC_ACCESS_ERR",
    "IBV_WC_REM_INV_REQ_ERR",
    "IBV_WC_REM_ACCESS_ERR",
    "IBV_WC_REM_OP_ERR",
    "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR",
    "IBV_WC_LOC_RDD_VIOL_ERR",
    "IBV_WC_REM_INV_RD_REQ_ERR",
    "IBV_WC_REM_ABORT_ERR",
    "IBV_WC_INV_EECN_ERR",
    "IBV_WC_INV_EEC_STATE_ERR",
    "IBV_WC_FATAL_ERR",
    "IBV_WC_RESP_TIMEOUT_ERR",
    "IBV_WC_GENERAL_ERR",
    "IBV_WC_TM_ERR",
    "IBV_WC_TM_RNDV_INCOMPLETE",
];

/// `enum rdma_cm_event_type` names, by value (rdma_cma.h).
const CM_EVENT: [&str; 16] = [
    "RDMA_CM_EVENT_ADDR_RESOLVED",
    "RDMA_CM_EVENT_ADDR_ERROR",
    "RDMA_CM_EVENT_ROUTE_RESOLVED",
    "RDMA_CM_EVENT_ROUTE_ERROR",
    "RDMA_CM_EVENT_CONNECT_REQUEST",
    "RDMA_CM_EVENT_CONNECT_RESPONSE",
    "RDMA_CM_EVENT_CONNECT_ERROR",
    "RDMA_CM_EVENT_UNREACHABLE",
    "RDMA_CM_EVENT_REJECTED",
    "RDMA_CM_EVENT_ESTABLISHED",
    "RDMA_CM_EVENT_DISCONNECTED",
    "RDMA_CM_EVENT_DEVICE_REMOVAL",
    "RDMA_CM_EVENT_MULTICAST_JOIN",
    "RDMA_CM_EVENT_MULTICAST_ERROR",
    "RDMA_CM_EVENT_ADDR_CHANGE",
    "RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

/// The name of CM event type `t` (`"RDMA_CM_EVENT_UNKNOWN"` past the list).
pub fn cm_event_name(t: u32) -> &'static str {
    usize::try_from(t)
        .ok()
        .and_then(|i| CM_EVENT.get(i))
        .copied()
        .unwrap_or("RDMA_CM_EVENT_UNKNOWN")
}

static CALLS: AtomicU64 = AtomicU64::new(0);
static WCS: [AtomicU64; WC_STATUS.len() + 1] = [const { AtomicU64::new(0) }; WC_STATUS.len() + 1];

/// One more entry-point call.
pub fn call() {
    CALLS.fetch_add(1, Ordering::Relaxed);
}

/// One more completion polled with status `status` (the last slot counts unknown ones).
pub fn wc(status: u32) {
    let i = usize::try_from(status)
        .unwrap_or(usize::MAX)
        .min(WC_STATUS.len());
    WCS[i].fetch_add(1, Ordering::Relaxed);
}

/// The counts of the report: `calls` and `wc.<status>` (non-zero ones).
pub fn snapshot() -> BTreeMap<String, u64> {
    let mut m = BTreeMap::from([("calls".to_string(), CALLS.load(Ordering::Relaxed))]);
    for (i, c) in WCS.iter().enumerate() {
        let n = c.load(Ordering::Relaxed);
        if n > 0 {
            let name = WC_STATUS.get(i).copied().unwrap_or("IBV_WC_UNKNOWN");
            m.insert(format!("wc.{name}"), n);
        }
    }
    m
}
