/*
 * A memory region is the application's own memory (ibv_reg_mr(3): the NIC reads and writes
 * the registered buffer itself): an RDMA WRITE from QP A lands in B's malloc'd buffer with no
 * further call on B's side, exactly on the addressed bytes; an RDMA READ returns what the
 * application stored into the remote buffer after it was registered.
 */
#include "common.h"

#define LEN 8192

static uint8_t pattern(int i)
{
	return (uint8_t)(i * 7 + 3);
}

int main(void)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_mr *mr_a, *mr_b;
	struct loopback lb;
	uint8_t *a_buf, *b_buf;
	int i;

	alarm(25);
	a_buf = malloc(LEN);
	b_buf = malloc(LEN);
	REQUIRE(a_buf != NULL && b_buf != NULL, "malloc");
	memset(a_buf, 0, LEN);
	memset(b_buf, 0xee, LEN);

	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	cq_a = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	REQUIRE(cq_a != NULL && cq_b != NULL, "ibv_create_cq");
	mr_a = ibv_reg_mr(pd, a_buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	mr_b = ibv_reg_mr(pd, b_buf, LEN,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				  IBV_ACCESS_REMOTE_READ);
	REQUIRE(mr_a != NULL && mr_b != NULL, "ibv_reg_mr");
	REQUIRE(mr_b->addr == b_buf && mr_b->length == LEN, "mr->addr/length are not the buffer");
	loopback_connect(&lb, ctx, pd, cq_a, cq_b);

	/* 3000 bytes (three 1024-byte packets) at an odd offset of B's buffer. */
	begin("rdma_write_lands_in_user_buffer");
	for (i = 0; i < 3000; i++)
		a_buf[i] = pattern(i);
	post_send(lb.a, 1, IBV_WR_RDMA_WRITE, mr_a, a_buf, 3000, (uintptr_t)(b_buf + 101),
		  mr_b->rkey);
	expect_wc(cq_a, 1, IBV_WC_SUCCESS);
	for (i = 0; i < 3000; i++)
		REQUIRE(b_buf[101 + i] == pattern(i), "byte %d of the write is %#x, want %#x", i,
			b_buf[101 + i], pattern(i));
	for (i = 0; i < 101; i++)
		REQUIRE(b_buf[i] == 0xee, "byte %d before the written range changed", i);
	for (i = 101 + 3000; i < LEN; i++)
		REQUIRE(b_buf[i] == 0xee, "byte %d after the written range changed", i);
	REQUIRE(ibv_poll_cq(cq_b, 1, &(struct ibv_wc){ 0 }) == 0,
		"an RDMA WRITE without immediate completed on the responder");
	ok();

	begin("rdma_read_sees_application_stores");
	for (i = 0; i < 2500; i++)
		b_buf[5000 + i] = (uint8_t)(0xff - pattern(i));
	memset(a_buf, 0, LEN);
	post_send(lb.a, 2, IBV_WR_RDMA_READ, mr_a, a_buf + 17, 2500, (uintptr_t)(b_buf + 5000),
		  mr_b->rkey);
	expect_wc(cq_a, 2, IBV_WC_SUCCESS);
	for (i = 0; i < 2500; i++)
		REQUIRE(a_buf[17 + i] == (uint8_t)(0xff - pattern(i)),
			"byte %d of the read is %#x, want %#x", i, a_buf[17 + i],
			(uint8_t)(0xff - pattern(i)));
	REQUIRE(a_buf[16] == 0 && a_buf[17 + 2500] == 0, "the read wrote outside its SGE");
	ok();

	/* The remote key checks still apply to user memory: a write beyond the region is a
	 * remote access error for the requester. */
	begin("rdma_write_outside_region_fails");
	post_send(lb.a, 3, IBV_WR_RDMA_WRITE, mr_a, a_buf, 64, (uintptr_t)(b_buf + LEN - 32),
		  mr_b->rkey);
	expect_wc(cq_a, 3, IBV_WC_REM_ACCESS_ERR);
	REQUIRE(b_buf[LEN - 1] == 0xee, "the failed write changed the buffer");
	ok();

	begin("teardown");
	REQUIRE(ibv_destroy_qp(lb.a) == 0 && ibv_destroy_qp(lb.b) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dereg_mr(mr_a) == 0 && ibv_dereg_mr(mr_b) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	free(a_buf);
	free(b_buf);
	ok();
	return 0;
}
