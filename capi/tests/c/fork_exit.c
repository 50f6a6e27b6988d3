/*
 * fork() after connecting (issue 25): a child of a process that uses the library inherits
 * its ids in name only. With rdma-core and no ibv_fork_init, a child may make no verbs call
 * on its parent's objects (ibv_fork_init(3)); and its exit must not disconnect anything: the
 * kernel closes the rdma_cm file (ucma_close) only when its last reference goes, and the
 * parent still holds it. So when the child exits — exit(), which runs atexit handlers — the
 * peer sees nothing: no DISCONNECTED, the connection keeps carrying SENDs. A verbs call in
 * the child fails (NULL/ENODEV) instead of hanging on the parent's locks.
 *
 * Two processes as in cm_teardown.c: the server (RNIC_ADDR) and the client (last octet 2);
 * the client forks the child once ESTABLISHED.
 */

#include "common.h"

#define PORT 7473
#define EVENT_TIMEOUT_MS 10000

static int ready_pipe[2];  /* server -> client: listening */
static int forked_pipe[2]; /* client -> server: the child has exited */
static int quiet_pipe[2];  /* server -> client: nothing came, receive posted: send now */

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
	static char buf[64];
	const char *ip = getenv("RNIC_ADDR");
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id, *id;
	struct rdma_cm_event *ev;
	struct rdma_conn_param param;
	struct sockaddr_in sin;
	struct pollfd p;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;

	begin("accept");
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");
	REQUIRE(rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	sin = sockaddr_of(ip, PORT);
	REQUIRE(rdma_bind_addr(listen_id, (struct sockaddr *)&sin) == 0, "rdma_bind_addr");
	REQUIRE(rdma_listen(listen_id, 4) == 0, "rdma_listen");
	notify(ready_pipe[1]);
	ev = next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, EVENT_TIMEOUT_MS);
	id = ev->id;
	cq = create_qp(id, &pd);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	conn_param(&param);
	REQUIRE(rdma_accept(id, &param) == 0, "rdma_accept");
	ack(ev);
	ack(next_event(ch, RDMA_CM_EVENT_ESTABLISHED, 0, EVENT_TIMEOUT_MS));
	ok();

	begin("nothing_when_the_clients_child_exits");
	await(forked_pipe[0]);
	p.fd = ch->fd;
	p.events = POLLIN;
	REQUIRE(poll(&p, 1, 500) == 0, "an rdma_cm event came after the client's child exited");
	REQUIRE(qp_state(id->qp) == IBV_QPS_RTS, "the QP left RTS");
	ok();

	begin("the_connection_still_carries_a_send");
	post_recv(id->qp, 1, mr, buf, sizeof(buf));
	notify(quiet_pipe[1]);
	expect_wc(cq, 1, IBV_WC_SUCCESS);
	REQUIRE(strcmp(buf, "after the fork") == 0, "received \"%s\"", buf);
	ok();

	begin("disconnected_by_the_client");
	ack(next_event(ch, RDMA_CM_EVENT_DISCONNECTED, 0, EVENT_TIMEOUT_MS));
	rdma_destroy_qp(id);
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	REQUIRE(rdma_destroy_id(listen_id) == 0, "rdma_destroy_id(listener)");
	ok();
	return 0;
}

static int client(void)
{
	static char msg[64] = "after the fork";
	char server_ip[64];
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_conn_param param;
	struct sockaddr_in dst;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	pid_t child;
	int status;

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
	mr = ibv_reg_mr(pd, msg, sizeof(msg), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	conn_param(&param);
	REQUIRE(rdma_connect(id, &param) == 0, "rdma_connect");
	ack(next_event(ch, RDMA_CM_EVENT_ESTABLISHED, 0, EVENT_TIMEOUT_MS));
	ok();

	begin("a_forked_child_may_not_use_the_library_and_exits_quietly");
	fflush(stdout);
	child = fork();
	REQUIRE(child >= 0, "fork");
	if (child == 0) {
		struct ibv_pd *p2;

		errno = 0;
		p2 = ibv_alloc_pd(id->verbs);
		if (p2 != NULL || errno != ENODEV)
			_exit(3);
		exit(0); /* runs the atexit handlers the parent registered */
	}
	REQUIRE(waitpid(child, &status, 0) == child, "waitpid");
	REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		"the child ended with status %#x (3: ibv_alloc_pd did not fail with ENODEV)",
		status);
	notify(forked_pipe[1]);
	ok();

	begin("send_after_the_childs_exit");
	await(quiet_pipe[0]);
	post_send(id->qp, 2, IBV_WR_SEND, mr, msg, sizeof(msg), 0, 0);
	expect_wc(cq, 2, IBV_WC_SUCCESS);
	ok();

	begin("disconnect");
	REQUIRE(rdma_disconnect(id) == 0, "rdma_disconnect");
	ack(next_event(ch, RDMA_CM_EVENT_DISCONNECTED, 0, EVENT_TIMEOUT_MS));
	rdma_destroy_qp(id);
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	ok();
	return 0;
}

int main(void)
{
	alarm(25);
	REQUIRE(pipe(ready_pipe) == 0 && pipe(forked_pipe) == 0 && pipe(quiet_pipe) == 0,
		"pipe");
	return run_server_and_client(server, client);
}
