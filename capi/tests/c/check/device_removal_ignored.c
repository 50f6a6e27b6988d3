/* Breaks device-removal-ignored (run with --remove-device-after): the id that got
 * DEVICE_REMOVAL is not destroyed. */
#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id = resolved_id(ch, &ev);
	CHECK(rdma_ack_cm_event(ev) == 0);
	ev = expect_event(ch, RDMA_CM_EVENT_DEVICE_REMOVAL);
	CHECK(rdma_ack_cm_event(ev) == 0);
	(void)id; /* rdma_destroy_id(id) and rdma_destroy_event_channel(ch) belong here */
	return 0;
}
