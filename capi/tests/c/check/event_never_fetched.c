/* Breaks event-never-fetched: ADDR_RESOLVED arrives (the channel's fd is readable) and the
 * program exits without fetching it, the id alive. The usual real case is a DISCONNECTED that
 * nobody reads: the connection is never torn down. */
#include <poll.h>
#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7471) };
	CHECK(ch && inet_pton(AF_INET, getenv("RNIC_ADDR"), &dst.sin_addr) == 1);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000) == 0);
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1);
	return 0; /* rdma_get_cm_event, ack, rdma_destroy_id, rdma_destroy_event_channel */
}
