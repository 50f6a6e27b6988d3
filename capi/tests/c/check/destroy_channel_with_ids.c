/* Breaks destroy-channel-with-ids: the channel goes before its id. */
#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	CHECK(ch);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	rdma_destroy_event_channel(ch); /* the id first */
	CHECK(rdma_destroy_id(id) == 0);
	return 0;
}
