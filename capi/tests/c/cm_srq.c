/*
 * librdmacm's SRQ of an id (rdma-core librdmacm/cma.c) and rdma_notify's refusals (Linux
 * drivers/infiniband/core/cm.c ib_cm_notify).
 *
 *  - rdma_create_srq(id, NULL, &attr) makes an SRQ on the id's device with the id's PD and
 *    keeps it as id->srq (rdma_create_srq_ex: `attr->pd = id->pd`, `id->srq = srq`); the
 *    granted limits are written back (at least what was asked, ibv_create_srq(3));
 *  - rdma_create_qp(id, NULL, &attr) with attr.srq NULL puts the QP on id->srq
 *    (rdma_create_qp_ex: `if (id->srq && !attr->srq) attr->srq = id->srq`) and writes it back
 *    to attr.srq (rdma_create_qp copies the attributes back);
 *  - ibv_post_recv on that QP is EINVAL (a QP on an SRQ has no receive queue: rxe_post_recv),
 *    ibv_post_srq_recv on id->srq is 0;
 *  - rdma_notify with IBV_EVENT_QP_FATAL is -1/EINVAL (ib_cm_notify: `default: ret = -EINVAL`),
 *    and IBV_EVENT_PATH_MIG on an id that is not connected too (cm_migrate: only
 *    ESTABLISHED);
 *  - rdma_destroy_qp, then rdma_destroy_srq leaves id->srq NULL;
 *  - rdma_destroy_ep destroys the endpoint's SRQ: the PD it was made on can be freed after
 *    (ibv_dealloc_pd would be EBUSY while the SRQ exists).
 */
#include "common.h"
#include <rdma/rdma_verbs.h>

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = NULL, *ep = NULL;
	struct ibv_srq_init_attr sa;
	struct ibv_qp_init_attr qa;
	struct rdma_addrinfo hints, *res = NULL;
	struct sockaddr_in sin;
	struct ibv_pd *pd;
	char buf[64];
	struct ibv_mr *mr;
	int rc;

	alarm(25);
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	sin = sockaddr_of(getenv("RNIC_ADDR"), 0);
	REQUIRE(rdma_bind_addr(id, (struct sockaddr *)&sin) == 0, "rdma_bind_addr");
	REQUIRE(id->verbs != NULL, "bound id has no verbs");

	begin("create_srq_on_id");
	memset(&sa, 0, sizeof(sa));
	sa.attr.max_wr = 8;
	sa.attr.max_sge = 1;
	rc = rdma_create_srq(id, NULL, &sa);
	REQUIRE(rc == 0, "rdma_create_srq returned %d", rc);
	REQUIRE(id->srq != NULL, "id->srq is NULL after rdma_create_srq");
	REQUIRE(id->srq->context == id->verbs, "the SRQ is not on the id's device");
	REQUIRE(id->pd != NULL && id->srq->pd == id->pd, "the SRQ's PD %p is not id->pd %p",
		(void *)id->srq->pd, (void *)id->pd);
	REQUIRE(sa.attr.max_wr >= 8 && sa.attr.max_sge >= 1, "granted max_wr %u max_sge %u",
		sa.attr.max_wr, sa.attr.max_sge);
	ok();

	begin("create_qp_uses_id_srq");
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 4;
	qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	rc = rdma_create_qp(id, NULL, &qa);
	REQUIRE(rc == 0, "rdma_create_qp returned %d", rc);
	REQUIRE(id->qp != NULL && id->qp->srq == id->srq, "id->qp->srq %p, id->srq %p",
		id->qp ? (void *)id->qp->srq : NULL, (void *)id->srq);
	REQUIRE(qa.srq == id->srq, "qp_init_attr.srq %p not written back as id->srq %p",
		(void *)qa.srq, (void *)id->srq);
	ok();

	begin("post_recv_on_srq_qp_einval");
	mr = ibv_reg_mr(id->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	{
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof(buf),
				       .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
		struct ibv_recv_wr *bad = NULL;

		rc = ibv_post_recv(id->qp, &wr, &bad);
		REQUIRE(rc == EINVAL, "ibv_post_recv on a QP with an SRQ returned %d", rc);
		REQUIRE(bad == &wr, "bad_wr does not name the refused WR");
		bad = NULL;
		rc = ibv_post_srq_recv(id->srq, &wr, &bad);
		REQUIRE(rc == 0, "ibv_post_srq_recv on id->srq returned %d", rc);
	}
	ok();

	begin("notify_other_event_einval");
	errno = 0;
	rc = rdma_notify(id, IBV_EVENT_QP_FATAL);
	REQUIRE(rc == -1 && errno == EINVAL, "rdma_notify(QP_FATAL) returned %d", rc);
	errno = 0;
	rc = rdma_notify(id, IBV_EVENT_PATH_MIG);
	REQUIRE(rc == -1 && errno == EINVAL, "rdma_notify(PATH_MIG) unconnected returned %d", rc);
	ok();

	begin("destroy_srq_clears_id_srq");
	rdma_destroy_qp(id);
	REQUIRE(id->qp == NULL, "id->qp after rdma_destroy_qp");
	rdma_destroy_srq(id);
	REQUIRE(id->srq == NULL, "id->srq is %p after rdma_destroy_srq", (void *)id->srq);
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	ok();

	begin("destroy_ep_destroys_srq");
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	rc = rdma_getaddrinfo(getenv("RNIC_ADDR"), "7471", &hints, &res);
	REQUIRE(rc == 0 && res != NULL, "rdma_getaddrinfo returned %d", rc);
	rc = rdma_create_ep(&ep, res, NULL, NULL);
	REQUIRE(rc == 0, "rdma_create_ep returned %d", rc);
	rdma_freeaddrinfo(res);
	pd = ibv_alloc_pd(ep->verbs);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	memset(&sa, 0, sizeof(sa));
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	REQUIRE(rdma_create_srq(ep, pd, &sa) == 0, "rdma_create_srq with a PD");
	REQUIRE(ep->srq != NULL && ep->srq->pd == pd, "the endpoint's SRQ is not on the PD");
	rc = ibv_dealloc_pd(pd);
	REQUIRE(rc == EBUSY, "ibv_dealloc_pd with the SRQ alive returned %d", rc);
	rdma_destroy_ep(ep);
	rc = ibv_dealloc_pd(pd);
	REQUIRE(rc == 0, "ibv_dealloc_pd after rdma_destroy_ep returned %d (SRQ left?)", rc);
	ok();

	begin("teardown");
	rdma_destroy_event_channel(ch);
	ok();
	return 0;
}
