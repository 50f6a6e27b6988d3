/* Breaks no rule: a server accepts and never reads its ESTABLISHED, as perftest's -R server
 * does with its control connection (rdma_accept already moved the QP to RTS). Server and
 * client in one process, on channels of their own. Then, without an argument, both sides tear
 * down: the server destroys its id with the ESTABLISHED still unread (rdma_destroy_id
 * discards the id's pending events: the kernel's ucma_cleanup_ctx_events). With `leave`,
 * both exit with their ids and channels alive, as perftest does: a leak, and only that. */
#include <poll.h>
#include "check.h"

int main(int argc, char **argv)
{
	int leave = argc > 1 && strcmp(argv[1], "leave") == 0;
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *listener, *server, *client;
	struct rdma_cm_event *ev;
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(7472) };
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_conn_param param = { .retry_count = 7, .rnr_retry_count = 7 };
	CHECK(sch && cch && inet_pton(AF_INET, getenv("RNIC_ADDR"), &addr.sin_addr) == 1);

	CHECK(rdma_create_id(sch, &listener, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&addr) == 0);
	CHECK(rdma_listen(listener, 1) == 0);

	CHECK(rdma_create_id(cch, &client, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(client, NULL, (struct sockaddr *)&addr, 1000) == 0);
	CHECK(rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED)) == 0);
	CHECK(rdma_resolve_route(client, 1000) == 0);
	CHECK(rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED)) == 0);
	CHECK(rdma_create_qp(client, NULL, &qa) == 0);
	CHECK(rdma_connect(client, &param) == 0);

	/* perftest's rdma_server_connect: accept, ack the request, destroy the listener. */
	ev = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	server = ev->id;
	CHECK(rdma_create_qp(server, NULL, &qa) == 0);
	CHECK(rdma_accept(server, &param) == 0);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_destroy_id(listener) == 0);

	CHECK(rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_ESTABLISHED)) == 0);
	/* The server's ESTABLISHED is queued: its channel is readable. It is never fetched. */
	struct pollfd p = { .fd = sch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1);

	rdma_destroy_qp(server);
	rdma_destroy_qp(client);
	if (leave)
		return 0; /* ids and channels left to the exit, as perftest's control connection */
	CHECK(rdma_disconnect(server) == 0);
	CHECK(rdma_destroy_id(server) == 0);
	CHECK(rdma_ack_cm_event(expect_event(cch, RDMA_CM_EVENT_DISCONNECTED)) == 0);
	CHECK(rdma_destroy_id(client) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	return 0;
}
