/*
 * `struct rdma_cm_id.event` of an id that has an event channel.
 *
 * librdmacm stores an event in id->event only for synchronous ids (created with a NULL
 * channel), whose calls fetch their own events: rdma-core librdmacm/cma.c:1116 in
 * ucma_complete, `ret = rdma_get_cm_event(id_priv->id.channel, &id_priv->id.event);`, and
 * cma.c:1894/1898 in rdma_get_request. rdma_get_cm_event itself never writes id->event, so
 * for an id with a channel it stays NULL, before and after the event is acked; rdma_destroy_id
 * acks whatever id->event holds (cma.c:836-837, `if (id_priv->id.event)
 * rdma_ack_cm_event(id_priv->id.event);`), so a stale pointer there would be acked twice.
 */
#include "common.h"

int main(void)
{
	const char *ip = getenv("RNIC_ADDR");
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev;
	struct sockaddr_in dst;

	alarm(25);
	REQUIRE(ip != NULL, "RNIC_ADDR is not set");
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel");
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	dst = sockaddr_of(ip, 7471);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0,
		"rdma_resolve_addr");
	ev = next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, 5000);

	begin("event_field_null_while_unacked");
	REQUIRE(id->event == NULL, "id->event is %p (the event is %p), want NULL",
		(void *)id->event, (void *)ev);
	ok();

	begin("event_field_null_after_ack");
	REQUIRE(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event");
	REQUIRE(id->event == NULL, "id->event is %p after the ack (a freed event), want NULL",
		(void *)id->event);
	ok();

	begin("teardown");
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	ok();
	return 0;
}
