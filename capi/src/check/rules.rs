//! The rules the checker applies to a program: each a name (kebab case, as reported), what it
//! forbids and its source. docs/check.md has a minimal C program breaking each.

/// A rule of the checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// `rdma_destroy_id` on an id with an event that the calling thread fetched and has not
    /// acked: librdmacm waits for the ack, which that thread can no longer give (a hang).
    DestroyIdUnackedEvent,
    /// `rdma_destroy_id` while the QP made on the id still exists.
    DestroyIdWithQp,
    /// `rdma_destroy_event_channel` while ids still report to the channel.
    DestroyChannelWithIds,
    /// `ibv_dereg_mr` while a posted, uncompleted WR names the region.
    DeregMrUnderPostedWr,
    /// A CQ lost completions: more completions were due than it has entries.
    CqOverrun,
    /// RDMA_CM_EVENT_DEVICE_REMOVAL fetched, and the id still not destroyed at exit.
    DeviceRemovalIgnored,
    /// An event returned by `rdma_get_cm_event` never acked.
    EventNotAcked,
    /// At exit, an event of a live id arrived on its channel and was never fetched (but a
    /// TIMEWAIT_EXIT, or the ESTABLISHED of a passive id: neither needs fetching).
    EventNeverFetched,
    /// Objects the program made and never destroyed.
    Leak,
}

impl Rule {
    /// Every rule, in report order.
    pub const ALL: [Rule; 9] = [
        Rule::DestroyIdUnackedEvent,
        Rule::DestroyIdWithQp,
        Rule::DestroyChannelWithIds,
        Rule::DeregMrUnderPostedWr,
        Rule::CqOverrun,
        Rule::DeviceRemovalIgnored,
        Rule::EventNotAcked,
        Rule::EventNeverFetched,
        Rule::Leak,
    ];

    /// The name reported (`"rule"` in the JSON report).
    pub fn name(self) -> &'static str {
        match self {
            Rule::DestroyIdUnackedEvent => "destroy-id-unacked-event",
            Rule::DestroyIdWithQp => "destroy-id-with-qp",
            Rule::DestroyChannelWithIds => "destroy-channel-with-ids",
            Rule::DeregMrUnderPostedWr => "dereg-mr-under-posted-wr",
            Rule::CqOverrun => "cq-overrun",
            Rule::DeviceRemovalIgnored => "device-removal-ignored",
            Rule::EventNotAcked => "event-not-acked",
            Rule::EventNeverFetched => "event-never-fetched",
            Rule::Leak => "leak",
        }
    }

    /// Where the rule comes from (`"source"` in the JSON report).
    pub fn source(self) -> &'static str {
        match self {
            Rule::DestroyIdUnackedEvent => {
                "rdma_destroy_id(3): \"ack all related events\"; librdmacm rdma_destroy_id waits \
                 until events_completed reaches the kernel's events_reported (cma.c)"
            }
            Rule::DestroyIdWithQp => {
                "rdma_destroy_id(3): \"Users must free any associated QP with the rdma_cm_id \
                 before calling this routine\""
            }
            Rule::DestroyChannelWithIds => {
                "rdma_destroy_event_channel(3): \"All rdma_cm_id's associated with the event \
                 channel must be destroyed\" before it"
            }
            Rule::DeregMrUnderPostedWr => {
                "ibv_reg_mr(3)/ibv_post_send(3): the buffers of a WR must stay registered until \
                 its completion is polled (a later access fails with IBV_WC_LOC_PROT_ERR)"
            }
            Rule::CqOverrun => {
                "ibv_create_cq(3) cqe, IBTA C11-37: a CQ with more completions due than entries \
                 overruns; IBV_EVENT_CQ_ERR, completions lost, QPs to error"
            }
            Rule::DeviceRemovalIgnored => {
                "rdma_get_cm_event(3) RDMA_CM_EVENT_DEVICE_REMOVAL: \"the user must destroy the \
                 related rdma_cm_id\""
            }
            Rule::EventNotAcked => {
                "rdma_ack_cm_event(3): \"All events which are allocated by rdma_get_cm_event \
                 must be released\"; rdma_destroy_id waits for them"
            }
            Rule::EventNeverFetched => {
                "rdma_get_cm_event(3): a program reports its ids' events by fetching them; \
                 rdma_disconnect(3): DISCONNECTED asks the program to disconnect and tear down"
            }
            Rule::Leak => {
                "rdma_destroy_id(3), ibv_destroy_qp(3), ibv_destroy_cq(3), ibv_dereg_mr(3), \
                 ibv_dealloc_pd(3), rdma_destroy_event_channel(3): what a program makes it \
                 destroys (at exit the kernel cleans up, hiding the bug until the code runs \
                 in a long-lived process)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kebab_case_and_distinct() {
        let mut names: Vec<_> = Rule::ALL.iter().map(|r| r.name()).collect();
        assert!(names
            .iter()
            .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '-')));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Rule::ALL.len());
    }
}
