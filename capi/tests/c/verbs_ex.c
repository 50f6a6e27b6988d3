/*
 * The extended verbs (rdma-core 44 <infiniband/verbs.h>): the context is a struct verbs_context
 * (verbs_get_ctx finds it; its sz covers every slot), ibv_query_device_ex and the extended
 * ibv_query_port path, ibv_create_cq_ex with the ibv_start_poll API, ibv_create_qp_ex with the
 * ibv_wr_* API (ibv_qp_to_qp_ex), end to end between two loopback RC QPs; and the direct-verbs
 * probes of provider libraries (libefa's efadv_query_device, libmlx5's mlx5dv_is_supported)
 * answer "not my device" instead of crashing (libfabric's EFA provider calls the first on every
 * device).
 */
#include "common.h"
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>

/* Polls `cq` with the extended API until `n` completions (or 5 s): their wr_ids, statuses,
 * opcodes, byte_len (if asked), imm (if IBV_WC_WITH_IMM), wc_flags and qp_num. */
struct wc_ex {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, imm;
	unsigned int wc_flags;
};

static int poll_ex(struct ibv_cq_ex *cq, struct wc_ex *out, int n)
{
	struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
	long deadline = now_ms() + 5000;
	int got = 0;

	while (got < n) {
		int rc = ibv_start_poll(cq, &pa);

		if (rc == ENOENT) {
			REQUIRE(errno == ENOENT, "ibv_start_poll ENOENT without errno ENOENT");
			REQUIRE(now_ms() < deadline, "%d of %d completions within 5 s", got, n);
			usleep(100);
			continue;
		}
		REQUIRE(rc == 0, "ibv_start_poll returned %d", rc);
		do {
			struct wc_ex *w = &out[got++];

			w->wr_id = cq->wr_id;
			w->status = cq->status;
			w->opcode = ibv_wc_read_opcode(cq);
			w->wc_flags = ibv_wc_read_wc_flags(cq);
			w->byte_len = ibv_wc_read_byte_len(cq);
			w->qp_num = ibv_wc_read_qp_num(cq);
			w->imm = (w->wc_flags & IBV_WC_WITH_IMM) ? ntohl(ibv_wc_read_imm_data(cq)) : 0;
			rc = got < n ? ibv_next_poll(cq) : ENOENT;
		} while (rc == 0);
		REQUIRE(rc == ENOENT, "ibv_next_poll returned %d", rc);
		ibv_end_poll(cq);
	}
	return got;
}

static struct ibv_cq_ex *create_cq_ex(struct ibv_context *ctx)
{
	struct ibv_cq_init_attr_ex a;
	struct ibv_cq_ex *cq;

	memset(&a, 0, sizeof(a));
	a.cqe = 32;
	a.wc_flags = IBV_WC_STANDARD_FLAGS;
	cq = ibv_create_cq_ex(ctx, &a);
	REQUIRE(cq != NULL, "ibv_create_cq_ex");
	return cq;
}

static struct ibv_qp *create_qp_ex(struct ibv_context *ctx, struct ibv_pd *pd,
				   struct ibv_cq_ex *cq, uint64_t ops)
{
	struct ibv_qp_init_attr_ex a;
	struct ibv_qp *qp;

	memset(&a, 0, sizeof(a));
	a.send_cq = ibv_cq_ex_to_cq(cq);
	a.recv_cq = ibv_cq_ex_to_cq(cq);
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = 16;
	a.cap.max_recv_wr = 16;
	a.cap.max_send_sge = 2;
	a.cap.max_recv_sge = 2;
	a.cap.max_inline_data = 64;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = pd;
	a.send_ops_flags = ops;
	qp = ibv_create_qp_ex(ctx, &a);
	REQUIRE(qp != NULL, "ibv_create_qp_ex");
	return qp;
}

