/*
 * Shared receive queues (docs/semantics-verbs.md, "Shared receive queues"), through the public
 * libibverbs API: ibv_create_srq / ibv_modify_srq / ibv_query_srq / ibv_destroy_srq and the
 * inline ibv_post_srq_recv (verbs.h: `srq->context->ops.post_srq_recv`).
 *
 * One device, loopback: sender QPs s0 and s1, each connected to one of receiver QPs r0 and r1,
 * both created with `init_attr.srq` = one SRQ. Checked:
 *  - ibv_create_srq writes the granted max_wr/max_sge back (man ibv_create_srq.3: at least what
 *    was asked);
 *  - ibv_post_recv on a QP with an SRQ is EINVAL (rdma-core providers/rxe/rxe.c rxe_post_recv);
 *  - SENDs on s1 then s0 consume the SRQ's receives oldest first, each completion naming the QP
 *    that received (wc.qp_num);
 *  - with the limit armed (ibv_modify_srq IBV_SRQ_LIMIT), the receive that leaves fewer WRs
 *    than the limit raises IBV_EVENT_SRQ_LIMIT_REACHED with element.srq the SRQ, and
 *    ibv_query_srq then reads srq_limit 0 (man ibv_query_srq.3 NOTES);
 *  - srq_limit above max_wr is EINVAL (rxe rxe_srq_chk_attr);
 *  - r0 to ERR: IBV_EVENT_QP_LAST_WQE_REACHED with element.qp r0, and no receive of the SRQ
 *    is flushed (r1 still gets the next one);
 *  - ibv_destroy_srq while a QP uses it is EBUSY (kernel ib_destroy_srq_user, srq->usecnt);
 *    after the QPs are destroyed it succeeds.
 */
#include "common.h"

static void post_srq(struct ibv_srq *srq, uint64_t wr_id, struct ibv_mr *mr, char *buf)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_srq_recv(srq, &wr, &bad);

	REQUIRE(rc == 0, "ibv_post_srq_recv returned %d", rc);
}

/* Waits for a receive completion and requires wr_id, SUCCESS and the receiving QP. */
static void expect_recv(struct ibv_cq *cq, uint64_t wr_id, struct ibv_qp *qp)
{
	struct ibv_wc wc;

	REQUIRE(poll_one(cq, &wc, 5000) == 1, "no receive completion within 5 s");
	REQUIRE(wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS && wc.qp_num == qp->qp_num,
		"got wr_id %llu status %s qp_num %u, want wr_id %llu SUCCESS qp_num %u",
		(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.qp_num,
		(unsigned long long)wr_id, qp->qp_num);
}

static void expect_event(struct ibv_context *ctx, enum ibv_event_type type, void *element)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;

	/* Each QP raises COMM_EST once on its first request (docs/semantics-verbs.md, "Async
	 * events"): not what this test looks for. */
	for (;;) {
		REQUIRE(poll(&p, 1, 5000) == 1, "no async event within 5 s");
		REQUIRE(ibv_get_async_event(ctx, &ev) == 0, "ibv_get_async_event");
		if (ev.event_type != IBV_EVENT_COMM_EST)
			break;
		ibv_ack_async_event(&ev);
	}
	REQUIRE(ev.event_type == type &&
			(type == IBV_EVENT_SRQ_LIMIT_REACHED ? (void *)ev.element.srq :
							       (void *)ev.element.qp) == element,
		"event %s, want %s on %p", ibv_event_type_str(ev.event_type),
		ibv_event_type_str(type), element);
	ibv_ack_async_event(&ev);
}

