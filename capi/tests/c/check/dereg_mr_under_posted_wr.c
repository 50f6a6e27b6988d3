/* Breaks dereg-mr-under-posted-wr: the MR of a posted receive is deregistered before the
 * receive completes. */
#include "check.h"

int main(void)
{
	static char buf[4096];
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	CHECK(mr && cq);
	struct ibv_qp *qp = qp_in_init(pd, cq, 4);
	post_recvs(qp, mr, 1);
	CHECK(ibv_dereg_mr(mr) == 0); /* after the receive's completion */
	to_err(qp);
	poll_n(cq, 1);
	CHECK(ibv_destroy_qp(qp) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	return 0;
}
