/* Breaks destroy-id-with-qp: rdma_destroy_id while its QP exists (the QP is destroyed after,
 * so nothing leaks). */
#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id = resolved_id(ch, &ev);
	CHECK(rdma_ack_cm_event(ev) == 0);
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	CHECK(pd && cq);
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 4, .max_recv_wr = 4,
					       .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(rdma_create_qp(id, pd, &a) == 0);
	struct ibv_qp *qp = id->qp;
	CHECK(rdma_destroy_id(id) == 0); /* the QP first: rdma_destroy_qp(id) */
	CHECK(ibv_destroy_qp(qp) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}