int main(void)
{
	static char src[64], dst[8][64];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_mr *mr_src, *mr_dst;
	struct ibv_srq *srq;
	struct ibv_srq_init_attr sia;
	struct ibv_srq_attr sa;
	struct ibv_qp *s0, *s1, *r0, *r1;
	struct ibv_qp_attr qa;
	union ibv_gid gid;
	struct ibv_wc wc;
	int rc;

	alarm(25);
	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	REQUIRE(scq != NULL && rcq != NULL, "ibv_create_cq");
	mr_src = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	mr_dst = ibv_reg_mr(pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr_src != NULL && mr_dst != NULL, "ibv_reg_mr");
	REQUIRE(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");

	begin("create_srq");
	memset(&sia, 0, sizeof(sia));
	sia.attr.max_wr = 4;
	sia.attr.max_sge = 1;
	srq = ibv_create_srq(pd, &sia);
	REQUIRE(srq != NULL, "ibv_create_srq");
	REQUIRE(sia.attr.max_wr >= 4 && sia.attr.max_sge >= 1, "granted max_wr %u max_sge %u",
		sia.attr.max_wr, sia.attr.max_sge);
	ok();

	s0 = create_rc_qp(pd, scq, scq);
	s1 = create_rc_qp(pd, scq, scq);
	r0 = create_rc_qp_srq(pd, rcq, rcq, srq);
	r1 = create_rc_qp_srq(pd, rcq, rcq, srq);
	connect_rc_qp(s0, r0->qp_num, &gid);
	connect_rc_qp(r0, s0->qp_num, &gid);
	connect_rc_qp(s1, r1->qp_num, &gid);
	connect_rc_qp(r1, s1->qp_num, &gid);

	begin("post_recv_on_srq_qp_einval");
	{
		struct ibv_sge sge = { .addr = (uintptr_t)dst[0], .length = 8, .lkey = mr_dst->lkey };
		struct ibv_recv_wr wr = { .wr_id = 99, .sg_list = &sge, .num_sge = 1 };
		struct ibv_recv_wr *bad = NULL;

		rc = ibv_post_recv(r0, &wr, &bad);
		REQUIRE(rc == EINVAL, "ibv_post_recv returned %d, want EINVAL", rc);
	}
	ok();

	begin("sends_consume_srq_in_order");
	post_srq(srq, 1, mr_dst, dst[1]);
	post_srq(srq, 2, mr_dst, dst[2]);
	post_srq(srq, 3, mr_dst, dst[3]);
	post_send(s1, 11, IBV_WR_SEND, mr_src, src, 8, 0, 0);
	expect_wc(scq, 11, IBV_WC_SUCCESS);
	expect_recv(rcq, 1, r1);
	post_send(s0, 10, IBV_WR_SEND, mr_src, src, 8, 0, 0);
	expect_wc(scq, 10, IBV_WC_SUCCESS);
	expect_recv(rcq, 2, r0);
	ok();

	begin("srq_limit_above_max_wr_einval");
	memset(&sa, 0, sizeof(sa));
	sa.srq_limit = sia.attr.max_wr + 1;
	rc = ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT);
	REQUIRE(rc == EINVAL, "ibv_modify_srq returned %d, want EINVAL", rc);
	ok();

	/* Receives 3 and 4 left once 4 is posted; armed at 2, the next take leaves 1: below. */
	begin("srq_limit_reached_event");
	post_srq(srq, 4, mr_dst, dst[4]);
	sa.srq_limit = 2;
	rc = ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT);
	REQUIRE(rc == 0, "ibv_modify_srq returned %d", rc);
	REQUIRE(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 2, "srq_limit %u", sa.srq_limit);
	post_send(s0, 12, IBV_WR_SEND, mr_src, src, 8, 0, 0);
	expect_wc(scq, 12, IBV_WC_SUCCESS);
	expect_recv(rcq, 3, r0);
	expect_event(ctx, IBV_EVENT_SRQ_LIMIT_REACHED, srq);
	REQUIRE(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 0,
		"srq_limit %u after the event, want 0", sa.srq_limit);
	ok();

	begin("err_qp_last_wqe_reached_srq_kept");
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_ERR;
	REQUIRE(ibv_modify_qp(r0, &qa, IBV_QP_STATE) == 0, "modify_qp ERR");
	expect_event(ctx, IBV_EVENT_QP_LAST_WQE_REACHED, r0);
	REQUIRE(ibv_poll_cq(rcq, 1, &wc) == 0, "a receive was flushed from the SRQ");
	post_send(s1, 13, IBV_WR_SEND, mr_src, src, 8, 0, 0);
	expect_wc(scq, 13, IBV_WC_SUCCESS);
	expect_recv(rcq, 4, r1);
	ok();

	begin("destroy_srq_busy");
	rc = ibv_destroy_srq(srq);
	REQUIRE(rc == EBUSY, "ibv_destroy_srq returned %d, want EBUSY", rc);
	REQUIRE(ibv_destroy_qp(r0) == 0 && ibv_destroy_qp(r1) == 0, "ibv_destroy_qp");
	rc = ibv_destroy_srq(srq);
	REQUIRE(rc == 0, "ibv_destroy_srq returned %d after its QPs", rc);
	ok();

	begin("teardown");
	REQUIRE(ibv_destroy_qp(s0) == 0 && ibv_destroy_qp(s1) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_dereg_mr(mr_src) == 0 && ibv_dereg_mr(mr_dst) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(ctx) == 0, "ibv_close_device");
	ok();
	return 0;
}
