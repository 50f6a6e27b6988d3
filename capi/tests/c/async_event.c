/*
 * Async events come through the context's async_fd: libibverbs' ibv_get_async_event is a
 * read() of it (rdma-core libibverbs/device.c, `if (read(context->async_fd, &ev, sizeof ev) !=
 * sizeof ev) return -1;`), so poll() says readable exactly while an event is pending, and with
 * O_NONBLOCK it fails with EAGAIN when none is. The element is the object the application was
 * given: `element.cq` for IBV_EVENT_CQ_ERR, `element.qp` for QP events (man
 * ibv_get_async_event.3).
 *
 * A CQ overrun (IBTA 11.4.2.1: a completion that does not fit) raises IBV_EVENT_CQ_ERR, then
 * IBV_EVENT_QP_FATAL on the QP whose completion was lost; the first request a QP receives since
 * RTR, in RTR or RTS, raises IBV_EVENT_COMM_EST (IBTA 11.6.3.1; docs/semantics-verbs.md "Async
 * events"); an RDMA WRITE with a bad rkey raises IBV_EVENT_QP_ACCESS_ERR on the responder's QP
 * (IBTA C9-222.1.1). librnic skips an
 * event whose CQ or QP the application destroyed before reading it (libibverbs cannot return
 * one: its destroy calls wait for the object's events to be acked).
 */
#include "common.h"

static int readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, timeout_ms);

	REQUIRE(n >= 0, "poll");
	return n == 1 && (p.revents & POLLIN);
}

/* The next event (blocking); requires `type` on QP `qp` (or CQ `cq` when `qp` is NULL). */
static void expect_event(struct ibv_context *ctx, enum ibv_event_type type, struct ibv_qp *qp,
			 struct ibv_cq *cq)
{
	struct ibv_async_event ev;
	int rc;

	memset(&ev, 0, sizeof(ev));
	rc = ibv_get_async_event(ctx, &ev);
	REQUIRE(rc == 0, "ibv_get_async_event returned %d", rc);
	REQUIRE(ev.event_type == type &&
			(qp ? ev.element.qp == qp : ev.element.cq == cq),
		"event %d (%s) element %p, want %s on %p", ev.event_type,
		ibv_event_type_str(ev.event_type), (void *)ev.element.qp,
		ibv_event_type_str(type), qp ? (void *)qp : (void *)cq);
	ibv_ack_async_event(&ev);
}

/* `qp`, in RTS towards `target`, RDMA-WRITEs 8 bytes to it (signaled; completion not awaited). */
static void write_to(struct ibv_qp *qp, struct ibv_mr *src, struct ibv_mr *dst, uint64_t wr_id)
{
	post_send(qp, wr_id, IBV_WR_RDMA_WRITE, src, src->addr, 8, (uintptr_t)dst->addr,
		  dst->rkey);
}

