/*
 * Synchronous rdma_cm ids (created with a NULL event channel), between two processes: the
 * program forks before its first RDMA call; the parent is the server on RNIC_ADDR, the child
 * the client on the same address with last octet 2. A pipe tells the client the server listens.
 *
 * What librdmacm does (rdma-core librdmacm/cma.c):
 * - rdma_create_id(NULL, ...) gives the id a private event channel and sets id_priv->sync
 *   (ucma_alloc_id);
 * - rdma_resolve_addr, rdma_resolve_route, rdma_connect, rdma_accept (RC) and rdma_disconnect
 *   end in `return ucma_complete(id);`, which acks the previous id->event, blocks in
 *   rdma_get_cm_event on the private channel, keeps the event as id->event and returns 0 for
 *   status 0, ERR(ECONNREFUSED) for REJECTED, else ERR(-status);
 * - rdma_get_request (only on a synchronous listener, else EINVAL) blocks for the next event;
 *   for a CONNECT_REQUEST the new id is synchronous (ucma_process_conn_req:
 *   rdma_migrate_id(&id_priv->id, NULL)) and its id->event is the request;
 * - rdma_migrate_id(id, channel) of a synchronous id acks id->event and destroys the private
 *   channel; rdma_migrate_id(id, NULL) makes the id synchronous on a new private channel, and
 *   is EINVAL on an id that is synchronous already (`if (id_priv->sync && !channel) return
 *   ERR(EINVAL);`).
 *
 * A connect to a port nobody listens on is rejected by the peer's CM (REJ, reason 8, invalid
 * service ID: kernel cm.c cm_match_req → IB_CM_REJ_INVALID_SERVICE_ID), which the client sees
 * as RDMA_CM_EVENT_REJECTED: a synchronous rdma_connect returns -1 with errno ECONNREFUSED.
 */

#include "common.h"

#define PORT 7472
#define MSG_LEN 64
#define POLL_TIMEOUT_MS 10000

static int ready_pipe[2]; /* server -> client: listening */

static void init_attr(struct ibv_qp_init_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_type = IBV_QPT_RC;
	a->cap.max_send_wr = 4;
	a->cap.max_recv_wr = 4;
	a->cap.max_send_sge = 1;
	a->cap.max_recv_sge = 1;
	a->sq_sig_all = 1;
}

/* One completion of `cq` (common.h's poll_one), required within POLL_TIMEOUT_MS. */
static struct ibv_wc one_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;

	REQUIRE(poll_one(cq, &wc, POLL_TIMEOUT_MS) == 1, "no completion within %d ms",
		POLL_TIMEOUT_MS);
	return wc;
}

