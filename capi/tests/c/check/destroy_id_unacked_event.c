/* Breaks destroy-id-unacked-event: rdma_destroy_id on the id whose ADDR_RESOLVED this thread
 * holds unacked. librdmacm waits for the ack: the program hangs (until killed). */
#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id = resolved_id(ch, &ev);
	rdma_destroy_id(id); /* never returns */
	rdma_ack_cm_event(ev);
	rdma_destroy_event_channel(ch);
	return 0;
}
