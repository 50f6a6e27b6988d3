/* Helpers of the checker's fixtures (docs/check.md): each fixture breaks one rule of
 * `rnic exec --check`, or none (clean.c). Run under `rnic exec --addr A --check`. */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                        \
	do {                                                                            \
		if (!(x)) {                                                             \
			fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, \
				strerror(errno));                                       \
			exit(2);                                                        \
		}                                                                       \
	} while (0)

/* The next event of `ch`, which must be of type `t` (not acked). */
static inline struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type t)
{
	struct rdma_cm_event *e;
	CHECK(rdma_get_cm_event(ch, &e) == 0);
	if (e->event != t) {
		fprintf(stderr, "got %s, expected %s\n", rdma_event_str(e->event),
			rdma_event_str(t));
		exit(2);
	}
	return e;
}

/* A new id on `ch`, with its address resolved to the RNIC's own (RNIC_ADDR): bound to the
 * device. The ADDR_RESOLVED event is returned in `*ev`, not acked. */
static inline struct rdma_cm_id *resolved_id(struct rdma_event_channel *ch, struct rdma_cm_event **ev)
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7471) };
	const char *addr = getenv("RNIC_ADDR");
	CHECK(addr && inet_pton(AF_INET, addr, &dst.sin_addr) == 1);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000) == 0);
	*ev = expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	return id;
}

/* The first device's context. */
static inline struct ibv_context *open_first(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l && l[0]);
	struct ibv_context *c = ibv_open_device(l[0]);
	CHECK(c);
	ibv_free_device_list(l);
	return c;
}

/* An RC QP in INIT on `cq` with `recvs` receive WQEs. */
static inline struct ibv_qp *qp_in_init(struct ibv_pd *pd, struct ibv_cq *cq, int recvs)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = recvs, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	CHECK(qp);
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				    IBV_QP_ACCESS_FLAGS) == 0);
	return qp;
}

/* Posts `n` receives into `mr` (wr_id 1..n). */
static inline void post_recvs(struct ibv_qp *qp, struct ibv_mr *mr, int n)
{
	for (int i = 1; i <= n; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)mr->addr, .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK(ibv_post_recv(qp, &w, &bad) == 0);
	}
}

/* Moves `qp` to ERR: its WRs are flushed into its CQ. */
static inline void to_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_ERR };
	CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE) == 0);
}

/* Polls `cq` until `n` completions were taken. */
static inline void poll_n(struct ibv_cq *cq, int n)
{
	struct ibv_wc wc;
	while (n > 0) {
		int got = ibv_poll_cq(cq, 1, &wc);
		CHECK(got >= 0);
		n -= got;
	}
}