int main(void)
{
	static char src[256], dst[256];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *small, *big;
	struct ibv_mr *mr_src, *mr_dst;
	struct ibv_qp *rtr, *sender, *gone, *sender2, *victim, *sender3;
	struct ibv_async_event ev;
	struct loopback lb;
	int rc, flags;

	alarm(25);
	ctx = open_first_device();
	REQUIRE(ctx->async_fd >= 0, "async_fd is %d", ctx->async_fd);
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	small = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	big = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	REQUIRE(small != NULL && big != NULL, "ibv_create_cq");
	mr_src = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	mr_dst = ibv_reg_mr(pd, dst, sizeof(dst),
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	REQUIRE(mr_src != NULL && mr_dst != NULL, "ibv_reg_mr");
	/* lb.a completes on `small` (one entry); both QPs are in RTS before any packet. */
	loopback_connect(&lb, ctx, pd, small, big);

	begin("fd_not_readable_before_event");
	REQUIRE(!readable(ctx->async_fd, 0), "poll() says async_fd is readable");
	ok();

	/* Two signaled WRITEs: the first completion fills the CQ, the second overruns it. */
	begin("cq_overrun_makes_fd_readable");
	write_to(lb.a, mr_src, mr_dst, 1);
	write_to(lb.a, mr_src, mr_dst, 2);
	REQUIRE(readable(ctx->async_fd, 5000), "async_fd not readable within 5 s of the overrun");
	ok();

	/* lb.b is in RTS: the first WRITE it receives raises COMM_EST (rdma_accept's case). */
	begin("get_async_event_comm_est_rts");
	expect_event(ctx, IBV_EVENT_COMM_EST, lb.b, NULL); /* blocking fd: waits for it */
	ok();

	begin("get_async_event_cq_err");
	expect_event(ctx, IBV_EVENT_CQ_ERR, NULL, small);
	ok();

	begin("get_async_event_qp_fatal_after_cq_err");
	expect_event(ctx, IBV_EVENT_QP_FATAL, lb.a, NULL);
	ok();

	begin("nonblocking_eagain_when_drained");
	flags = fcntl(ctx->async_fd, F_GETFL);
	REQUIRE(flags >= 0 && fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK) == 0,
		"fcntl O_NONBLOCK");
	errno = 0;
	rc = ibv_get_async_event(ctx, &ev);
	REQUIRE(rc == -1 && errno == EAGAIN, "ibv_get_async_event with nothing pending returned %d",
		rc);
	REQUIRE(!readable(ctx->async_fd, 100), "poll() says async_fd is readable after the read");
	ok();

	/* `rtr` stays in RTR; `sender` (RTS) writes to it. */
	begin("get_async_event_comm_est_qp");
	rtr = create_rc_qp(pd, big, big);
	sender = create_rc_qp(pd, big, big);
	rc_qp_to_rtr(rtr, sender->qp_num, &lb.gid);
	connect_rc_qp(sender, rtr->qp_num, &lb.gid);
	write_to(sender, mr_src, mr_dst, 3);
	REQUIRE(readable(ctx->async_fd, 5000), "async_fd not readable within 5 s of the packet");
	memset(&ev, 0, sizeof(ev));
	rc = ibv_get_async_event(ctx, &ev);
	REQUIRE(rc == 0, "ibv_get_async_event returned %d", rc);
	REQUIRE(ev.event_type == IBV_EVENT_COMM_EST && ev.element.qp == rtr,
		"event %d (%s) element %p, want IBV_EVENT_COMM_EST on %p", ev.event_type,
		ibv_event_type_str(ev.event_type), (void *)ev.element.qp, (void *)rtr);
	ibv_ack_async_event(&ev);
	REQUIRE(!readable(ctx->async_fd, 100), "async_fd still readable");
	ok();

	/* The same with a QP destroyed before its event is read: the event is skipped. */
	begin("event_of_destroyed_qp_skipped");
	gone = create_rc_qp(pd, big, big);
	sender2 = create_rc_qp(pd, big, big);
	rc_qp_to_rtr(gone, sender2->qp_num, &lb.gid);
	connect_rc_qp(sender2, gone->qp_num, &lb.gid);
	write_to(sender2, mr_src, mr_dst, 4);
	REQUIRE(readable(ctx->async_fd, 5000), "async_fd not readable within 5 s of the packet");
	REQUIRE(ibv_destroy_qp(gone) == 0, "ibv_destroy_qp");
	errno = 0;
	rc = ibv_get_async_event(ctx, &ev);
	REQUIRE(rc == -1 && errno == EAGAIN, "ibv_get_async_event returned %d (event %d)", rc,
		ev.event_type);
	REQUIRE(!readable(ctx->async_fd, 100), "async_fd still readable");
	ok();

	/* `victim` (RTS) gets a WRITE with a bad rkey: COMM_EST, then QP_ACCESS_ERR on it. */
	begin("get_async_event_qp_access_err_on_responder");
	REQUIRE(fcntl(ctx->async_fd, F_SETFL, flags) == 0, "fcntl blocking");
	victim = create_rc_qp(pd, big, big);
	sender3 = create_rc_qp(pd, big, big);
	connect_rc_qp(victim, sender3->qp_num, &lb.gid);
	connect_rc_qp(sender3, victim->qp_num, &lb.gid);
	post_send(sender3, 5, IBV_WR_RDMA_WRITE, mr_src, mr_src->addr, 8, (uintptr_t)dst,
		  mr_dst->rkey ^ 0x80);
	expect_event(ctx, IBV_EVENT_COMM_EST, victim, NULL);
	expect_event(ctx, IBV_EVENT_QP_ACCESS_ERR, victim, NULL);
	REQUIRE(qp_state(victim) == IBV_QPS_ERR, "victim not in ERR");
	ok();

	begin("teardown");
	REQUIRE(ibv_destroy_qp(victim) == 0 && ibv_destroy_qp(sender3) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_qp(lb.a) == 0 && ibv_destroy_qp(lb.b) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_qp(rtr) == 0 && ibv_destroy_qp(sender) == 0 &&
			ibv_destroy_qp(sender2) == 0,
		"ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(small) == 0 && ibv_destroy_cq(big) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dereg_mr(mr_src) == 0 && ibv_dereg_mr(mr_dst) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(ctx) == 0, "ibv_close_device");
	ok();
	return 0;
}
