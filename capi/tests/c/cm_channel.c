/*
 * The rdma_cm event channel and id life cycle, in one process (no peer is needed).
 *
 * librdmacm's rdma_get_cm_event is a write() of a GET_EVENT command to the channel's fd
 * (rdma-core librdmacm/cma.c:2644-2647: `ret = write(channel->fd, &cmd, sizeof cmd); if (ret !=
 * sizeof cmd) { free(evt); return (ret >= 0) ? ERR(ENODATA) : -1; }`), and the kernel's
 * ucma_get_event answers -EAGAIN on an O_NONBLOCK file with no event queued; poll() on the fd
 * is readable when an event is queued. rdma_destroy_id waits until every event reported for
 * the id has been acked (cma.c:839-840: `while (id_priv->events_completed < ret)
 * pthread_cond_wait(&id_priv->cond, &id_priv->mut);`).
 */
#include <pthread.h>

#include "common.h"

static int acked; /* set by the acking thread just before rdma_ack_cm_event */

struct ack_job {
	struct rdma_cm_event *ev;
	int delay_ms;
};

static void *ack_later(void *arg)
{
	struct ack_job *job = arg;

	usleep(job->delay_ms * 1000);
	__atomic_store_n(&acked, 1, __ATOMIC_SEQ_CST);
	if (rdma_ack_cm_event(job->ev) != 0)
		printf("FAIL destroy_id_waits_for_ack: rdma_ack_cm_event failed (errno %d)\n", errno);
	return NULL;
}

int main(void)
{
	const char *ip = getenv("RNIC_ADDR");
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev = NULL;
	struct sockaddr_in dst;
	struct pollfd p;
	struct ack_job job;
	pthread_t t;
	long t0, waited;
	int rc, flags;

	alarm(25);
	REQUIRE(ip != NULL, "RNIC_ADDR is not set");
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");

	begin("get_cm_event_nonblocking_eagain");
	flags = fcntl(ch->fd, F_GETFL);
	REQUIRE(flags >= 0 && fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) == 0, "fcntl O_NONBLOCK");
	errno = 0;
	rc = rdma_get_cm_event(ch, &ev);
	REQUIRE(rc == -1 && errno == EAGAIN, "rdma_get_cm_event with nothing queued returned %d",
		rc);
	ok();

	/* rdma-core creates a synchronous id for a NULL channel: a private channel of its own
	 * (rdma-core librdmacm/cma.c ucma_alloc_id: `if (!channel) { id_priv->id.channel =
	 * rdma_create_event_channel(); ... id_priv->sync = 1; }`), no event kept yet;
	 * rdma_destroy_id destroys that channel (ucma_free_id). cm_sync.c tests such ids. */
	begin("create_id_null_channel_sync");
	rc = rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP);
	REQUIRE(rc == 0, "rdma_create_id(NULL channel) returned %d", rc);
	REQUIRE(id->channel != NULL && id->channel != ch && id->channel->fd >= 0,
		"the synchronous id has no private channel");
	REQUIRE(id->event == NULL, "a new synchronous id has an event");
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id of a synchronous id");
	id = NULL;
	ok();

	begin("resolve_addr_event_through_poll");
	rc = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	REQUIRE(rc == 0, "rdma_create_id");
	dst = sockaddr_of(ip, 7471);
	rc = rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000);
	REQUIRE(rc == 0, "rdma_resolve_addr returned %d", rc);
	p.fd = ch->fd;
	p.events = POLLIN;
	p.revents = 0;
	rc = poll(&p, 1, 5000);
	REQUIRE(rc == 1 && (p.revents & POLLIN), "the channel fd did not become readable (%d)",
		rc);
	rc = rdma_get_cm_event(ch, &ev);
	REQUIRE(rc == 0, "rdma_get_cm_event returned %d", rc);
	REQUIRE(ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->status == 0,
		"got %s status %d", rdma_event_str(ev->event), ev->status);
	REQUIRE(ev->id == id, "the event is for id %p, want %p", (void *)ev->id, (void *)id);
	REQUIRE(id->verbs != NULL, "id->verbs is NULL after ADDR_RESOLVED");
	ok();

	/* The ADDR_RESOLVED event is still un-acked: rdma_destroy_id must wait for the ack. */
	begin("destroy_id_waits_for_ack");
	job.ev = ev;
	job.delay_ms = 300;
	REQUIRE(pthread_create(&t, NULL, ack_later, &job) == 0, "pthread_create");
	t0 = now_ms();
	rc = rdma_destroy_id(id);
	waited = now_ms() - t0;
	REQUIRE(rc == 0, "rdma_destroy_id returned %d", rc);
	REQUIRE(__atomic_load_n(&acked, __ATOMIC_SEQ_CST) == 1,
		"rdma_destroy_id returned after %ld ms, before the event was acked", waited);
	REQUIRE(waited >= job.delay_ms - 50, "rdma_destroy_id returned after only %ld ms", waited);
	REQUIRE(pthread_join(t, NULL) == 0, "pthread_join");
	ok();

	begin("teardown");
	errno = 0;
	rc = rdma_get_cm_event(ch, &ev);
	REQUIRE(rc == -1 && errno == EAGAIN, "an event is left on the channel");
	rdma_destroy_event_channel(ch);
	ok();
	return 0;
}
