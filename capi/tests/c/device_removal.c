/*
 * A hot-unplug under an rdma_cm application: RNIC_REMOVE_DEVICE_MS removes librnic's device
 * while a listener bound to its address waits and a QP has receives posted.
 *
 * What Linux does (docs/cm-semantics.md, "Device removal and address change"): every rdma_cm id
 * on the device gets RDMA_CM_EVENT_DEVICE_REMOVAL with status 0 (cma.c cma_process_remove ->
 * cma_send_device_removal_put); afterwards every call on it but rdma_destroy_id fails with
 * ENXIO (ucma.c ucma_get_ctx on a closed context). The verbs context gets
 * IBV_EVENT_DEVICE_FATAL (uverbs_main.c ib_uverbs_remove_one), the QP's posted WRs complete
 * with IBV_WC_WR_FLUSH_ERR, and verbs calls answer EIO (a disassociated context).
 */
#include "common.h"

int main(void)
{
	const char *ip = getenv("RNIC_ADDR");
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listener, *id;
	struct rdma_cm_event *ev;
	struct ibv_async_event aev;
	struct ibv_qp_init_attr qa;
	struct ibv_recv_wr rwr, *bad;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct sockaddr_in a;
	static char buf[64];
	int rc;

	alarm(25);
	REQUIRE(ip != NULL, "RNIC_ADDR is not set");
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");
	REQUIRE(rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(7990);
	REQUIRE(inet_pton(AF_INET, ip, &a.sin_addr) == 1, "inet_pton");
	REQUIRE(rdma_bind_addr(listener, (struct sockaddr *)&a) == 0, "rdma_bind_addr");
	REQUIRE(rdma_listen(listener, 4) == 0, "rdma_listen");

	/* A second id with a QP on the device, receives posted. */
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	a.sin_port = htons(7991);
	REQUIRE(rdma_bind_addr(id, (struct sockaddr *)&a) == 0, "rdma_bind_addr");
	pd = ibv_alloc_pd(id->verbs);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	REQUIRE(cq != NULL, "ibv_create_cq");
	mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	memset(&qa, 0, sizeof qa);
	qa.send_cq = cq;
	qa.recv_cq = cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	REQUIRE(rdma_create_qp(id, pd, &qa) == 0, "rdma_create_qp");
	sge.addr = (uintptr_t)buf;
	sge.length = sizeof buf;
	sge.lkey = mr->lkey;
	memset(&rwr, 0, sizeof rwr);
	rwr.wr_id = 77;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	REQUIRE(ibv_post_recv(id->qp, &rwr, &bad) == 0, "ibv_post_recv");

	begin("device_removal_event_on_every_id");
	for (int n = 0; n < 2; n++) {
		REQUIRE(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
		REQUIRE(ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL && ev->status == 0 &&
				(ev->id == listener || ev->id == id),
			"got %s status %d", rdma_event_str(ev->event), ev->status);
		REQUIRE(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event");
	}
	ok();

	begin("device_fatal_async_event");
	REQUIRE(ibv_get_async_event(id->verbs, &aev) == 0, "ibv_get_async_event");
	REQUIRE(aev.event_type == IBV_EVENT_DEVICE_FATAL, "got %s",
		ibv_event_type_str(aev.event_type));
	ibv_ack_async_event(&aev);
	ok();

	begin("posted_receive_flushed");
	rc = ibv_poll_cq(cq, 1, &wc);
	REQUIRE(rc == 1 && wc.wr_id == 77 && wc.status == IBV_WC_WR_FLUSH_ERR,
		"ibv_poll_cq returned %d (wr_id %llu, %s)", rc, (unsigned long long)wc.wr_id,
		rc == 1 ? ibv_wc_status_str(wc.status) : "-");
	ok();

	begin("calls_after_removal_fail");
	errno = 0;
	REQUIRE(rdma_listen(listener, 4) == -1 && errno == ENXIO, "rdma_listen after removal");
	rc = ibv_post_recv(id->qp, &rwr, &bad);
	REQUIRE(rc == EIO, "ibv_post_recv after removal returned %d", rc);
	ok();

	begin("destroy_id_works");
	REQUIRE(rdma_destroy_id(listener) == 0, "rdma_destroy_id(listener)");
	ok();
	return 0;
}
