/*
 * Disconnecting an RC connection through rdma_cm, between two processes: the program forks
 * before its first RDMA call; the parent is the server on RNIC_ADDR, the child the client on
 * the same address with last octet 2. Two pipes order the steps.
 *
 * What Linux + librdmacm do, step by step:
 * - the client's rdma_disconnect moves its QP to ERR before sending the DREQ (rdma-core
 *   librdmacm/cma.c:2047 rdma_disconnect calls ucma_shutdown, which for IB/RoCE is
 *   `return ucma_modify_qp_err(id);` at cma.c:2033, before the DISCONNECT command);
 * - the server gets RDMA_CM_EVENT_DISCONNECTED, status 0, when the DREQ arrives (kernel
 *   cma.c cma_ib_handler: `case IB_CM_DREQ_RECEIVED: case IB_CM_DREP_RECEIVED: ...
 *   event.event = RDMA_CM_EVENT_DISCONNECTED;`) and its QP is untouched: neither the kernel
 *   nor librdmacm's rdma_get_cm_event (cma.c:2729-2735, `case RDMA_CM_EVENT_DISCONNECTED:`
 *   only copies the connection parameters) modifies the QP, so it is still RTS;
 * - the server's rdma_disconnect moves its QP to ERR, which flushes its posted receives, and
 *   sends the DREP; the client gets DISCONNECTED (status 0) when the DREP arrives;
 * - both ids then sit in the IB CM's TimeWait; when it ends the CM reports IB_CM_TIMEWAIT_EXIT,
 *   which cma_ib_handler turns into `event.event = RDMA_CM_EVENT_TIMEWAIT_EXIT;` (its gate
 *   lets TIMEWAIT_EXIT through exactly when the id is in RDMA_CM_DISCONNECT); ucma's
 *   ucma_event_handler queues every event for user space (only CONNECT_REQUEST and events of
 *   not-yet-claimed ids are special), and librdmacm's rdma_get_cm_event has no case for it, so
 *   its `default:` branch (cma.c:2775-2783) returns it: user space does get
 *   RDMA_CM_EVENT_TIMEWAIT_EXIT, status 0, on both sides of an RC connection, provided the
 *   id is not destroyed first.
 */

#include "common.h"

#define PORT 7471
#define N_RECV 4
#define EVENT_TIMEOUT_MS 10000

static int ready_pipe[2];  /* server -> client: listening */
static int posted_pipe[2]; /* server -> client: receives posted, disconnect now */

static void notify(int fd)
{
	char c = 1;

	REQUIRE(write(fd, &c, 1) == 1, "write to pipe");
}

static void await(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	REQUIRE(poll(&p, 1, 15000) == 1, "the other process did not signal within 15 s");
	REQUIRE(read(fd, &c, 1) == 1, "the other process closed the pipe");
}

