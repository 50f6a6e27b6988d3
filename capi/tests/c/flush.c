/*
 * Moving a connected RC QP to ERR flushes its work: every outstanding receive completes with
 * IBV_WC_WR_FLUSH_ERR, in the order posted, and nothing more. Work posted to a QP already in
 * ERR is accepted and flushed too, as rxe does (drivers/infiniband/sw/rxe/rxe_verbs.c:
 * rxe_post_send_kernel ends with `if (unlikely(qp->req.state == QP_STATE_ERROR))
 * rxe_run_task(&qp->comp.task);`, rxe_post_recv with `if (qp->resp.state == QP_STATE_ERROR)
 * rxe_run_task(&qp->resp.task);`, and those tasks complete the WQEs with FLUSH_ERR).
 */
#include "common.h"

#define N_RECV 5

int main(void)
{
	static char buf[N_RECV + 2][64];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_mr *mr;
	struct loopback lb;
	struct ibv_qp_attr a;
	struct ibv_wc wc[N_RECV + 2];
	int rc, i, n, got;
	long deadline;

	alarm(25);
	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	cq_a = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	REQUIRE(cq_a != NULL && cq_b != NULL, "ibv_create_cq");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	loopback_connect(&lb, ctx, pd, cq_a, cq_b);

	begin("recvs_flushed_in_order");
	for (i = 0; i < N_RECV; i++)
		post_recv(lb.b, 100 + i, mr, buf[i], sizeof(buf[i]));
	REQUIRE(ibv_poll_cq(cq_b, N_RECV, wc) == 0, "completions before the QP left RTS");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	rc = ibv_modify_qp(lb.b, &a, IBV_QP_STATE);
	REQUIRE(rc == 0, "ibv_modify_qp(ERR) returned %d", rc);
	REQUIRE(qp_state(lb.b) == IBV_QPS_ERR, "ibv_query_qp state is not ERR");
	got = 0;
	deadline = now_ms() + 5000;
	while (got < N_RECV && now_ms() < deadline) {
		n = ibv_poll_cq(cq_b, N_RECV + 2 - got, wc + got);
		REQUIRE(n >= 0, "ibv_poll_cq returned %d", n);
		got += n;
		if (n == 0)
			usleep(500);
	}
	REQUIRE(got == N_RECV, "%d completions within 5 s, want %d", got, N_RECV);
	for (i = 0; i < N_RECV; i++)
		REQUIRE(wc[i].wr_id == (uint64_t)(100 + i) && wc[i].status == IBV_WC_WR_FLUSH_ERR &&
				wc[i].qp_num == lb.b->qp_num,
			"completion %d: wr_id %llu status %s qp_num %u", i,
			(unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status),
			wc[i].qp_num);
	usleep(100 * 1000);
	n = ibv_poll_cq(cq_b, N_RECV + 2, wc);
	REQUIRE(n == 0, "%d more completions after the %d flushed receives", n, N_RECV);
	ok();

	begin("send_after_err_flushed");
	post_send(lb.b, 200, IBV_WR_SEND, mr, buf[N_RECV], 8, 0, 0);
	expect_wc(cq_b, 200, IBV_WC_WR_FLUSH_ERR);
	ok();

	begin("recv_after_err_flushed");
	post_recv(lb.b, 300, mr, buf[N_RECV + 1], sizeof(buf[N_RECV + 1]));
	expect_wc(cq_b, 300, IBV_WC_WR_FLUSH_ERR);
	ok();

	begin("teardown");
	REQUIRE(ibv_destroy_qp(lb.a) == 0 && ibv_destroy_qp(lb.b) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	ok();
	return 0;
}
