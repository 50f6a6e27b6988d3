/* Breaks event-not-acked: ADDR_RESOLVED is fetched and never acked (so its id cannot be
 * destroyed either). */
#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_event *ev;
	resolved_id(ch, &ev);
	return 0; /* rdma_ack_cm_event(ev), then the id and channel, belong here */
}
