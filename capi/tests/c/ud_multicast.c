/*
 * UD ids, SIDR and multicast through librdmacm, in one process (the RNIC sends to its own GID).
 *
 * - rdma_create_qp on an RDMA_PS_UDP id: the QP is in RTS with Q_Key RDMA_UDP_QKEY at once
 *   (rdma-core librdmacm/cma.c ucma_init_ud_qp: INIT with rdma_init_qp_attr's Q_Key, RTR, RTS).
 * - rdma_connect on a UD id is SIDR (Linux cma.c cma_resolve_ib_udp): the listener gets
 *   CONNECT_REQUEST with the private data in param.ud; rdma_accept answers at once (a SIDR_REP:
 *   librdmacm's rdma_accept does not wait for a UD id); the active side's ESTABLISHED carries
 *   param.ud: the passive QP's number, RDMA_UDP_QKEY, an address vector (cma_sidr_rep_handler).
 *   A datagram sent with it arrives; ibv_create_ah_from_wc on it answers the sender
 *   (libibverbs verbs.c ibv_init_ah_from_wc, from the RoCEv2 IPv4 header in the GRH).
 * - rdma_reject on a UD request: the active side gets UNREACHABLE with status 2
 *   (IB_SIDR_REJECT: cma_sidr_rep_handler puts the SIDR status in event->status).
 * - rdma_join_multicast: -1/EINVAL on an id not bound to a device (cma.c rdma_join_multicast:
 *   !id->device); rdma_join_multicast_ex checks its attributes (librdmacm); the
 *   MULTICAST_JOIN event has param.ud.qp_num 0xFFFFFF, RDMA_UDP_QKEY, the group's GID
 *   ::ffff:a.b.c.d (cma_iboe_set_mgid) and the join's context as private_data; a datagram
 *   sent to the group comes back to the sending QP, which is attached (IB multicast: every
 *   attached QP receives, the sender's included); ibv_create_ah_from_wc refuses it (EINVAL:
 *   sent to a multicast GID); rdma_leave_multicast, then -1/EADDRNOTAVAIL for a second one.
 * - ibv_attach_mcast: EINVAL for a unicast GID and for an RC QP (ib_attach_mcast);
 *   ibv_detach_mcast: EINVAL for a group the QP is not attached to.
 */
#include "common.h"

#define PORT 19092
#define LEN 64
#define GRH 40

static struct rdma_event_channel *ch;

