/*
 * The device, its port and GID, and the error returns of the verbs that real programs rarely
 * get wrong enough to exercise: libibverbs returns int verbs' errors as the errno value,
 * objects as NULL + errno, ibv_query_gid as -1 + errno.
 */
#include "common.h"

int main(void)
{
	const char *want_name = getenv("RNIC_DEVICE") ? getenv("RNIC_DEVICE") : "rnic0";
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	struct in_addr ip;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_attr qa;
	static char buf[4096];
	int n = -1, rc, i;

	alarm(25);

	begin("device_list");
	list = ibv_get_device_list(&n);
	REQUIRE(list != NULL, "ibv_get_device_list returned NULL");
	REQUIRE(n == 1 && list[0] != NULL && list[1] == NULL, "%d devices", n);
	REQUIRE(strcmp(ibv_get_device_name(list[0]), want_name) == 0, "device name %s, want %s",
		ibv_get_device_name(list[0]), want_name);
	ctx = ibv_open_device(list[0]);
	REQUIRE(ctx != NULL, "ibv_open_device");
	ibv_free_device_list(list);
	ok();

	begin("query_port");
	memset(&pa, 0, sizeof(pa));
	rc = ibv_query_port(ctx, 1, &pa);
	REQUIRE(rc == 0, "ibv_query_port returned %d", rc);
	REQUIRE(pa.state == IBV_PORT_ACTIVE, "state %s", ibv_port_state_str(pa.state));
	REQUIRE(pa.link_layer == IBV_LINK_LAYER_ETHERNET, "link layer %u", pa.link_layer);
	ok();

	begin("query_gid");
	rc = ibv_query_gid(ctx, 1, 0, &gid);
	REQUIRE(rc == 0, "ibv_query_gid(1, 0) returned %d", rc);
	REQUIRE(inet_pton(AF_INET, getenv("RNIC_ADDR"), &ip) == 1, "RNIC_ADDR");
	for (i = 0; i < 10; i++)
		REQUIRE(gid.raw[i] == 0, "gid byte %d is %#x, want 0 (IPv4-mapped)", i, gid.raw[i]);
	REQUIRE(gid.raw[10] == 0xff && gid.raw[11] == 0xff, "gid bytes 10-11 are not ff ff");
	REQUIRE(memcmp(&gid.raw[12], &ip, 4) == 0, "gid bytes 12-15 are not RNIC_ADDR");
	ok();

	/* rdma-core libibverbs/verbs.c ibv_query_gid: `if (ret) return -1;` with errno from the
	 * kernel, whose rdma_get_gid_attr (drivers/infiniband/core/cache.c) says
	 * `if (index < 0 || index >= table->sz) return ERR_PTR(-EINVAL);` (an index inside the
	 * table but empty would instead return 0 and a zero GID: ENODATA is mapped to that). */
	begin("query_gid_bad_index");
	REQUIRE(pa.gid_tbl_len <= 5, "gid_tbl_len %d: index 5 would be inside the table",
		pa.gid_tbl_len);
	errno = 0;
	rc = ibv_query_gid(ctx, 1, 5, &gid);
	REQUIRE(rc == -1 && errno == EINVAL, "ibv_query_gid(1, 5) returned %d", rc);
	ok();

	/* Kernel uverbs: destroying a PD whose usecnt is not 0 fails with EBUSY
	 * (ib_destroy_usecnt); libibverbs returns the errno value. */
	begin("dealloc_pd_busy");
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	rc = ibv_dealloc_pd(pd);
	REQUIRE(rc == EBUSY, "ibv_dealloc_pd of a PD with an MR returned %d, want EBUSY", rc);
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	rc = ibv_dealloc_pd(pd);
	REQUIRE(rc == 0, "ibv_dealloc_pd after ibv_dereg_mr returned %d", rc);
	ok();

	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");

	/* include/rdma/ib_verbs.h ib_check_mr_access: `if (flags & ~IB_ACCESS_SUPPORTED) return
	 * -EINVAL;` where IB_ACCESS_SUPPORTED includes the optional range (bits 20-29); libibverbs
	 * passes the optional bits through (ibv_reg_mr_iova2) when the kernel supports them and
	 * strips them otherwise: either way RELAXED_ORDERING is accepted. */
	begin("reg_mr_unknown_access_bit");
	errno = 0;
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | (1 << 15));
	REQUIRE(mr == NULL && errno == EINVAL, "ibv_reg_mr with access bit 15 gave %p", (void *)mr);
	ok();

	begin("reg_mr_relaxed_ordering");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	REQUIRE(mr != NULL, "ibv_reg_mr with IBV_ACCESS_RELAXED_ORDERING failed");
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	ok();

	/* ib_check_mr_access: "Local write permission is required if remote write or remote
	 * atomic permission is also requested" -> -EINVAL. */
	begin("reg_mr_remote_write_needs_local_write");
	errno = 0;
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE);
	REQUIRE(mr == NULL && errno == EINVAL, "ibv_reg_mr REMOTE_WRITE alone gave %p",
		(void *)mr);
	ok();

	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	REQUIRE(cq != NULL, "ibv_create_cq");
	qp = create_rc_qp(pd, cq, cq);

	/* drivers/infiniband/core/verbs.c: qp_state_table[IB_QPS_RESET] has no IB_QPS_RTS
	 * entry, so ib_modify_qp_is_ok() is false and the modify fails with -EINVAL. */
	begin("modify_qp_reset_to_rts");
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTS;
	rc = ibv_modify_qp(qp, &qa, IBV_QP_STATE);
	REQUIRE(rc == EINVAL, "RESET->RTS returned %d, want EINVAL", rc);
	REQUIRE(qp_state(qp) == IBV_QPS_RESET, "the QP left RESET");
	ok();

	/* rxe (drivers/infiniband/sw/rxe/rxe_verbs.c rxe_post_send): a QP below RTS gives
	 * `*bad_wr = wr; return -EINVAL;`; so does rdma-core's hns provider (check_qp_send). */
	begin("post_send_in_reset");
	{
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = 0 };
		struct ibv_send_wr wr2, wr;
		struct ibv_send_wr *bad = NULL;

		mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		REQUIRE(mr != NULL, "ibv_reg_mr");
		sge.lkey = mr->lkey;
		memset(&wr2, 0, sizeof(wr2));
		wr2.wr_id = 2;
		wr2.sg_list = &sge;
		wr2.num_sge = 1;
		wr2.opcode = IBV_WR_SEND;
		wr = wr2;
		wr.wr_id = 1;
		wr.next = &wr2;
		rc = ibv_post_send(qp, &wr, &bad);
		REQUIRE(rc == EINVAL, "ibv_post_send on a RESET QP returned %d, want EINVAL", rc);
		REQUIRE(bad == &wr, "*bad_wr is %p, want the first WR %p", (void *)bad, (void *)&wr);
		REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	}
	ok();

	begin("teardown");
	REQUIRE(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(ctx) == 0, "ibv_close_device");
	ok();
	return 0;
}