static int server(void)
{
	const char *ip = getenv("RNIC_ADDR");
	struct sockaddr_in addr = sockaddr_of(ip, PORT);
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct rdma_event_channel *ch;
	struct rdma_event_channel *private_ch;
	struct ibv_qp_init_attr qa;
	struct ibv_recv_wr rwr, *bad_rwr;
	struct ibv_sge sge;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	char buf[MSG_LEN];
	int ctx_tag = 7;
	int rc;

	begin("listen");
	REQUIRE(rdma_create_id(NULL, &listen_id, &ctx_tag, RDMA_PS_TCP) == 0,
		"rdma_create_id(NULL)");
	REQUIRE(rdma_bind_addr(listen_id, (struct sockaddr *)&addr) == 0, "rdma_bind_addr");
	REQUIRE(rdma_listen(listen_id, 4) == 0, "rdma_listen");
	REQUIRE(write(ready_pipe[1], "r", 1) == 1, "write ready");
	ok();

	begin("get_request");
	rc = rdma_get_request(listen_id, &id);
	REQUIRE(rc == 0, "rdma_get_request returned %d", rc);
	REQUIRE(id != NULL && id != listen_id, "no new id");
	REQUIRE(id->event != NULL && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST,
		"id->event is not the CONNECT_REQUEST");
	REQUIRE(id->event->id == id && id->event->listen_id == listen_id,
		"the request's ids are wrong");
	REQUIRE(id->context == &ctx_tag, "the new id does not carry the listener's context");
	REQUIRE(id->channel != NULL && id->channel != listen_id->channel,
		"the new id has no private channel of its own");
	REQUIRE(id->verbs != NULL, "the new id is not bound to the device");
	ok();

	begin("accept_blocks_until_established");
	init_attr(&qa);
	REQUIRE(rdma_create_qp(id, NULL, &qa) == 0, "rdma_create_qp");
	mr = ibv_reg_mr(id->qp->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	memset(buf, 0, sizeof(buf));
	sge.addr = (uintptr_t)buf;
	sge.length = sizeof(buf);
	sge.lkey = mr->lkey;
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 1;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	REQUIRE(ibv_post_recv(id->qp, &rwr, &bad_rwr) == 0, "ibv_post_recv");
	rc = rdma_accept(id, NULL);
	REQUIRE(rc == 0, "rdma_accept returned %d", rc);
	REQUIRE(id->event != NULL && id->event->event == RDMA_CM_EVENT_ESTABLISHED &&
			id->event->status == 0,
		"id->event after rdma_accept is %s", id->event ? rdma_event_str(id->event->event) : "NULL");
	REQUIRE(qp_state(id->qp) == IBV_QPS_RTS, "QP not RTS after rdma_accept");
	ok();

	begin("recv");
	wc = one_wc(id->recv_cq);
	REQUIRE(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV, "receive: %s",
		ibv_wc_status_str(wc.status));
	REQUIRE(strcmp(buf, "sync hello") == 0, "received \"%s\"", buf);
	ok();

	begin("disconnect_blocks_until_disconnected");
	rc = rdma_disconnect(id);
	REQUIRE(rc == 0, "rdma_disconnect returned %d", rc);
	REQUIRE(id->event != NULL && id->event->event == RDMA_CM_EVENT_DISCONNECTED,
		"id->event after rdma_disconnect is %s",
		id->event ? rdma_event_str(id->event->event) : "NULL");
	ok();

	begin("get_request_on_async_listener_einval");
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");
	{
		struct sockaddr_in a2 = sockaddr_of(ip, PORT + 2);
		struct rdma_cm_id *async_listen = NULL, *got = NULL;

		REQUIRE(rdma_create_id(ch, &async_listen, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
		REQUIRE(rdma_bind_addr(async_listen, (struct sockaddr *)&a2) == 0, "rdma_bind_addr");
		REQUIRE(rdma_listen(async_listen, 1) == 0, "rdma_listen");
		errno = 0;
		rc = rdma_get_request(async_listen, &got);
		REQUIRE(rc == -1 && errno == EINVAL,
			"rdma_get_request on a listener with a channel returned %d", rc);
		REQUIRE(rdma_destroy_id(async_listen) == 0, "rdma_destroy_id");
	}
	ok();

	begin("migrate_to_channel");
	rc = rdma_migrate_id(id, ch);
	REQUIRE(rc == 0, "rdma_migrate_id(id, ch) returned %d", rc);
	REQUIRE(id->channel == ch, "id->channel is not the new channel");
	REQUIRE(id->event == NULL, "id->event kept after leaving synchronous mode");
	ok();

	begin("migrate_to_null");
	rc = rdma_migrate_id(id, NULL);
	REQUIRE(rc == 0, "rdma_migrate_id(id, NULL) returned %d", rc);
	private_ch = id->channel;
	REQUIRE(private_ch != NULL && private_ch != ch, "no private channel after migrate to NULL");
	errno = 0;
	rc = rdma_migrate_id(id, NULL);
	REQUIRE(rc == -1 && errno == EINVAL,
		"rdma_migrate_id(NULL) of a synchronous id returned %d", rc);
	REQUIRE(id->channel == private_ch, "a refused migration changed the channel");
	ok();

	begin("teardown");
	rdma_destroy_qp(id);
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	REQUIRE(rdma_destroy_id(listen_id) == 0, "rdma_destroy_id(listener)");
	rdma_destroy_event_channel(ch);
	ok();
	return 0;
}

/* A synchronous id resolved towards the server's `port`. */
static struct rdma_cm_id *resolved(const char *server_ip, int port)
{
	struct sockaddr_in dst = sockaddr_of(server_ip, port);
	struct rdma_cm_id *id = NULL;
	int rc;

	REQUIRE(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id(NULL)");
	rc = rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000);
	REQUIRE(rc == 0, "rdma_resolve_addr returned %d", rc);
	REQUIRE(id->event != NULL && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED,
		"id->event after rdma_resolve_addr is not ADDR_RESOLVED");
	rc = rdma_resolve_route(id, 2000);
	REQUIRE(rc == 0, "rdma_resolve_route returned %d", rc);
	REQUIRE(id->event != NULL && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
		"id->event after rdma_resolve_route is not ROUTE_RESOLVED");
	return id;
}

static int client(void)
{
	char server_ip[64];
	struct rdma_cm_id *id;
	struct rdma_conn_param param;
	struct ibv_qp_init_attr qa;
	struct ibv_send_wr swr, *bad_swr;
	struct ibv_sge sge;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	char buf[MSG_LEN] = "sync hello";
	char c;
	int rc;

	addr_with_last_octet(server_ip, sizeof(server_ip), 1);
	REQUIRE(read(ready_pipe[0], &c, 1) == 1, "read ready");

	begin("resolve_blocks_until_resolved");
	id = resolved(server_ip, PORT + 1);
	ok();

	begin("connect_to_no_listener_econnrefused");
	memset(&param, 0, sizeof(param));
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	errno = 0;
	rc = rdma_connect(id, &param);
	REQUIRE(rc == -1 && errno == ECONNREFUSED,
		"rdma_connect to a port nobody listens on returned %d", rc);
	REQUIRE(id->event != NULL && id->event->event == RDMA_CM_EVENT_REJECTED,
		"id->event after the refused connect is not REJECTED");
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	ok();

	begin("connect_blocks_until_established");
	id = resolved(server_ip, PORT);
	init_attr(&qa);
	REQUIRE(rdma_create_qp(id, NULL, &qa) == 0, "rdma_create_qp");
	rc = rdma_connect(id, &param);
	REQUIRE(rc == 0, "rdma_connect returned %d", rc);
	REQUIRE(id->event != NULL && id->event->event == RDMA_CM_EVENT_ESTABLISHED,
		"id->event after rdma_connect is %s",
		id->event ? rdma_event_str(id->event->event) : "NULL");
	REQUIRE(qp_state(id->qp) == IBV_QPS_RTS, "QP not RTS after rdma_connect");
	ok();

	begin("send");
	mr = ibv_reg_mr(id->qp->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	sge.addr = (uintptr_t)buf;
	sge.length = sizeof(buf);
	sge.lkey = mr->lkey;
	memset(&swr, 0, sizeof(swr));
	swr.wr_id = 2;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;
	REQUIRE(ibv_post_send(id->qp, &swr, &bad_swr) == 0, "ibv_post_send");
	wc = one_wc(id->send_cq);
	REQUIRE(wc.status == IBV_WC_SUCCESS, "send: %s", ibv_wc_status_str(wc.status));
	ok();

	begin("disconnect_blocks_until_disconnected");
	rc = rdma_disconnect(id);
	REQUIRE(rc == 0, "rdma_disconnect returned %d", rc);
	REQUIRE(id->event != NULL && id->event->event == RDMA_CM_EVENT_DISCONNECTED,
		"id->event after rdma_disconnect is %s",
		id->event ? rdma_event_str(id->event->event) : "NULL");
	ok();

	begin("teardown");
	rdma_destroy_qp(id);
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	ok();
	return 0;
}

int main(void)
{
	alarm(25);
	REQUIRE(pipe(ready_pipe) == 0, "pipe");
	return run_server_and_client(server, client);
}