static struct rdma_cm_event *cm_next(enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = NULL;

	REQUIRE(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
	REQUIRE(ev->event == want, "event %s (status %d), want %s", rdma_event_str(ev->event),
		ev->status, rdma_event_str(want));
	return ev;
}

struct ud_end {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[4 * (GRH + LEN)];
};

static void ud_qp(struct rdma_cm_id *id, struct ud_end *e)
{
	struct ibv_qp_init_attr ia;

	e->pd = ibv_alloc_pd(id->verbs);
	REQUIRE(e->pd != NULL, "ibv_alloc_pd");
	e->cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	REQUIRE(e->cq != NULL, "ibv_create_cq");
	e->mr = ibv_reg_mr(e->pd, e->buf, sizeof(e->buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(e->mr != NULL, "ibv_reg_mr");
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = e->cq;
	ia.qp_type = IBV_QPT_UD;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	REQUIRE(rdma_create_qp(id, e->pd, &ia) == 0, "rdma_create_qp");
}

static void ud_post_recv(struct rdma_cm_id *id, struct ud_end *e, int slot)
{
	struct ibv_sge sge = { (uintptr_t)(e->buf + slot * (GRH + LEN)), GRH + LEN, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge, .num_sge = 1 }, *bad;

	REQUIRE(ibv_post_recv(id->qp, &wr, &bad) == 0, "ibv_post_recv");
}

static void send_to(struct rdma_cm_id *id, struct ud_end *e, struct ibv_ah *ah, uint32_t qpn,
		    uint32_t qkey)
{
	struct ibv_sge sge = { (uintptr_t)e->buf, LEN, e->mr->lkey };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htobe32(id->qp->qp_num);
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	REQUIRE(ibv_post_send(id->qp, &wr, &bad) == 0, "ibv_post_send");
}

/* The next receive completion on `cq` (send completions are skipped). */
static struct ibv_wc next_recv(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	long until = now_ms() + 5000;
	int n;

	for (;;) {
		n = ibv_poll_cq(cq, 1, &wc);
		REQUIRE(n >= 0, "ibv_poll_cq %d", n);
		if (n == 1 && wc.opcode == IBV_WC_RECV)
			return wc;
		REQUIRE(n == 0 || wc.status == IBV_WC_SUCCESS, "send completion %s",
			ibv_wc_status_str(wc.status));
		REQUIRE(now_ms() < until, "no datagram within 5 s");
		usleep(1000);
	}
}

int main(void)
{
	const char *me = getenv("RNIC_ADDR");
	struct sockaddr_in self = sockaddr_of(me, PORT), group = sockaddr_of("239.0.92.7", 0);
	struct sockaddr_in src = sockaddr_of(me, 0);
	struct rdma_cm_id *listen_id, *active, *passive, *rejected, *mc, *unbound;
	struct rdma_cm_event *ev;
	struct ud_end ea, ep, em;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	struct ibv_ah *ah, *back;
	struct ibv_wc wc;
	struct rdma_cm_join_mc_attr_ex mx;
	uint32_t peer_qpn, peer_qkey;
	union ibv_gid mgid, ugid;
	int ctx_cookie = 7, rc;

	alarm(25);
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");

	begin("ud_qp_in_rts_with_rdma_udp_qkey");
	REQUIRE(rdma_create_id(ch, &listen_id, NULL, RDMA_PS_UDP) == 0, "rdma_create_id");
	REQUIRE(listen_id->qp_type == IBV_QPT_UD, "qp_type %d", listen_id->qp_type);
	REQUIRE(rdma_bind_addr(listen_id, (struct sockaddr *)&self) == 0, "rdma_bind_addr");
	REQUIRE(rdma_listen(listen_id, 4) == 0, "rdma_listen");
	REQUIRE(rdma_create_id(ch, &active, NULL, RDMA_PS_UDP) == 0, "rdma_create_id");
	REQUIRE(rdma_resolve_addr(active, NULL, (struct sockaddr *)&self, 2000) == 0, "resolve");
	rdma_ack_cm_event(cm_next(RDMA_CM_EVENT_ADDR_RESOLVED));
	REQUIRE(rdma_resolve_route(active, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(cm_next(RDMA_CM_EVENT_ROUTE_RESOLVED));
	ud_qp(active, &ea);
	REQUIRE(active->qp->state == IBV_QPS_RTS, "qp->state %d", active->qp->state);
	REQUIRE(ibv_query_qp(active->qp, &qa, IBV_QP_QKEY | IBV_QP_STATE, &qia) == 0, "query_qp");
	REQUIRE(qa.qp_state == IBV_QPS_RTS && qa.qkey == RDMA_UDP_QKEY, "state %d qkey %#x",
		qa.qp_state, qa.qkey);
	{
		/* What ucma_init_ud_qp asks the kernel for (cma_ib_init_qp_attr). */
		int mask = 0;
		memset(&qa, 0, sizeof(qa));
		qa.qp_state = IBV_QPS_INIT;
		REQUIRE(rdma_init_qp_attr(active, &qa, &mask) == 0, "rdma_init_qp_attr");
		REQUIRE(mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
			"mask %#x", mask);
		REQUIRE(qa.qkey == RDMA_UDP_QKEY && qa.port_num == 1, "qkey %#x port %d", qa.qkey,
			qa.port_num);
	}
	ok();

	begin("sidr_connect_request_and_established_with_ud_params");
	{
		struct rdma_conn_param cp = { .private_data = "sidr", .private_data_len = 4 };
		REQUIRE(rdma_connect(active, &cp) == 0, "rdma_connect");
	}
	ev = cm_next(RDMA_CM_EVENT_CONNECT_REQUEST);
	passive = ev->id;
	REQUIRE(ev->listen_id == listen_id, "listen_id");
	REQUIRE(passive->qp_type == IBV_QPT_UD, "new id's qp_type %d", passive->qp_type);
	REQUIRE(ev->param.ud.private_data_len == 180, "private data %d bytes",
		ev->param.ud.private_data_len);
	REQUIRE(memcmp(ev->param.ud.private_data, "sidr", 4) == 0, "private data");
	rdma_ack_cm_event(ev);
	ud_qp(passive, &ep);
	ud_post_recv(passive, &ep, 0);
	ud_post_recv(passive, &ep, 1);
	{
		struct rdma_conn_param cp = { .qp_num = passive->qp->qp_num };
		REQUIRE(rdma_accept(passive, &cp) == 0, "rdma_accept");
	}
	ev = cm_next(RDMA_CM_EVENT_ESTABLISHED);
	REQUIRE(ev->id == active && ev->status == 0, "ESTABLISHED of id %p status %d",
		(void *)ev->id, ev->status);
	peer_qpn = ev->param.ud.qp_num;
	peer_qkey = ev->param.ud.qkey;
	REQUIRE(peer_qpn == passive->qp->qp_num, "qp_num %u, want %u", peer_qpn,
		passive->qp->qp_num);
	REQUIRE(peer_qkey == RDMA_UDP_QKEY, "qkey %#x", peer_qkey);
	REQUIRE(ev->param.ud.ah_attr.is_global == 1, "ah_attr not global");
	ah = ibv_create_ah(ea.pd, &ev->param.ud.ah_attr);
	REQUIRE(ah != NULL, "ibv_create_ah from param.ud.ah_attr");
	rdma_ack_cm_event(ev);
	ok();

	begin("datagram_and_reply_through_ah_from_wc");
	ud_post_recv(active, &ea, 1);
	memcpy(ea.buf, "ping", 5);
	send_to(active, &ea, ah, peer_qpn, peer_qkey);
	wc = next_recv(ep.cq);
	REQUIRE(wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_GRH) &&
			(wc.wc_flags & IBV_WC_WITH_IMM),
		"status %d flags %#x", wc.status, wc.wc_flags);
	REQUIRE(wc.src_qp == active->qp->qp_num && be32toh(wc.imm_data) == active->qp->qp_num,
		"src_qp %u imm %u", wc.src_qp, be32toh(wc.imm_data));
	REQUIRE(wc.byte_len == GRH + LEN, "byte_len %u", wc.byte_len);
	REQUIRE(memcmp(ep.buf + wc.wr_id * (GRH + LEN) + GRH, "ping", 5) == 0, "payload");
	back = ibv_create_ah_from_wc(ep.pd, &wc, (struct ibv_grh *)(ep.buf + wc.wr_id * (GRH + LEN)),
				     passive->port_num);
	REQUIRE(back != NULL, "ibv_create_ah_from_wc");
	send_to(passive, &ep, back, wc.src_qp, RDMA_UDP_QKEY);
	wc = next_recv(ea.cq);
	REQUIRE(wc.src_qp == passive->qp->qp_num, "the reply came from QP %u", wc.src_qp);
	ok();

	begin("reject_is_unreachable_status_2");
	REQUIRE(rdma_create_id(ch, &rejected, NULL, RDMA_PS_UDP) == 0, "rdma_create_id");
	REQUIRE(rdma_resolve_addr(rejected, NULL, (struct sockaddr *)&self, 2000) == 0, "resolve");
	rdma_ack_cm_event(cm_next(RDMA_CM_EVENT_ADDR_RESOLVED));
	REQUIRE(rdma_resolve_route(rejected, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(cm_next(RDMA_CM_EVENT_ROUTE_RESOLVED));
	REQUIRE(rdma_connect(rejected, NULL) == 0, "rdma_connect");
	ev = cm_next(RDMA_CM_EVENT_CONNECT_REQUEST);
	REQUIRE(rdma_reject(ev->id, "no", 2) == 0, "rdma_reject");
	{
		struct rdma_cm_id *req_id = ev->id;
		rdma_ack_cm_event(ev);
		ev = cm_next(RDMA_CM_EVENT_UNREACHABLE);
		REQUIRE(ev->id == rejected && ev->status == 2, "status %d", ev->status);
		REQUIRE(memcmp(ev->param.ud.private_data, "no", 2) == 0, "private data");
		rdma_ack_cm_event(ev);
		REQUIRE(rdma_destroy_id(req_id) == 0, "rdma_destroy_id");
	}
	ok();

	begin("join_checks");
	REQUIRE(rdma_create_id(ch, &unbound, NULL, RDMA_PS_UDP) == 0, "rdma_create_id");
	errno = 0;
	rc = rdma_join_multicast(unbound, (struct sockaddr *)&group, NULL);
	REQUIRE(rc == -1 && errno == EINVAL, "join on an unbound id: %d", rc);
	REQUIRE(rdma_create_id(ch, &mc, NULL, RDMA_PS_UDP) == 0, "rdma_create_id");
	REQUIRE(rdma_resolve_addr(mc, (struct sockaddr *)&src, (struct sockaddr *)&group, 2000) == 0,
		"resolve the group's address");
	rdma_ack_cm_event(cm_next(RDMA_CM_EVENT_ADDR_RESOLVED));
	ud_qp(mc, &em);
	memset(&mx, 0, sizeof(mx));
	mx.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	mx.addr = (struct sockaddr *)&group;
	errno = 0;
	rc = rdma_join_multicast_ex(mc, &mx, NULL);
	REQUIRE(rc == -1 && errno == EINVAL, "no join flags: %d", rc);
	mx.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	mx.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	errno = 0;
	rc = rdma_join_multicast_ex(mc, &mx, NULL);
	REQUIRE(rc == -1 && errno == EINVAL, "reserved join flag: %d", rc);
	mx.comp_mask |= RDMA_CM_JOIN_MC_ATTR_RESERVED;
	mx.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
	errno = 0;
	rc = rdma_join_multicast_ex(mc, &mx, NULL);
	REQUIRE(rc == -1 && errno == ENOTSUP, "reserved attribute: %d", rc);
	ok();

	begin("multicast_join_event");
	mx.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	REQUIRE(rdma_join_multicast_ex(mc, &mx, &ctx_cookie) == 0, "rdma_join_multicast_ex");
	ev = cm_next(RDMA_CM_EVENT_MULTICAST_JOIN);
	REQUIRE(ev->id == mc && ev->status == 0, "status %d", ev->status);
	REQUIRE(ev->param.ud.private_data == &ctx_cookie, "private_data is not the context");
	REQUIRE(ev->param.ud.qp_num == 0xFFFFFF, "qp_num %#x", ev->param.ud.qp_num);
	REQUIRE(ev->param.ud.qkey == RDMA_UDP_QKEY, "qkey %#x", ev->param.ud.qkey);
	memset(&mgid, 0, sizeof(mgid));
	mgid.raw[10] = mgid.raw[11] = 0xff;
	memcpy(&mgid.raw[12], &group.sin_addr, 4);
	REQUIRE(memcmp(&ev->param.ud.ah_attr.grh.dgid, &mgid, 16) == 0, "dgid");
	REQUIRE(ev->param.ud.ah_attr.is_global && ev->param.ud.ah_attr.dlid == 0, "ah_attr");
	ah = ibv_create_ah(em.pd, &ev->param.ud.ah_attr);
	REQUIRE(ah != NULL, "ibv_create_ah to the group");
	rdma_ack_cm_event(ev);
	ok();

	begin("group_send_loops_back_to_the_attached_sender");
	ud_post_recv(mc, &em, 1);
	send_to(mc, &em, ah, 0xFFFFFF, RDMA_UDP_QKEY);
	wc = next_recv(em.cq);
	REQUIRE(wc.status == IBV_WC_SUCCESS && wc.src_qp == mc->qp->qp_num, "src_qp %u",
		wc.src_qp);
	errno = 0;
	back = ibv_create_ah_from_wc(em.pd, &wc, (struct ibv_grh *)(em.buf + wc.wr_id * (GRH + LEN)),
				     mc->port_num);
	REQUIRE(back == NULL && errno == EINVAL, "AH from a multicast datagram");
	ok();

	begin("attach_detach_checks");
	ugid = mgid;
	ugid.raw[12] = 10; /* ::ffff:10.x.x.x is not a multicast GID */
	rc = ibv_attach_mcast(mc->qp, &ugid, 0);
	REQUIRE(rc == EINVAL, "attach of a unicast GID: %d", rc);
	{
		struct ibv_cq *cq = ibv_create_cq(mc->verbs, 4, NULL, NULL, 0);
		struct ibv_qp *rc_qp;
		REQUIRE(cq != NULL, "cq");
		rc_qp = create_rc_qp(em.pd, cq, cq);
		rc = ibv_attach_mcast(rc_qp, &mgid, 0);
		REQUIRE(rc == EINVAL, "attach of an RC QP: %d", rc);
		REQUIRE(ibv_destroy_qp(rc_qp) == 0 && ibv_destroy_cq(cq) == 0, "destroy");
	}
	ugid.raw[12] = 239;
	ugid.raw[15] = 99;
	rc = ibv_detach_mcast(mc->qp, &ugid, 0);
	REQUIRE(rc == EINVAL, "detach from a group not attached: %d", rc);
	ok();

	begin("leave");
	REQUIRE(rdma_leave_multicast(mc, (struct sockaddr *)&group) == 0, "rdma_leave_multicast");
	errno = 0;
	rc = rdma_leave_multicast(mc, (struct sockaddr *)&group);
	REQUIRE(rc == -1 && errno == EADDRNOTAVAIL, "second leave: %d", rc);
	rc = ibv_detach_mcast(mc->qp, &mgid, 0);
	REQUIRE(rc == EINVAL, "the QP was detached by the leave: %d", rc);
	ok();

	begin("teardown");
	REQUIRE(ibv_destroy_ah(ah) == 0, "destroy ah");
	rdma_destroy_qp(mc);
	rdma_destroy_qp(active);
	rdma_destroy_qp(passive);
	REQUIRE(rdma_destroy_id(mc) == 0 && rdma_destroy_id(active) == 0 &&
			rdma_destroy_id(passive) == 0 && rdma_destroy_id(rejected) == 0 &&
			rdma_destroy_id(unbound) == 0 && rdma_destroy_id(listen_id) == 0,
		"rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	ok();
	return 0;
}
