/*
 * Memory a registration names, and the lists a post reads, under a buggy program (issue 25).
 * What Linux + rdma-core do, and what the library must do instead of crashing:
 *
 * - ibv_reg_mr pins the range (kernel ib_umem_get -> pin_user_pages_fast, FOLL_WRITE when the
 *   access is writable: ib_access_writable = LOCAL_WRITE|REMOTE_WRITE|REMOTE_ATOMIC|MW_BIND).
 *   mm/gup.c check_vma_flags refuses a write pin of a mapping without VM_WRITE and any pin of
 *   one without VM_READ, and an unmapped page has no VMA: -EFAULT, which ibv_reg_mr returns as
 *   NULL with errno EFAULT. A read-only registration of a PROT_READ mapping succeeds.
 * - On rdma-core the pinned pages survive munmap (the NIC keeps writing to them, invisibly).
 *   The library cannot pin; a WRITE or READ aimed at memory unmapped (or made read-only)
 *   after registration is a remote access error for the requester (REM_ACCESS_ERR) — never a
 *   SIGSEGV in the progress thread (docs/capi.md, "Memory unmapped after registration").
 * - ibv_post_send/ibv_post_recv with num_sge above the QP's max_sge: EINVAL (rxe's
 *   validate_send_wr / post_one_recv) with *bad_wr the WR, and the SGE list not read beyond
 *   (here num_sge = 2^30 over a one-entry list); inline data longer than max_inline_data:
 *   EINVAL; a list longer than the queue (here a cycle): the queue fills, then ENOMEM (rxe's
 *   full queue), and the call returns.
 */
#include "common.h"
#include <sys/mman.h>

#define PAGE 4096

