/*
 * The rest of libibverbs's and librdmacm's public calls, which librnic.so exports so that no
 * call reaches the real libraries with its objects (docs/capi.md, "Exports"):
 * - the answers it has, as rdma-core 44 computes them: the rate conversions (verbs.c tables),
 *   ibv_get_pkey_index of the one P_Key, ibv_query_gid_ex/ibv_query_gid_table of the one RoCE
 *   v2 GID (the same GID as ibv_query_gid), ibv_is_fork_initialized (nothing pinned:
 *   UNNEEDED), the ibv_copy_*_from_kern copies;
 * - clean errors for what it lacks, as libibverbs's dummy ops give them for a provider without
 *   the op: ibv_import_pd NULL/EOPNOTSUPP, ibv_rereg_mr IBV_REREG_MR_ERR_INPUT/EOPNOTSUPP (and
 *   EINVAL for bad flags, checked first), ibv_query_ece EOPNOTSUPP; rdma_set_local_ece
 *   -1/EOPNOTSUPP after librdmacm's EINVAL checks; rdma_get_remote_ece reads no ECE.
 */
#include "common.h"
#include <rdma/ib_user_verbs.h>

/* <infiniband/marshall.h> (not installed by Debian's libibverbs-dev; exported by
 * libibverbs.so.1 as IBVERBS_1.0). */
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_gid_entry e, table[2];
	union ibv_gid gid;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_ece ece;
	struct rdma_cm_id *id;
	struct rdma_event_channel *ch;
	struct ib_uverbs_ah_attr kah;
	struct ibv_ah_attr ah;
	static char buf[4096];
	int n = -1;

	alarm(25);
	list = ibv_get_device_list(&n);
	REQUIRE(list != NULL && n == 1, "ibv_get_device_list");
	ctx = ibv_open_device(list[0]);
	REQUIRE(ctx != NULL, "ibv_open_device");

	begin("rate_conversions");
	REQUIRE(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125, "100 Gb/s");
	REQUIRE(ibv_rate_to_mult(IBV_RATE_10_GBPS) == 4, "10 Gb/s");
	REQUIRE(mult_to_ibv_rate(12) == IBV_RATE_30_GBPS, "x12");
	REQUIRE(mbps_to_ibv_rate(1) == IBV_RATE_MAX, "1 Mb/s");
	ok();

	begin("pkey_index");
	REQUIRE(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)) == 0, "the default P_Key");
	REQUIRE(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)) == -1 && errno == EINVAL,
		"an absent P_Key");
	ok();

	begin("query_gid_ex_and_table");
	REQUIRE(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	memset(&e, 0, sizeof(e));
	REQUIRE(ibv_query_gid_ex(ctx, 1, 0, &e, 0) == 0, "ibv_query_gid_ex");
	REQUIRE(memcmp(&e.gid, &gid, sizeof(gid)) == 0 && e.gid_index == 0 && e.port_num == 1 &&
		e.gid_type == IBV_GID_TYPE_ROCE_V2, "entry");
	REQUIRE(ibv_query_gid_ex(ctx, 1, 1, &e, 0) == EINVAL, "index 1");
	REQUIRE(ibv_query_gid_table(ctx, table, 2, 0) == 1 &&
		memcmp(&table[0].gid, &gid, sizeof(gid)) == 0, "ibv_query_gid_table");
	ok();

	begin("fork_unneeded");
	REQUIRE(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "ibv_is_fork_initialized");
	ok();

	begin("copy_ah_attr_from_kern");
	memset(&kah, 0, sizeof(kah));
	kah.grh.dgid[15] = 7;
	kah.grh.hop_limit = 64;
	kah.dlid = 0x1234;
	kah.is_global = 1;
	kah.port_num = 1;
	memset(&ah, 0xff, sizeof(ah));
	ibv_copy_ah_attr_from_kern(&ah, &kah);
	REQUIRE(ah.grh.dgid.raw[15] == 7 && ah.grh.dgid.raw[0] == 0 && ah.grh.hop_limit == 64 &&
		ah.dlid == 0x1234 && ah.is_global == 1 && ah.port_num == 1, "copied");
	ok();

	begin("unsupported_verbs");
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	errno = 0;
	REQUIRE(ibv_import_pd(ctx, 1) == NULL && errno == EOPNOTSUPP, "ibv_import_pd");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	REQUIRE(ibv_rereg_mr(mr, 1 << 5, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
		errno == EINVAL, "bad flags");
	REQUIRE(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			     IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_INPUT &&
		errno == EOPNOTSUPP, "ibv_rereg_mr");
	REQUIRE(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0, "teardown");
	ok();

	begin("ece");
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	memset(&ece, 0, sizeof(ece));
	REQUIRE(rdma_set_local_ece(id, &ece) == -1 && errno == EINVAL, "vendor 0");
	ece.vendor_id = 0x2c9;
	REQUIRE(rdma_set_local_ece(id, &ece) == -1 && errno == EOPNOTSUPP, "rdma_set_local_ece");
	ece.options = 5;
	REQUIRE(rdma_get_remote_ece(id, &ece) == 0 && ece.vendor_id == 0 && ece.options == 0,
		"rdma_get_remote_ece");
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	ok();

	ibv_free_device_list(list);
	REQUIRE(ibv_close_device(ctx) == 0, "ibv_close_device");
	return 0;
}
