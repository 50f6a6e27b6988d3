/*
 * A completion channel is a file descriptor: libibverbs' ibv_get_cq_event is a read() of it
 * (rdma-core libibverbs/verbs.c:775, `if (read(channel->fd, &ev, sizeof ev) != sizeof ev)
 * return -1;`), so with O_NONBLOCK it fails with EAGAIN when no event is pending, and poll()
 * on it says readable exactly when an event is pending. A notification is one-shot: one event
 * per ibv_req_notify_cq.
 */
#include "common.h"

static int readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, timeout_ms);

	REQUIRE(n >= 0, "poll");
	return n == 1 && (p.revents & POLLIN);
}

int main(void)
{
	static char src[256], dst[256];
	static int marker; /* the CQ's cq_context */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq_a, *cq_b, *ev_cq = NULL;
	void *ev_ctx = NULL;
	struct ibv_mr *mr_src, *mr_dst;
	struct loopback lb;
	struct ibv_wc wc;
	int rc, flags;

	alarm(25);
	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	ch = ibv_create_comp_channel(ctx);
	REQUIRE(ch != NULL, "ibv_create_comp_channel");
	cq_a = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 16, &marker, ch, 0);
	REQUIRE(cq_a != NULL && cq_b != NULL, "ibv_create_cq");
	mr_src = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	mr_dst = ibv_reg_mr(pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr_src != NULL && mr_dst != NULL, "ibv_reg_mr");
	loopback_connect(&lb, ctx, pd, cq_a, cq_b);

	begin("get_cq_event_nonblocking_eagain");
	flags = fcntl(ch->fd, F_GETFL);
	REQUIRE(flags >= 0 && fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) == 0, "fcntl O_NONBLOCK");
	rc = ibv_req_notify_cq(cq_b, 0);
	REQUIRE(rc == 0, "ibv_req_notify_cq returned %d", rc);
	errno = 0;
	rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	REQUIRE(rc == -1 && errno == EAGAIN, "ibv_get_cq_event with nothing pending returned %d",
		rc);
	ok();

	begin("fd_not_readable_before_event");
	REQUIRE(!readable(ch->fd, 0), "poll() says the channel fd is readable");
	ok();

	begin("fd_readable_after_completion");
	post_recv(lb.b, 7, mr_dst, dst, sizeof(dst));
	strcpy(src, "hello");
	post_send(lb.a, 1, IBV_WR_SEND, mr_src, src, 6, 0, 0);
	expect_wc(cq_a, 1, IBV_WC_SUCCESS);
	REQUIRE(readable(ch->fd, 5000), "the channel fd did not become readable within 5 s");
	ok();

	begin("get_cq_event_returns_cq_and_context");
	rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	REQUIRE(rc == 0, "ibv_get_cq_event returned %d", rc);
	REQUIRE(ev_cq == cq_b, "event for CQ %p, want %p", (void *)ev_cq, (void *)cq_b);
	REQUIRE(ev_ctx == &marker, "cq_context %p, want %p", ev_ctx, (void *)&marker);
	ibv_ack_cq_events(ev_cq, 1);
	REQUIRE(ibv_poll_cq(cq_b, 1, &wc) == 1, "no completion on the notified CQ");
	REQUIRE(wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
			wc.byte_len == 6,
		"wc wr_id %llu status %s opcode %d byte_len %u", (unsigned long long)wc.wr_id,
		ibv_wc_status_str(wc.status), wc.opcode, wc.byte_len);
	REQUIRE(strcmp(dst, "hello") == 0, "received %.8s", dst);
	ok();

	/* The event was consumed and the CQ was not re-armed: a second completion must not make
	 * the fd readable (IB spec: the CQ notifies once per request). */
	begin("one_event_per_arm");
	REQUIRE(!readable(ch->fd, 0), "fd still readable after the event was read");
	post_recv(lb.b, 8, mr_dst, dst, sizeof(dst));
	post_send(lb.a, 2, IBV_WR_SEND, mr_src, src, 6, 0, 0);
	expect_wc(cq_a, 2, IBV_WC_SUCCESS);
	expect_wc(cq_b, 8, IBV_WC_SUCCESS);
	REQUIRE(!readable(ch->fd, 100), "fd readable although the CQ was not re-armed");
	errno = 0;
	rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	REQUIRE(rc == -1 && errno == EAGAIN, "ibv_get_cq_event returned %d", rc);
	ok();

	/* rdma-core libibverbs/verbs.c:711-712: `if (channel->refcnt) { ret = EBUSY;` */
	begin("destroy_channel_in_use_ebusy");
	rc = ibv_destroy_comp_channel(ch);
	REQUIRE(rc == EBUSY, "ibv_destroy_comp_channel with a CQ on it returned %d", rc);
	ok();

	begin("teardown");
	REQUIRE(ibv_destroy_qp(lb.a) == 0 && ibv_destroy_qp(lb.b) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
	REQUIRE(ibv_dereg_mr(mr_src) == 0 && ibv_dereg_mr(mr_dst) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	ok();
	return 0;
}