static void *map(int prot)
{
	void *p = mmap(NULL, 2 * PAGE, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	REQUIRE(p != MAP_FAILED, "mmap");
	return p;
}

static void expect_reg_efault(struct ibv_pd *pd, void *addr, int access, const char *what)
{
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr(pd, addr, PAGE, access);
	REQUIRE(mr == NULL && errno == EFAULT, "ibv_reg_mr of %s gave %p, errno %d, want NULL/EFAULT",
		what, (void *)mr, errno);
}

int main(void)
{
	const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_mr *mr, *mr_a;
	struct loopback lb, lb2;
	struct ibv_send_wr swr, *bad_s;
	struct ibv_recv_wr rwr, *bad_r;
	struct ibv_sge sge;
	uint8_t *ro, *none, *gone, *victim, *a_buf;
	int rc;

	alarm(25);
	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");

	begin("reg_mr_remote_write_on_prot_read_is_efault");
	ro = map(PROT_READ);
	expect_reg_efault(pd, ro, remote, "a PROT_READ mapping with REMOTE_WRITE");
	expect_reg_efault(pd, ro, IBV_ACCESS_LOCAL_WRITE, "a PROT_READ mapping with LOCAL_WRITE");
	ok();

	begin("reg_mr_read_only_on_prot_read_succeeds");
	mr = ibv_reg_mr(pd, ro, PAGE, IBV_ACCESS_REMOTE_READ);
	REQUIRE(mr != NULL, "ibv_reg_mr of a PROT_READ mapping for REMOTE_READ");
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	ok();

	begin("reg_mr_on_prot_none_is_efault");
	none = map(PROT_NONE);
	expect_reg_efault(pd, none, IBV_ACCESS_REMOTE_READ, "a PROT_NONE mapping");
	expect_reg_efault(pd, none, 0, "a PROT_NONE mapping, no access");
	ok();

	begin("reg_mr_on_unmapped_memory_is_efault");
	gone = map(PROT_READ | PROT_WRITE);
	REQUIRE(munmap(gone, 2 * PAGE) == 0, "munmap");
	expect_reg_efault(pd, gone, remote, "unmapped memory");
	/* A range that starts mapped and runs into a hole. */
	gone = map(PROT_READ | PROT_WRITE);
	REQUIRE(munmap(gone + PAGE, PAGE) == 0, "munmap");
	errno = 0;
	mr = ibv_reg_mr(pd, gone, 2 * PAGE, remote);
	REQUIRE(mr == NULL && errno == EFAULT, "a range running into a hole: %p errno %d",
		(void *)mr, errno);
	ok();

	cq_a = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	REQUIRE(cq_a != NULL && cq_b != NULL, "ibv_create_cq");
	a_buf = malloc(PAGE);
	REQUIRE(a_buf != NULL, "malloc");
	memset(a_buf, 0x11, PAGE);
	mr_a = ibv_reg_mr(pd, a_buf, PAGE, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr_a != NULL, "ibv_reg_mr");

	begin("remote_write_into_memory_unmapped_after_registration_is_rem_access_err");
	victim = map(PROT_READ | PROT_WRITE);
	mr = ibv_reg_mr(pd, victim, 2 * PAGE, remote);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	loopback_connect(&lb, ctx, pd, cq_a, cq_b);
	REQUIRE(munmap(victim, 2 * PAGE) == 0, "munmap");
	post_send(lb.a, 1, IBV_WR_RDMA_WRITE, mr_a, a_buf, 3000, (uintptr_t)victim + 100,
		  mr->rkey);
	expect_wc(cq_a, 1, IBV_WC_REM_ACCESS_ERR);
	ok();

	begin("remote_read_of_memory_unmapped_after_registration_is_rem_access_err");
	loopback_connect(&lb2, ctx, pd, cq_a, cq_b);
	post_send(lb2.a, 2, IBV_WR_RDMA_READ, mr_a, a_buf, 2000, (uintptr_t)victim, mr->rkey);
	expect_wc(cq_a, 2, IBV_WC_REM_ACCESS_ERR);
	REQUIRE(a_buf[0] == 0x11 && a_buf[1999] == 0x11, "the failed READ wrote the buffer");
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr of the unmapped region");
	ok();

	begin("remote_write_into_memory_made_read_only_is_rem_access_err");
	victim = map(PROT_READ | PROT_WRITE);
	mr = ibv_reg_mr(pd, victim, 2 * PAGE, remote);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	REQUIRE(mprotect(victim, 2 * PAGE, PROT_READ) == 0, "mprotect");
	REQUIRE(ibv_destroy_qp(lb2.a) == 0 && ibv_destroy_qp(lb2.b) == 0, "ibv_destroy_qp");
	loopback_connect(&lb2, ctx, pd, cq_a, cq_b);
	post_send(lb2.a, 3, IBV_WR_RDMA_WRITE, mr_a, a_buf, 64, (uintptr_t)victim, mr->rkey);
	expect_wc(cq_a, 3, IBV_WC_REM_ACCESS_ERR);
	REQUIRE(victim[0] == 0, "the write landed in a read-only page");
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	ok();

	begin("post_send_num_sge_2_30_is_einval_unread");
	REQUIRE(ibv_destroy_qp(lb2.a) == 0 && ibv_destroy_qp(lb2.b) == 0, "ibv_destroy_qp");
	loopback_connect(&lb2, ctx, pd, cq_a, cq_b);
	memset(&swr, 0, sizeof(swr));
	sge.addr = (uintptr_t)a_buf;
	sge.length = 8;
	sge.lkey = mr_a->lkey;
	swr.wr_id = 4;
	swr.sg_list = &sge;
	swr.num_sge = 1 << 30;
	swr.opcode = IBV_WR_SEND;
	bad_s = NULL;
	rc = ibv_post_send(lb2.a, &swr, &bad_s);
	REQUIRE(rc == EINVAL && bad_s == &swr, "ibv_post_send returned %d, bad_wr %p", rc,
		(void *)bad_s);
	ok();

	begin("post_recv_num_sge_2_30_is_einval_unread");
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 5;
	rwr.sg_list = &sge;
	rwr.num_sge = 1 << 30;
	bad_r = NULL;
	rc = ibv_post_recv(lb2.b, &rwr, &bad_r);
	REQUIRE(rc == EINVAL && bad_r == &rwr, "ibv_post_recv returned %d, bad_wr %p", rc,
		(void *)bad_r);
	ok();

	begin("inline_longer_than_max_inline_is_einval");
	swr.num_sge = 1;
	swr.send_flags = IBV_SEND_INLINE;
	sge.length = 1 << 20;
	bad_s = NULL;
	rc = ibv_post_send(lb2.a, &swr, &bad_s);
	REQUIRE(rc == EINVAL && bad_s == &swr, "ibv_post_send returned %d", rc);
	ok();

	begin("a_cyclic_recv_list_fills_the_queue_then_enomem");
	sge.length = 8;
	rwr.num_sge = 1;
	rwr.next = &rwr;
	bad_r = NULL;
	rc = ibv_post_recv(lb2.b, &rwr, &bad_r);
	REQUIRE(rc == ENOMEM && bad_r == &rwr, "ibv_post_recv of a cycle returned %d", rc);
	ok();

	begin("alive_after_all");
	REQUIRE(ibv_destroy_qp(lb.a) == 0 && ibv_destroy_qp(lb.b) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_qp(lb2.a) == 0 && ibv_destroy_qp(lb2.b) == 0, "ibv_destroy_qp");
	ok();
	return 0;
}
