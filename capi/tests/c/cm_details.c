/*
 * librdmacm details as rdma-core 44 and the kernel do them (one process: a listener and a
 * client on the same RNIC):
 *  - rdma_getaddrinfo (librdmacm/addrinfo.c): NULL node, service and hints is EINVAL; with
 *    hints only, the result is the hints' flags, types and addresses; a source address in the
 *    hints is copied beside a resolved destination; a failed lookup returns getaddrinfo's
 *    EAI_* code;
 *  - rdma_bind_addr to a loopback address other than the RNIC's binds to the device (the kernel's
 *    cma_bind_loopback: the first device), and a bound id has id->pd (ucma_get_device);
 *  - RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH (255) in rdma_connect/rdma_accept mean the device's
 *    maxima (rdma_connect, rdma_accept, ucma_valid_param);
 *  - rdma_create_qp writes back the send limits rxe grants (rxe_qp_init_req: a QP of one send SGE
 *    can send 16 bytes inline, as rdma_xclient does);
 *  - UC and XRC QPs are EOPNOTSUPP.
 */
#include "common.h"
#include <netdb.h>

static int port_of(struct sockaddr *sa)
{
	return ntohs(((struct sockaddr_in *)sa)->sin_port);
}

int main(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct sockaddr_in src, dst, lo;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listener, *client, *server = NULL, *probe;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	struct ibv_qp_init_attr qa;
	struct ibv_device_attr da;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	static char rbuf[64];
	const char *addr = getenv("RNIC_ADDR");
	const int port = 7490;
	int rc;

	alarm(25);
	REQUIRE(addr != NULL, "RNIC_ADDR");

	begin("getaddrinfo_all_null_einval");
	errno = 0;
	rc = rdma_getaddrinfo(NULL, NULL, NULL, &res);
	REQUIRE(rc == -1 && errno == EINVAL, "returned %d", rc);
	ok();

	begin("getaddrinfo_hints_only");
	src = sockaddr_of(addr, 7000);
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_qp_type = IBV_QPT_RC;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	rc = rdma_getaddrinfo(NULL, NULL, &hints, &res);
	REQUIRE(rc == 0 && res != NULL, "returned %d", rc);
	REQUIRE(res->ai_flags == RAI_PASSIVE && res->ai_qp_type == IBV_QPT_RC &&
			res->ai_port_space == RDMA_PS_TCP && res->ai_src_len == sizeof(src) &&
			res->ai_src_addr != (struct sockaddr *)&src &&
			memcmp(res->ai_src_addr, &src, sizeof(src)) == 0 && res->ai_dst_len == 0,
		"flags %d qp_type %d ps %d src_len %u dst_len %u", res->ai_flags, res->ai_qp_type,
		res->ai_port_space, res->ai_src_len, res->ai_dst_len);
	rdma_freeaddrinfo(res);
	dst = sockaddr_of(addr, 7001);
	memset(&hints, 0, sizeof(hints));
	hints.ai_dst_addr = (struct sockaddr *)&dst;
	hints.ai_dst_len = sizeof(dst);
	rc = rdma_getaddrinfo(NULL, NULL, &hints, &res);
	REQUIRE(rc == 0 && res->ai_dst_len == sizeof(dst) &&
			memcmp(res->ai_dst_addr, &dst, sizeof(dst)) == 0 && res->ai_src_len == 0,
		"returned %d", rc);
	rdma_freeaddrinfo(res);
	ok();

	begin("getaddrinfo_node_with_source_hint");
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	rc = rdma_getaddrinfo(addr, "7002", &hints, &res);
	REQUIRE(rc == 0, "returned %d", rc);
	REQUIRE(res->ai_family == AF_INET && res->ai_qp_type == IBV_QPT_RC && res->ai_flags == 0 &&
			res->ai_dst_len == sizeof(struct sockaddr_in) &&
			port_of(res->ai_dst_addr) == 7002 && res->ai_src_len == sizeof(src) &&
			port_of(res->ai_src_addr) == 7000,
		"family %d qp_type %d dst port %d", res->ai_family, res->ai_qp_type,
		port_of(res->ai_dst_addr));
	rdma_freeaddrinfo(res);
	ok();

	begin("getaddrinfo_failure_is_eai_code");
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	rc = rdma_getaddrinfo("not-a-number", "7003", &hints, &res);
	REQUIRE(rc == EAI_NONAME, "returned %d (%s), want EAI_NONAME", rc, gai_strerror(rc));
	ok();

	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");

	begin("bind_loopback_binds_the_device");
	REQUIRE(rdma_create_id(ch, &probe, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	lo = sockaddr_of("127.0.0.1", 0);
	if (strcmp(addr, "127.0.0.1") == 0)
		lo = sockaddr_of("127.0.0.2", 0);
	rc = rdma_bind_addr(probe, (struct sockaddr *)&lo);
	REQUIRE(rc == 0, "rdma_bind_addr to a loopback address returned %d", rc);
	REQUIRE(probe->verbs != NULL && probe->pd != NULL, "verbs %p pd %p", (void *)probe->verbs,
		(void *)probe->pd);
	REQUIRE(rdma_destroy_id(probe) == 0, "rdma_destroy_id");
	ok();

	begin("bound_id_has_pd");
	REQUIRE(rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	REQUIRE(listener->pd == NULL, "pd before the bind");
	src = sockaddr_of(addr, port);
	REQUIRE(rdma_bind_addr(listener, (struct sockaddr *)&src) == 0, "rdma_bind_addr");
	REQUIRE(listener->pd != NULL && listener->pd->context == listener->verbs,
		"pd %p", (void *)listener->pd);
	REQUIRE(rdma_listen(listener, 4) == 0, "rdma_listen");
	ok();

	begin("create_qp_rounds_inline_as_rxe");
	REQUIRE(rdma_create_id(ch, &client, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	dst = sockaddr_of(addr, port);
	REQUIRE(rdma_resolve_addr(client, NULL, (struct sockaddr *)&dst, 2000) == 0,
		"rdma_resolve_addr");
	rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, 5000));
	REQUIRE(rdma_resolve_route(client, 2000) == 0, "rdma_resolve_route");
	rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, 5000));
	REQUIRE(client->pd != NULL, "a resolved id has no pd");
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.sq_sig_all = 1;
	REQUIRE(rdma_create_qp(client, NULL, &qa) == 0, "rdma_create_qp");
	REQUIRE(qa.cap.max_inline_data == 16 && qa.cap.max_send_sge == 1,
		"granted max_inline_data %u max_send_sge %u, rxe grants 16 and 1",
		qa.cap.max_inline_data, qa.cap.max_send_sge);
	ok();

	begin("max_resources_mean_the_device_maxima");
	REQUIRE(ibv_query_device(client->verbs, &da) == 0, "ibv_query_device");
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = RDMA_MAX_RESP_RES;
	cp.initiator_depth = RDMA_MAX_INIT_DEPTH;
	cp.retry_count = 7;
	REQUIRE(rdma_connect(client, &cp) == 0, "rdma_connect with 255/255");
	ev = next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, 5000);
	server = ev->id;
	REQUIRE(ev->param.conn.initiator_depth == (uint8_t)da.max_qp_rd_atom &&
			ev->param.conn.responder_resources == (uint8_t)da.max_qp_init_rd_atom,
		"the request carries initiator_depth %u responder_resources %u, want %d and %d",
		ev->param.conn.initiator_depth, ev->param.conn.responder_resources,
		da.max_qp_rd_atom, da.max_qp_init_rd_atom);
	rdma_ack_cm_event(ev);
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	REQUIRE(rdma_create_qp(server, NULL, &qa) == 0, "server rdma_create_qp");
	mr = ibv_reg_mr(server->pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr on id->pd");
	post_recv(server->qp, 1, mr, rbuf, sizeof(rbuf));
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = RDMA_MAX_RESP_RES;
	cp.initiator_depth = RDMA_MAX_INIT_DEPTH;
	REQUIRE(rdma_accept(server, &cp) == 0, "rdma_accept with 255/255");
	rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ESTABLISHED, 0, 5000));
	rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ESTABLISHED, 0, 5000));
	ok();

	begin("inline_send_of_16_bytes");
	{
		static char msg[16] = "sixteen bytes!!";
		struct ibv_sge sge = { .addr = (uintptr_t)msg, .length = 16, .lkey = 0 };
		struct ibv_send_wr wr, *bad;

		memset(&wr, 0, sizeof(wr));
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_INLINE;
		rc = ibv_post_send(client->qp, &wr, &bad);
		REQUIRE(rc == 0, "ibv_post_send of 16 inline bytes returned %d", rc);
		REQUIRE(poll_one(client->send_cq, &wc, 5000) == 1 && wc.status == IBV_WC_SUCCESS,
			"send completion");
		REQUIRE(poll_one(server->recv_cq, &wc, 5000) == 1 && wc.status == IBV_WC_SUCCESS &&
				wc.byte_len == 16 && memcmp(rbuf, msg, 16) == 0,
			"received %u bytes '%.16s'", wc.byte_len, rbuf);
	}
	ok();

	begin("uc_and_xrc_qps_eopnotsupp");
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = client->send_cq;
	qa.qp_type = IBV_QPT_UC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	errno = 0;
	REQUIRE(ibv_create_qp(client->pd, &qa) == NULL && errno == EOPNOTSUPP, "a UC QP was made");
	qa.qp_type = IBV_QPT_XRC_SEND;
	errno = 0;
	REQUIRE(ibv_create_qp(client->pd, &qa) == NULL && errno == EOPNOTSUPP,
		"an XRC QP was made");
	ok();

	begin("teardown");
	/* The passive side's DREP leaves when it calls rdma_disconnect (the kernel's cm.c): then
	 * the client gets its DISCONNECTED. */
	REQUIRE(rdma_disconnect(client) == 0, "rdma_disconnect");
	ev = next_event(ch, RDMA_CM_EVENT_DISCONNECTED, 0, 5000);
	REQUIRE(ev->id == server, "the first DISCONNECTED is not the server's");
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_disconnect(server) == 0, "server rdma_disconnect");
	ev = next_event(ch, RDMA_CM_EVENT_DISCONNECTED, 0, 5000);
	REQUIRE(ev->id == client, "the second DISCONNECTED is not the client's");
	rdma_ack_cm_event(ev);
	ibv_dereg_mr(mr);
	rdma_destroy_qp(server);
	rdma_destroy_qp(client);
	REQUIRE(rdma_destroy_id(server) == 0 && rdma_destroy_id(client) == 0 &&
			rdma_destroy_id(listener) == 0,
		"rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	ok();
	return 0;
}