static void ack(struct rdma_cm_event *ev)
{
	REQUIRE(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event");
}

/* A PD, one CQ and an RC QP on `id` (its QP is moved to INIT by rdma_create_qp). */
static struct ibv_cq *create_qp(struct rdma_cm_id *id, struct ibv_pd **pd)
{
	struct ibv_qp_init_attr ia;
	struct ibv_cq *cq;

	*pd = ibv_alloc_pd(id->verbs);
	REQUIRE(*pd != NULL, "ibv_alloc_pd");
	cq = ibv_create_cq(id->verbs, 32, NULL, NULL, 0);
	REQUIRE(cq != NULL, "ibv_create_cq");
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 8;
	ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	REQUIRE(rdma_create_qp(id, *pd, &ia) == 0, "rdma_create_qp");
	return cq;
}

static void conn_param(struct rdma_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
}

static int server(void)
{
	static char buf[N_RECV][64];
	const char *ip = getenv("RNIC_ADDR");
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id, *id;
	struct rdma_cm_event *ev;
	struct rdma_conn_param param;
	struct sockaddr_in sin;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int i;

	begin("listen");
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");
	REQUIRE(rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	sin = sockaddr_of(ip, PORT);
	REQUIRE(rdma_bind_addr(listen_id, (struct sockaddr *)&sin) == 0, "rdma_bind_addr");
	REQUIRE(rdma_listen(listen_id, 4) == 0, "rdma_listen");
	notify(ready_pipe[1]);
	ok();

	begin("accept");
	ev = next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, EVENT_TIMEOUT_MS);
	id = ev->id;
	cq = create_qp(id, &pd);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	conn_param(&param);
	REQUIRE(rdma_accept(id, &param) == 0, "rdma_accept");
	ack(ev);
	ack(next_event(ch, RDMA_CM_EVENT_ESTABLISHED, 0, EVENT_TIMEOUT_MS));
	REQUIRE(qp_state(id->qp) == IBV_QPS_RTS, "the QP is not RTS after ESTABLISHED");
	ok();

	begin("recvs_posted");
	for (i = 0; i < N_RECV; i++)
		post_recv(id->qp, i + 1, mr, buf[i], sizeof(buf[i]));
	notify(posted_pipe[1]);
	ok();

	begin("disconnected_event");
	ev = next_event(ch, RDMA_CM_EVENT_DISCONNECTED, 0, EVENT_TIMEOUT_MS);
	REQUIRE(ev->id == id, "DISCONNECTED for id %p, want %p", (void *)ev->id, (void *)id);
	ack(ev);
	ok();

	begin("qp_still_rts_after_disconnected");
	REQUIRE(qp_state(id->qp) == IBV_QPS_RTS, "ibv_query_qp state %d, want RTS",
		qp_state(id->qp));
	REQUIRE(ibv_poll_cq(cq, 1, &wc) == 0, "a completion (wr_id %llu, %s) before the "
		"server's rdma_disconnect", (unsigned long long)wc.wr_id,
		ibv_wc_status_str(wc.status));
	ok();

	begin("disconnect_flushes_recvs");
	REQUIRE(rdma_disconnect(id) == 0, "rdma_disconnect");
	REQUIRE(qp_state(id->qp) == IBV_QPS_ERR, "ibv_query_qp state %d, want ERR",
		qp_state(id->qp));
	for (i = 0; i < N_RECV; i++)
		expect_wc(cq, i + 1, IBV_WC_WR_FLUSH_ERR);
	usleep(50 * 1000);
	REQUIRE(ibv_poll_cq(cq, 1, &wc) == 0, "an extra completion wr_id %llu",
		(unsigned long long)wc.wr_id);
	ok();

	begin("timewait_exit");
	ev = next_event(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, EVENT_TIMEOUT_MS);
	REQUIRE(ev->id == id, "TIMEWAIT_EXIT for id %p, want %p", (void *)ev->id, (void *)id);
	ack(ev);
	ok();

	begin("teardown");
	rdma_destroy_qp(id);
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	REQUIRE(rdma_destroy_id(listen_id) == 0, "rdma_destroy_id(listener)");
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	rdma_destroy_event_channel(ch);
	ok();
	return 0;
}

static int client(void)
{
	char server_ip[64];
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct rdma_conn_param param;
	struct sockaddr_in dst;
	struct ibv_pd *pd;
	struct ibv_cq *cq;

	begin("connect");
	addr_with_last_octet(server_ip, sizeof(server_ip), 1);
	await(ready_pipe[0]);
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	dst = sockaddr_of(server_ip, PORT);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0,
		"rdma_resolve_addr");
	ack(next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, EVENT_TIMEOUT_MS));
	REQUIRE(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
	ack(next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, EVENT_TIMEOUT_MS));
	cq = create_qp(id, &pd);
	conn_param(&param);
	REQUIRE(rdma_connect(id, &param) == 0, "rdma_connect");
	ack(next_event(ch, RDMA_CM_EVENT_ESTABLISHED, 0, EVENT_TIMEOUT_MS));
	ok();

	begin("disconnect_moves_qp_to_err");
	await(posted_pipe[0]);
	REQUIRE(rdma_disconnect(id) == 0, "rdma_disconnect");
	REQUIRE(qp_state(id->qp) == IBV_QPS_ERR, "ibv_query_qp state %d right after "
		"rdma_disconnect, want ERR", qp_state(id->qp));
	ok();

	begin("disconnected_event");
	ev = next_event(ch, RDMA_CM_EVENT_DISCONNECTED, 0, EVENT_TIMEOUT_MS);
	REQUIRE(ev->id == id, "DISCONNECTED for id %p, want %p", (void *)ev->id, (void *)id);
	ack(ev);
	ok();

	begin("timewait_exit");
	ev = next_event(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, EVENT_TIMEOUT_MS);
	REQUIRE(ev->id == id, "TIMEWAIT_EXIT for id %p, want %p", (void *)ev->id, (void *)id);
	ack(ev);
	ok();

	begin("teardown");
	rdma_destroy_qp(id);
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	rdma_destroy_event_channel(ch);
	ok();
	return 0;
}

int main(void)
{
	alarm(25);
	REQUIRE(pipe(ready_pipe) == 0 && pipe(posted_pipe) == 0, "pipe");
	return run_server_and_client(server, client);
}