int main(void)
{
	static char src[256], dst[256], rd[64];
	struct ibv_context *ctx;
	struct verbs_context *vctx;
	struct ibv_device_attr da;
	struct ibv_device_attr_ex dax;
	struct ibv_port_attr pa;
	struct ibv_pd *pd;
	struct ibv_mr *mr_src, *mr_dst, *mr_rd;
	struct ibv_cq_ex *cq_a, *cq_b;
	struct ibv_qp *a, *b, *plain;
	struct ibv_qp_ex *qa;
	struct ibv_cq *cq_plain;
	union ibv_gid gid;
	struct wc_ex wc[4];
	struct ibv_sge two[2];
	struct ibv_data_buf bufs[2];
	char big[128];
	int rc;
	const uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			     IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;

	alarm(25);
	ctx = open_first_device();

	begin("verbs_context");
	vctx = verbs_get_ctx(ctx);
	REQUIRE(vctx != NULL, "verbs_get_ctx: abi_compat is not __VERBS_ABI_IS_EXTENDED");
	REQUIRE(&vctx->context == ctx, "container_of");
	REQUIRE(vctx->sz >= sizeof(*vctx), "sz %zu < %zu", vctx->sz, sizeof(*vctx));
	REQUIRE(verbs_get_ctx_op(ctx, query_device_ex) && verbs_get_ctx_op(ctx, create_cq_ex) &&
			verbs_get_ctx_op(ctx, create_qp_ex) && verbs_get_ctx_op(ctx, query_port),
		"a slot is missing");
	REQUIRE(strcmp(vctx->context.device->name, ibv_get_device_name(ctx->device)) == 0,
		"context.device");
	ok();

	begin("query_device_ex");
	REQUIRE(ibv_query_device(ctx, &da) == 0, "ibv_query_device");
	memset(&dax, 0xab, sizeof(dax));
	rc = ibv_query_device_ex(ctx, NULL, &dax);
	REQUIRE(rc == 0, "ibv_query_device_ex returned %d", rc);
	REQUIRE(memcmp(&dax.orig_attr, &da, sizeof(da)) == 0, "orig_attr differs from ibv_query_device");
	REQUIRE(dax.phys_port_cnt_ex == 1 && dax.comp_mask == 0 && dax.odp_caps.general_caps == 0 &&
			dax.device_cap_flags_ex == da.device_cap_flags,
		"phys_port_cnt_ex %u comp_mask %u", dax.phys_port_cnt_ex, dax.comp_mask);
	{
		struct ibv_query_device_ex_input in = { .comp_mask = 1 };

		rc = ibv_query_device_ex(ctx, &in, &dax);
		REQUIRE(rc == EINVAL, "input comp_mask 1 returned %d", rc);
	}
	ok();

	begin("query_port_extended");
	memset(&pa, 0xab, sizeof(pa));
	rc = ibv_query_port(ctx, 1, &pa);
	REQUIRE(rc == 0, "ibv_query_port returned %d", rc);
	REQUIRE(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
			pa.port_cap_flags2 == 0 && pa.flags == 0 && pa.gid_tbl_len >= 1,
		"state %d link_layer %d cap_flags2 %#x flags %#x", pa.state, pa.link_layer,
		pa.port_cap_flags2, pa.flags);
	rc = ibv_query_port(ctx, 2, &pa);
	REQUIRE(rc == EINVAL, "port 2 returned %d", rc);
	ok();

	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");

	begin("create_cq_ex_unsupported_flags");
	{
		struct ibv_cq_init_attr_ex ca;

		memset(&ca, 0, sizeof(ca));
		ca.cqe = 4;
		ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
		errno = 0;
		REQUIRE(ibv_create_cq_ex(ctx, &ca) == NULL && errno == EOPNOTSUPP,
			"a timestamp CQ was made (rxe refuses it)");
	}
	cq_a = create_cq_ex(ctx);
	cq_b = create_cq_ex(ctx);
	REQUIRE(cq_a->read_byte_len && cq_a->read_qp_num && cq_a->read_imm_data &&
			!cq_a->read_completion_ts,
		"readers: byte_len %p completion_ts %p", (void *)cq_a->read_byte_len,
		(void *)cq_a->read_completion_ts);
	ok();

	begin("create_qp_ex_unsupported_ops");
	{
		struct ibv_qp_init_attr_ex qa_attr;

		memset(&qa_attr, 0, sizeof(qa_attr));
		qa_attr.send_cq = qa_attr.recv_cq = ibv_cq_ex_to_cq(cq_a);
		qa_attr.qp_type = IBV_QPT_RC;
		qa_attr.cap.max_send_wr = qa_attr.cap.max_recv_wr = 4;
		qa_attr.cap.max_send_sge = qa_attr.cap.max_recv_sge = 1;
		qa_attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		qa_attr.pd = pd;
		qa_attr.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_LOCAL_INV;
		errno = 0;
		REQUIRE(ibv_create_qp_ex(ctx, &qa_attr) == NULL && errno == EOPNOTSUPP,
			"a QP with LOCAL_INV was made");
	}
	ok();

	begin("qp_to_qp_ex");
	cq_plain = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	REQUIRE(cq_plain != NULL, "ibv_create_cq");
	plain = create_rc_qp(pd, cq_plain, cq_plain);
	REQUIRE(ibv_qp_to_qp_ex(plain) == NULL, "ibv_qp_to_qp_ex of an ibv_create_qp QP");
	a = create_qp_ex(ctx, pd, cq_a, ops);
	b = create_qp_ex(ctx, pd, cq_b, ops);
	qa = ibv_qp_to_qp_ex(a);
	REQUIRE(qa != NULL && &qa->qp_base == a, "ibv_qp_to_qp_ex");
	REQUIRE(qa->wr_send && qa->wr_rdma_write && !qa->wr_atomic_cmp_swp && qa->wr_set_sge &&
			qa->wr_complete,
		"builders not as asked");
	ok();

	mr_src = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	mr_dst = ibv_reg_mr(pd, dst, sizeof(dst),
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	mr_rd = ibv_reg_mr(pd, rd, sizeof(rd), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr_src && mr_dst && mr_rd, "ibv_reg_mr");
	REQUIRE(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	connect_rc_qp(a, b->qp_num, &gid);
	connect_rc_qp(b, a->qp_num, &gid);

	begin("wr_send_and_poll_ex");
	post_recv(b, 100, mr_dst, dst, 128);
	post_recv(b, 101, mr_dst, dst + 128, 128);
	strcpy(src, "extended hello");
	ibv_wr_start(qa);
	qa->wr_id = 1;
	qa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qa);
	ibv_wr_set_sge(qa, mr_src->lkey, (uintptr_t)src, 15);
	qa->wr_id = 2;
	ibv_wr_send_imm(qa, htonl(0xdeadbeef));
	strcpy(big, "inline!");
	ibv_wr_set_inline_data(qa, big, 8);
	memset(big, 'x', sizeof(big)); /* the data was copied by the setter */
	rc = ibv_wr_complete(qa);
	REQUIRE(rc == 0, "ibv_wr_complete returned %d", rc);
	REQUIRE(poll_ex(cq_a, wc, 2) == 2, "send completions");
	REQUIRE(wc[0].wr_id == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_SEND &&
			wc[1].wr_id == 2 && wc[1].status == IBV_WC_SUCCESS &&
			wc[1].opcode == IBV_WC_SEND && wc[0].qp_num == a->qp_num,
		"send wcs %llu/%d/%d %llu/%d/%d", (unsigned long long)wc[0].wr_id, wc[0].status,
		wc[0].opcode, (unsigned long long)wc[1].wr_id, wc[1].status, wc[1].opcode);
	REQUIRE(poll_ex(cq_b, wc, 2) == 2, "receive completions");
	REQUIRE(wc[0].wr_id == 100 && wc[0].opcode == IBV_WC_RECV && wc[0].byte_len == 15 &&
			!(wc[0].wc_flags & IBV_WC_WITH_IMM) && wc[0].qp_num == b->qp_num,
		"first recv wr_id %llu opcode %d len %u flags %#x", (unsigned long long)wc[0].wr_id,
		wc[0].opcode, wc[0].byte_len, wc[0].wc_flags);
	REQUIRE(wc[1].wr_id == 101 && wc[1].byte_len == 8 && (wc[1].wc_flags & IBV_WC_WITH_IMM) &&
			wc[1].imm == 0xdeadbeef,
		"second recv wr_id %llu len %u flags %#x imm %#x", (unsigned long long)wc[1].wr_id,
		wc[1].byte_len, wc[1].wc_flags, wc[1].imm);
	REQUIRE(strcmp(dst, "extended hello") == 0 && strcmp(dst + 128, "inline!") == 0,
		"received '%s' and '%s'", dst, dst + 128);
	ok();

	begin("wr_rdma_write_sge_list_and_read");
	memset(dst, 0, sizeof(dst));
	memcpy(src, "0123456789", 10);
	memcpy(src + 100, "abcdef", 6);
	two[0] = (struct ibv_sge){ .addr = (uintptr_t)src, .length = 10, .lkey = mr_src->lkey };
	two[1] = (struct ibv_sge){ .addr = (uintptr_t)(src + 100), .length = 6, .lkey = mr_src->lkey };
	ibv_wr_start(qa);
	qa->wr_id = 3;
	qa->wr_flags = 0; /* unsignaled */
	ibv_wr_rdma_write(qa, mr_dst->rkey, (uintptr_t)dst + 8);
	ibv_wr_set_sge_list(qa, 2, two);
	qa->wr_id = 4;
	qa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(qa, mr_dst->rkey, (uintptr_t)dst + 8);
	ibv_wr_set_sge(qa, mr_rd->lkey, (uintptr_t)rd, 16);
	rc = ibv_wr_complete(qa);
	REQUIRE(rc == 0, "ibv_wr_complete returned %d", rc);
	REQUIRE(poll_ex(cq_a, wc, 1) == 1, "read completion");
	REQUIRE(wc[0].wr_id == 4 && wc[0].status == IBV_WC_SUCCESS &&
			wc[0].opcode == IBV_WC_RDMA_READ && wc[0].byte_len == 16,
		"wc wr_id %llu status %d opcode %d len %u", (unsigned long long)wc[0].wr_id,
		wc[0].status, wc[0].opcode, wc[0].byte_len);
	REQUIRE(memcmp(dst + 8, "0123456789abcdef", 16) == 0 && dst[7] == 0 && dst[24] == 0,
		"written '%.16s'", dst + 8);
	REQUIRE(memcmp(rd, "0123456789abcdef", 16) == 0, "read back '%.16s'", rd);
	ok();

	begin("wr_inline_too_long_enospc");
	memset(big, 'y', sizeof(big));
	ibv_wr_start(qa);
	qa->wr_id = 5;
	qa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qa, mr_dst->rkey, (uintptr_t)dst);
	ibv_wr_set_inline_data(qa, big, sizeof(big)); /* 128 > max_inline_data 64 */
	rc = ibv_wr_complete(qa);
	REQUIRE(rc == ENOSPC, "ibv_wr_complete returned %d, want ENOSPC", rc);
	ok();

	begin("wr_abort_posts_nothing");
	ibv_wr_start(qa);
	qa->wr_id = 6;
	ibv_wr_rdma_write(qa, mr_dst->rkey, (uintptr_t)dst);
	ibv_wr_set_sge(qa, mr_src->lkey, (uintptr_t)src, 4);
	ibv_wr_abort(qa);
	/* A signaled inline-list WRITE after it: the only completion that may come. */
	bufs[0] = (struct ibv_data_buf){ .addr = "ab", .length = 2 };
	bufs[1] = (struct ibv_data_buf){ .addr = "cd", .length = 2 };
	ibv_wr_start(qa);
	qa->wr_id = 7;
	ibv_wr_rdma_write(qa, mr_dst->rkey, (uintptr_t)dst + 200);
	ibv_wr_set_inline_data_list(qa, 2, bufs);
	REQUIRE(ibv_wr_complete(qa) == 0, "ibv_wr_complete");
	REQUIRE(poll_ex(cq_a, wc, 1) == 1 && wc[0].wr_id == 7 && wc[0].status == IBV_WC_SUCCESS,
		"completion wr_id %llu status %d", (unsigned long long)wc[0].wr_id, wc[0].status);
	REQUIRE(memcmp(dst + 200, "abcd", 4) == 0, "inline list wrote '%.4s'", dst + 200);
	REQUIRE(ibv_start_poll(cq_a, &(struct ibv_poll_cq_attr){ 0 }) == ENOENT,
		"a completion of the aborted WR");
	ok();

	begin("poll_cq_on_cq_ex");
	post_recv(b, 102, mr_dst, dst, 16);
	post_send(a, 8, IBV_WR_SEND, mr_src, src, 4, 0, 0);
	expect_wc(ibv_cq_ex_to_cq(cq_a), 8, IBV_WC_SUCCESS);
	expect_wc(ibv_cq_ex_to_cq(cq_b), 102, IBV_WC_SUCCESS);
	ok();

	begin("provider_probes");
	{
		void *efa = dlopen("libefa.so.1", RTLD_NOW);
		void *mlx5 = dlopen("libmlx5.so.1", RTLD_NOW);
		int (*efadv_query_device)(struct ibv_context *, void *, uint32_t);
		bool (*mlx5dv_is_supported)(struct ibv_device *);
		uint64_t attr[8];

		REQUIRE(efa && mlx5, "dlopen libefa/libmlx5 (ibverbs-providers): %s", dlerror());
		efadv_query_device = (int (*)(struct ibv_context *, void *, uint32_t))dlsym(
			efa, "efadv_query_device");
		mlx5dv_is_supported = (bool (*)(struct ibv_device *))dlsym(mlx5, "mlx5dv_is_supported");
		REQUIRE(efadv_query_device && mlx5dv_is_supported, "dlsym");
		rc = efadv_query_device(ctx, attr, sizeof(attr));
		REQUIRE(rc == EOPNOTSUPP, "efadv_query_device returned %d", rc);
		REQUIRE(!mlx5dv_is_supported(ctx->device), "mlx5dv_is_supported");
	}
	ok();

	begin("teardown");
	REQUIRE(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_qp(plain) == 0,
		"ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(ibv_cq_ex_to_cq(cq_a)) == 0 &&
			ibv_destroy_cq(ibv_cq_ex_to_cq(cq_b)) == 0 && ibv_destroy_cq(cq_plain) == 0,
		"ibv_destroy_cq");
	REQUIRE(ibv_dereg_mr(mr_src) == 0 && ibv_dereg_mr(mr_dst) == 0 && ibv_dereg_mr(mr_rd) == 0,
		"ibv_dereg_mr");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(ctx) == 0, "ibv_close_device");
	ok();
	return 0;
}
