/*
 * Helpers shared by the C semantics programs of capi/tests/c_semantics.rs.
 *
 * Each program prints "OK <name>" for every check that held and exits 0; the first check that
 * fails prints "FAIL <name>: <expression> ... (errno ...)" and exits 1. The programs run under
 * LD_PRELOAD=librnic.so with RNIC_ADDR set; they only use the public libibverbs/librdmacm API.
 */
#ifndef RNIC_C_SEMANTICS_COMMON_H
#define RNIC_C_SEMANTICS_COMMON_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The check being run, named in OK/FAIL lines; a prefix (e.g. "server_") for forked roles. */
static const char *check_name = "setup";
static const char *role = "";

static inline void begin(const char *name)
{
	check_name = name;
}

static inline void ok(void)
{
	printf("OK %s%s\n", role, check_name);
	fflush(stdout);
}

#define REQUIRE(cond, ...)                                                          \
	do {                                                                        \
		if (!(cond)) {                                                      \
			int saved_errno_ = errno;                                   \
			printf("FAIL %s%s: %s (line %d): ", role, check_name,       \
			       #cond, __LINE__);                                    \
			printf(__VA_ARGS__);                                        \
			printf(" [errno %d %s]\n", saved_errno_,                    \
			       strerror(saved_errno_));                             \
			fflush(stdout);                                             \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

static inline long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* RNIC_ADDR with its last octet replaced by `last` (the peer of a forked test). */
static inline void addr_with_last_octet(char *out, size_t len, int last)
{
	const char *a = getenv("RNIC_ADDR");
	const char *dot;

	REQUIRE(a != NULL, "RNIC_ADDR is not set");
	dot = strrchr(a, '.');
	REQUIRE(dot != NULL, "RNIC_ADDR %s is not IPv4", a);
	snprintf(out, len, "%.*s.%d", (int)(dot - a), a, last);
}

static inline struct sockaddr_in sockaddr_of(const char *ip, int port)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	REQUIRE(inet_pton(AF_INET, ip, &sin.sin_addr) == 1, "bad address %s", ip);
	return sin;
}

/* ---- verbs: a device, RC QPs moved through INIT/RTR/RTS by hand ---- */

static inline struct ibv_context *open_first_device(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx;

	REQUIRE(list != NULL && n >= 1, "ibv_get_device_list gave %d devices", n);
	ctx = ibv_open_device(list[0]);
	REQUIRE(ctx != NULL, "ibv_open_device");
	ibv_free_device_list(list);
	return ctx;
}

/* An RC QP of 16 WRs and 1 SGE each way, taking its receives from `srq` when not NULL. */
static inline struct ibv_qp *create_rc_qp_srq(struct ibv_pd *pd, struct ibv_cq *send_cq,
					      struct ibv_cq *recv_cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp *qp;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = send_cq;
	ia.recv_cq = recv_cq;
	ia.srq = srq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &ia);
	REQUIRE(qp != NULL, "ibv_create_qp");
	return qp;
}

static inline struct ibv_qp *create_rc_qp(struct ibv_pd *pd, struct ibv_cq *send_cq,
					  struct ibv_cq *recv_cq)
{
	return create_rc_qp_srq(pd, send_cq, recv_cq, NULL);
}

/* RESET -> INIT -> RTR towards QP `remote_qpn` at GID `dgid` (RoCE: GRH, sgid 0). */
static inline void rc_qp_to_rtr(struct ibv_qp *qp, uint32_t remote_qpn,
				const union ibv_gid *dgid)
{
	struct ibv_qp_attr a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ;
	rc = ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	REQUIRE(rc == 0, "modify_qp INIT returned %d", rc);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = remote_qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	rc = ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
	REQUIRE(rc == 0, "modify_qp RTR returned %d", rc);
}

/* RESET -> INIT -> RTR -> RTS towards QP `remote_qpn` at GID `dgid` (RoCE: GRH, sgid 0). */
static inline void connect_rc_qp(struct ibv_qp *qp, uint32_t remote_qpn,
				 const union ibv_gid *dgid)
{
	struct ibv_qp_attr a;
	int rc;

	rc_qp_to_rtr(qp, remote_qpn, dgid);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	rc = ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	REQUIRE(rc == 0, "modify_qp RTS returned %d", rc);
}

/* Two RC QPs of one device connected to each other (the RNIC sends to its own GID). */
struct loopback {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	union ibv_gid gid;
	struct ibv_qp *a, *b;
};

static inline void loopback_connect(struct loopback *lb, struct ibv_context *ctx,
				    struct ibv_pd *pd, struct ibv_cq *cq_a,
				    struct ibv_cq *cq_b)
{
	lb->ctx = ctx;
	lb->pd = pd;
	REQUIRE(ibv_query_gid(ctx, 1, 0, &lb->gid) == 0, "ibv_query_gid");
	lb->a = create_rc_qp(pd, cq_a, cq_a);
	lb->b = create_rc_qp(pd, cq_b, cq_b);
	connect_rc_qp(lb->a, lb->b->qp_num, &lb->gid);
	connect_rc_qp(lb->b, lb->a->qp_num, &lb->gid);
}

static inline enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);

	REQUIRE(rc == 0, "ibv_query_qp returned %d", rc);
	return a.qp_state;
}

