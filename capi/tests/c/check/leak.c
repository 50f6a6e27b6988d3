/* Breaks leak: a PD and a CQ are never destroyed. */
#include "check.h"

int main(void)
{
	struct ibv_context *ctx = open_first();
	CHECK(ibv_alloc_pd(ctx));
	CHECK(ibv_create_cq(ctx, 4, NULL, NULL, 0));
	return 0;
}
