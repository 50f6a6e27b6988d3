/* An rdma_cm program that dies where a test wants it to, for `rnic exec`'s death tests
 * (cli/tests/exec_death.rs). On Linux the kernel then closes its rdma_cm file (ucma_close) and
 * destroys its ids (cm_destroy_id), so the peer hears of it at once.
 *
 * usage:
 *   rdma_die exit-connected SERVER_IP PORT STATUS
 *       connects, prints "connected" once ESTABLISHED, then calls exit(STATUS) without
 *       rdma_disconnect: a program that ends in the middle of a connection (the peer gets a
 *       DREQ);
 *   rdma_die hold-request IP PORT
 *       listens, takes one CONNECT_REQUEST, prints "request" and waits in pause() without
 *       accepting it, until a signal ends it (the peer's REQ gets a REJ).
 * Exits 100 + n on a failure before that point, 2 on bad arguments. */
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	int ok;

	if (rdma_get_cm_event(ch, &ev)) {
		perror("rdma_get_cm_event");
		return -1;
	}
	ok = ev->event == want;
	if (!ok)
		fprintf(stderr, "event %s (status %d), expected %s\n",
			rdma_event_str(ev->event), ev->status, rdma_event_str(want));
	rdma_ack_cm_event(ev);
	return ok ? 0 : -1;
}

static int parse(const char *ip, const char *port, struct sockaddr_in *a)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons(atoi(port));
	if (inet_pton(AF_INET, ip, &a->sin_addr) != 1) {
		fprintf(stderr, "%s: not an IPv4 address\n", ip);
		return -1;
	}
	return 0;
}

static int hold_request(struct sockaddr_in *addr)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listener;

	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP))
		return 101;
	if (rdma_bind_addr(listener, (struct sockaddr *)addr) || rdma_listen(listener, 1))
		return 102;
	if (expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST))
		return 103;
	printf("request\n");
	fflush(stdout);
	for (;;)
		pause();
}

static int exit_connected(struct sockaddr_in *server, int status)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_qp_init_attr attr;
	struct rdma_conn_param param;
	struct ibv_pd *pd;
	struct ibv_cq *cq;

	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return 101;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)server, 2000) ||
	    expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED))
		return 102;
	if (rdma_resolve_route(id, 2000) || expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED))
		return 103;
	pd = ibv_alloc_pd(id->verbs);
	cq = pd ? ibv_create_cq(id->verbs, 8, NULL, NULL, 0) : NULL;
	if (!cq)
		return 104;
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = cq;
	attr.recv_cq = cq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = 4;
	attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, pd, &attr))
		return 105;
	memset(&param, 0, sizeof(param));
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.retry_count = 7;
	if (rdma_connect(id, &param) || expect(ch, RDMA_CM_EVENT_ESTABLISHED))
		return 106;
	printf("connected\n");
	fflush(stdout);
	exit(status);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a;

	if (argc == 5 && !strcmp(argv[1], "exit-connected")) {
		if (parse(argv[2], argv[3], &a))
			return 2;
		return exit_connected(&a, atoi(argv[4]));
	}
	if (argc == 4 && !strcmp(argv[1], "hold-request")) {
		if (parse(argv[2], argv[3], &a))
			return 2;
		return hold_request(&a);
	}
	fprintf(stderr, "usage: %s exit-connected SERVER_IP PORT STATUS | hold-request IP PORT\n",
		argv[0]);
	return 2;
}
