/*
 * One process, two rdma_cm ids on one RNIC: a listener, and a client that connects to it.
 * The client sends one message, then disconnects while the server still has a receive posted;
 * it shows what rdma_disconnect(3) promises: DISCONNECTED on both ids, the server's posted
 * receive flushed with IBV_WC_WR_FLUSH_ERR, then TIMEWAIT_EXIT on both.
 *
 * Build: cc self_connect.c -o self_connect -lrdmacm -libverbs
 * Run:   rnic exec --addr 127.0.0.9 -- ./self_connect 127.0.0.9
 *        (on a host with an RDMA NIC, the same binary with the NIC's IP address)
 */
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG_LEN 64

#define CHECK(cond, what)                                                                   \
	do {                                                                                \
		if (!(cond)) {                                                              \
			perror(what);                                                       \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

struct side {
	const char *name;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[2][MSG_LEN];
};

static struct side server = { .name = "server" }, client = { .name = "client" };

/* A PD, a CQ, a registered buffer and an RC QP for `s->id`. */
static void setup(struct side *s)
{
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	s->pd = ibv_alloc_pd(s->id->verbs);
	CHECK(s->pd, "ibv_alloc_pd");
	s->cq = ibv_create_cq(s->id->verbs, 8, NULL, NULL, 0);
	CHECK(s->cq, "ibv_create_cq");
	s->mr = ibv_reg_mr(s->pd, s->buf, sizeof(s->buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(s->mr, "ibv_reg_mr");
	attr.send_cq = attr.recv_cq = s->cq;
	CHECK(rdma_create_qp(s->id, s->pd, &attr) == 0, "rdma_create_qp");
}

static void post_recv(struct side *s, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)s->buf[wr_id - 1], MSG_LEN, s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	CHECK(ibv_post_recv(s->id->qp, &wr, &bad) == 0, "ibv_post_recv");
}

/* Waits for one completion on `s`'s CQ and prints it. */
static struct ibv_wc completion(struct side *s)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0)
		;
	CHECK(n == 1, "ibv_poll_cq");
	printf("%s: completion wr_id %llu: %s (%d)\n", s->name, (unsigned long long)wc.wr_id,
	       ibv_wc_status_str(wc.status), wc.status);
	return wc;
}

static struct side *side_of(struct rdma_cm_id *id)
{
	return id == client.id ? &client : &server;
}

/* The next CM event, which must be `want`; prints it and acks it. Returns its id. */
static struct rdma_cm_id *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
	id = ev->id;
	printf("%s: %s (status %d)\n", ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? "server"
	       : side_of(id)->name, rdma_event_str(ev->event), ev->status);
	if (ev->event != want) {
		fprintf(stderr, "expected %s\n", rdma_event_str(want));
		exit(1);
	}
	rdma_ack_cm_event(ev);
	return id;
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	struct rdma_conn_param param = { .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listener;
	struct ibv_send_wr swr = { .wr_id = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED, .num_sge = 1 }, *bad;
	struct ibv_sge sge;
	struct ibv_wc wc;
	int ok;

	CHECK(inet_pton(AF_INET, argc > 1 ? argv[1] : "127.0.0.1", &addr.sin_addr) == 1,
	      "address");
	ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel");

	/* The server: listen on an ephemeral rdma_cm port of the address. */
	CHECK(rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&addr) == 0, "rdma_bind_addr");
	CHECK(rdma_listen(listener, 1) == 0, "rdma_listen");
	addr.sin_port = rdma_get_src_port(listener);
	printf("server: listening on %s:%u\n", argv[1] ? argv[1] : "127.0.0.1",
	       ntohs(addr.sin_port));

	/* The client: resolve, make its QP, connect. */
	CHECK(rdma_create_id(ch, &client.id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(client.id, NULL, (struct sockaddr *)&addr, 2000) == 0,
	      "rdma_resolve_addr");
	expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(client.id, 2000) == 0, "rdma_resolve_route");
	expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	setup(&client);
	CHECK(rdma_connect(client.id, &param) == 0, "rdma_connect");

	/* The server takes the request on a new id, posts two receives and accepts. */
	server.id = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	setup(&server);
	post_recv(&server, 1);
	post_recv(&server, 2);
	CHECK(rdma_accept(server.id, &param) == 0, "rdma_accept");
	expect(ch, RDMA_CM_EVENT_ESTABLISHED); /* the client, on the REP */
	expect(ch, RDMA_CM_EVENT_ESTABLISHED); /* the server, on the RTU */

	/* One SEND: it consumes the server's first receive. */
	strcpy(client.buf[0], "hello from the client");
	sge = (struct ibv_sge){ (uintptr_t)client.buf[0], MSG_LEN, client.mr->lkey };
	swr.sg_list = &sge;
	CHECK(ibv_post_send(client.id->qp, &swr, &bad) == 0, "ibv_post_send");
	completion(&client);
	wc = completion(&server);
	printf("server: received \"%s\"\n", server.buf[wc.wr_id - 1]);

	/* The client disconnects: its QP goes to ERR, a DREQ leaves. */
	CHECK(rdma_disconnect(client.id) == 0, "rdma_disconnect");
	printf("client: rdma_disconnect\n");
	/* The server hears DISCONNECTED and disconnects too: its QP goes to ERR and the receive
	 * still posted is flushed. */
	expect(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_disconnect(server.id) == 0, "rdma_disconnect");
	printf("server: rdma_disconnect\n");
	wc = completion(&server);
	ok = wc.wr_id == 2 && wc.status == IBV_WC_WR_FLUSH_ERR;
	expect(ch, RDMA_CM_EVENT_DISCONNECTED); /* the client, on the DREP */
	expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT);
	expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT);

	rdma_destroy_qp(server.id);
	rdma_destroy_qp(client.id);
	rdma_destroy_id(server.id);
	rdma_destroy_id(client.id);
	rdma_destroy_id(listener);
	ibv_dereg_mr(server.mr);
	ibv_dereg_mr(client.mr);
	ibv_destroy_cq(server.cq);
	ibv_destroy_cq(client.cq);
	ibv_dealloc_pd(server.pd);
	ibv_dealloc_pd(client.pd);
	rdma_destroy_event_channel(ch);
	printf("%s\n", ok ? "OK" : "FAIL: the posted receive was not flushed");
	return ok ? 0 : 1;
}