static inline void post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr,
			     void *addr, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_recv(qp, &wr, &bad);

	REQUIRE(rc == 0, "ibv_post_recv returned %d", rc);
}

/* One signaled WR: SEND (rkey 0) or RDMA WRITE/READ at remote_addr/rkey. */
static inline void post_send(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op,
			     struct ibv_mr *mr, void *addr, uint32_t len,
			     uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr;
	struct ibv_send_wr *bad = NULL;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;
	rc = ibv_post_send(qp, &wr, &bad);
	REQUIRE(rc == 0, "ibv_post_send returned %d", rc);
}

/* Polls `cq` until one completion arrives (or `timeout_ms` passes: 0 returned). */
static inline int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, long timeout_ms)
{
	long deadline = now_ms() + timeout_ms;

	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);

		REQUIRE(n >= 0, "ibv_poll_cq returned %d", n);
		if (n == 1)
			return 1;
		if (now_ms() >= deadline)
			return 0;
		usleep(200);
	}
}

/* Waits for one completion and requires it to be `wr_id` with `status`. */
static inline void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status)
{
	struct ibv_wc wc;

	REQUIRE(poll_one(cq, &wc, 5000) == 1, "no completion for wr_id %llu within 5 s",
		(unsigned long long)wr_id);
	REQUIRE(wc.wr_id == wr_id && wc.status == status,
		"got wr_id %llu status %s, want wr_id %llu status %s",
		(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
		(unsigned long long)wr_id, ibv_wc_status_str(status));
}

/* ---- rdma_cm ---- */

/* Waits (poll on the channel's fd) for the next event and requires its type and status;
 * returns the event, not acked. */
static inline struct rdma_cm_event *next_event(struct rdma_event_channel *ch,
					       enum rdma_cm_event_type want,
					       int want_status, int timeout_ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = NULL;
	int n = poll(&p, 1, timeout_ms);

	REQUIRE(n == 1, "no rdma_cm event within %d ms (waiting for %s), poll returned %d",
		timeout_ms, rdma_event_str(want), n);
	REQUIRE(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
	REQUIRE(ev->event == want && ev->status == want_status,
		"got %s status %d, want %s status %d", rdma_event_str(ev->event), ev->status,
		rdma_event_str(want), want_status);
	return ev;
}

/*
 * Runs a two-process program: forks the client (role "client_", RNIC_ADDR with last octet 2)
 * before the first RDMA call — the library's runtime does not survive fork() — runs `server`
 * here (role "server_"), then checks the client's exit status ("client_exit_status"). Returns
 * main's exit code.
 */
static inline int run_server_and_client(int (*server)(void), int (*client)(void))
{
	char client_ip[64];
	pid_t pid;
	int status;

	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		role = "client_";
		addr_with_last_octet(client_ip, sizeof(client_ip), 2);
		REQUIRE(setenv("RNIC_ADDR", client_ip, 1) == 0, "setenv");
		return client();
	}
	role = "server_";
	(void)server();
	role = "";
	begin("client_exit_status");
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the client ended with status %#x",
		status);
	ok();
	return 0;
}

#endif
