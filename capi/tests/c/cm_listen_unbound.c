/*
 * rdma_listen on an id that was never bound.
 *
 * rdma_listen(3) tells users to call rdma_bind_addr first, but Linux does not refuse an
 * unbound id: drivers/infiniband/core/cma.c rdma_listen binds an id still in RDMA_CM_IDLE
 * itself ("For a well behaved ULP state will be RDMA_CM_IDLE"):
 *
 *	struct sockaddr_in any_in = { .sin_family = AF_INET,
 *				      .sin_addr.s_addr = htonl(INADDR_ANY), };
 *	ret = rdma_bind_addr(id, (struct sockaddr *)&any_in);
 *
 * (port 0, so a free port is chosen), then listens. librdmacm's rdma_listen
 * (rdma-core librdmacm/cma.c:1829-1846) passes the kernel's answer through and then queries
 * the bound address into id->route.addr, so the id reports AF_INET and its port.
 */
#include "common.h"

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = NULL;
	int rc;

	alarm(25);
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");

	begin("listen_unbound_binds_any");
	errno = 0;
	rc = rdma_listen(id, 4);
	REQUIRE(rc == 0, "rdma_listen on an unbound id returned %d", rc);
	REQUIRE(id->route.addr.src_addr.sa_family == AF_INET,
		"source family %d after rdma_listen, want AF_INET (%d)",
		id->route.addr.src_addr.sa_family, AF_INET);
	REQUIRE(rdma_get_src_port(id) != 0, "rdma_listen assigned no port");
	ok();

	begin("teardown");
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	ok();
	return 0;
}
