/* Breaks no rule: every object destroyed in order, every event acked, every WR polled. */
#include "check.h"

int main(void)
{
	static char buf[4096];
	/* rdma_cm: an id with a QP, torn down as rdma_destroy_id(3) asks. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id = resolved_id(ch, &ev);
	CHECK(rdma_ack_cm_event(ev) == 0);
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 4, .max_recv_wr = 4,
					       .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(rdma_create_qp(id, NULL, &a) == 0);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);

	/* verbs: receives flushed and polled before the MR goes. */
	struct ibv_context *ctx = open_first();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	CHECK(cq);
	struct ibv_qp *qp = qp_in_init(pd, cq, 4);
	post_recvs(qp, mr, 4);
	to_err(qp);
	poll_n(cq, 4);
	CHECK(ibv_destroy_qp(qp) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	return 0;
}
