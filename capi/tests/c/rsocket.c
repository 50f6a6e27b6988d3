/*
 * rsockets (<rdma/rsocket.h>) between two processes: the program forks before its first RDMA
 * call; the parent is the server on RNIC_ADDR, the child the client on the same address with
 * last octet 2. Pipes order the steps. What each check expects is rsocket.c's behaviour
 * (rdma-core librdmacm/rsocket.c) unless the comment says otherwise:
 *
 * - rsocket() knows AF_INET/AF_INET6 stream sockets; SOCK_DGRAM (UD rsockets) is not
 *   implemented here: -1/ENOTSUP (rsocket.c's errno for what it does not know);
 * - an rsocket's number is a real descriptor the library owns (rsocket.c: the fd of its id's
 *   event channel), so it is open (fcntl works) and no other descriptor gets its number;
 *   a number that is not an rsocket is EBADF, and rclose() leaves such a descriptor alone;
 * - rrecv on a socket that is not connected: ENOTCONN (Linux); on a non-blocking connected
 *   socket with nothing received: EAGAIN;
 * - raccept on a non-blocking listener with no connection: EAGAIN; rpoll reports POLLIN on
 *   the listener once a connection is established;
 * - SOL_RDMA options after connecting: EINVAL (rs->state >= rs_opening); SO_RCVBUF reads back
 *   doubled;
 * - rconnect to a port with no listener: ECONNREFUSED (REJ, ucma_complete); non-blocking:
 *   EINPROGRESS, then rpoll POLLOUT|POLLERR and SO_ERROR ECONNREFUSED, read once;
 * - MSG_PEEK leaves the data; MSG_WAITALL collects several messages;
 * - rpoll over a pipe and an rsocket reports each on its own; rselect too;
 * - riowrite lands in the peer's riomap'ed buffer before the stream data sent after it;
 *   riounmap of a region not mapped is EINVAL;
 * - rshutdown(SHUT_WR) gives the peer end-of-file while it can still send back;
 * - after the peer's rclose: POLLHUP, rrecv 0, rsend ECONNRESET; after rclose the number is
 *   EBADF.
 */

#include "common.h"
#include <rdma/rsocket.h>
#include <sys/mman.h>
#include <sys/select.h>

#define PORT 7471
#define MAP_LEN 4096

static int ready_pipe[2];    /* server -> client: listening */
static int accepted_pipe[2]; /* server -> client: accepted, non-blocking checks done */
static int x_pipe[2];        /* server -> client: send "x" */

static void notify(int fd)
{
	char c = 1;

	REQUIRE(write(fd, &c, 1) == 1, "write to pipe");
}

static void await(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	REQUIRE(poll(&p, 1, 15000) == 1, "the other process did not signal within 15 s");
	REQUIRE(read(fd, &c, 1) == 1, "the other process closed the pipe");
}

static void recv_exact(int fd, char *buf, int len)
{
	int got = 0;

	while (got < len) {
		ssize_t n = rrecv(fd, buf + got, len - got, 0);

		REQUIRE(n > 0, "rrecv gave %zd after %d of %d bytes", n, got, len);
		got += n;
	}
}

static void send_all(int fd, const char *buf, int len)
{
	REQUIRE(rsend(fd, buf, len, 0) == len, "rsend of %d bytes", len);
}

static struct sockaddr_in server_addr(int port)
{
	char ip[64];

	addr_with_last_octet(ip, sizeof(ip), 1);
	return sockaddr_of(ip, port);
}

static int server(void)
{
	struct sockaddr_in sin = server_addr(PORT), peer;
	socklen_t len;
	char buf[64], client_ip[64], *map;
	int lfd, fd, val, p[2];
	struct pollfd pf[2];
	fd_set rd, wr;
	struct timeval tv = { 0, 0 };

	begin("dgram_enotsup");
	REQUIRE(rsocket(AF_INET, SOCK_DGRAM, 0) == -1 && errno == ENOTSUP, "rsocket(SOCK_DGRAM)");
	ok();

	begin("number_is_an_open_descriptor");
	lfd = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(lfd >= 0, "rsocket");
	REQUIRE(fcntl(lfd, F_GETFD) != -1, "fcntl(F_GETFD) on rsocket %d", lfd);
	ok();

	begin("not_an_rsocket_ebadf");
	REQUIRE(rsend(ready_pipe[1] + 1000, "x", 1, 0) == -1 && errno == EBADF, "rsend");
	REQUIRE(rclose(accepted_pipe[0]) == -1 && errno == EBADF, "rclose of a pipe");
	REQUIRE(fcntl(accepted_pipe[0], F_GETFD) != -1, "the pipe was closed by rclose");
	ok();

	begin("recv_unconnected_enotconn");
	REQUIRE(rrecv(lfd, buf, 1, 0) == -1 && errno == ENOTCONN, "rrecv");
	ok();

	begin("rcvbuf_doubled");
	val = 8192;
	REQUIRE(rsetsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &val, sizeof(val)) == 0, "SO_RCVBUF");
	len = sizeof(val);
	REQUIRE(rgetsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &val, &len) == 0 && val == 16384,
		"SO_RCVBUF reads %d", val);
	ok();

	val = 1;
	REQUIRE(rsetsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &val, sizeof(val)) == 0, "REUSEADDR");
	REQUIRE(rbind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == 0, "rbind");
	REQUIRE(rlisten(lfd, 4) == 0, "rlisten");
	/* rsocket.c allows SOL_RDMA options on a listener; its connections inherit them (this
	 * one lets the client riomap too; the server's riomap needs the client's). */
	REQUIRE(rsetsockopt(lfd, SOL_RDMA, RDMA_IOMAPSIZE, &val, sizeof(val)) == 0,
		"RDMA_IOMAPSIZE on the listener");

	begin("getsockname_bound");
	len = sizeof(peer);
	REQUIRE(rgetsockname(lfd, (struct sockaddr *)&peer, &len) == 0 &&
		ntohs(peer.sin_port) == PORT, "port %d", ntohs(peer.sin_port));
	ok();

	begin("accept_nonblocking_eagain");
	REQUIRE(rfcntl(lfd, F_SETFL, O_NONBLOCK) == 0, "F_SETFL");
	REQUIRE((rfcntl(lfd, F_GETFL) & O_NONBLOCK) != 0, "F_GETFL");
	REQUIRE(raccept(lfd, NULL, NULL) == -1 && errno == EAGAIN, "raccept");
	ok();

	notify(ready_pipe[1]);

	begin("listener_pollin");
	pf[0].fd = lfd;
	pf[0].events = POLLIN;
	REQUIRE(rpoll(pf, 1, 10000) == 1 && (pf[0].revents & POLLIN), "revents %#x",
		pf[0].revents);
	ok();

	begin("accept_peer_addr");
	len = sizeof(peer);
	fd = raccept(lfd, (struct sockaddr *)&peer, &len);
	REQUIRE(fd >= 0, "raccept");
	addr_with_last_octet(client_ip, sizeof(client_ip), 2);
	REQUIRE(len == sizeof(peer) && peer.sin_family == AF_INET &&
		strcmp(inet_ntoa(peer.sin_addr), client_ip) == 0, "peer %s", inet_ntoa(peer.sin_addr));
	ok();

	begin("rdma_option_after_connect_einval");
	REQUIRE(rsetsockopt(fd, SOL_RDMA, RDMA_SQSIZE, &val, sizeof(val)) == -1 && errno == EINVAL,
		"RDMA_SQSIZE");
	ok();

	begin("recv_nonblocking_eagain");
	REQUIRE(rfcntl(fd, F_SETFL, O_NONBLOCK) == 0, "F_SETFL");
	REQUIRE(rrecv(fd, buf, 1, 0) == -1 && errno == EAGAIN, "rrecv");
	REQUIRE(rfcntl(fd, F_SETFL, 0) == 0, "F_SETFL 0");
	ok();

	notify(accepted_pipe[1]);

	begin("peek_then_read");
	memset(buf, 0, sizeof(buf));
	REQUIRE(rrecv(fd, buf, 5, MSG_PEEK) == 5 && memcmp(buf, "hello", 5) == 0, "peek");
	memset(buf, 0, sizeof(buf));
	REQUIRE(rrecv(fd, buf, 5, 0) == 5 && memcmp(buf, "hello", 5) == 0, "read");
	ok();

	begin("waitall");
	memset(buf, 0, sizeof(buf));
	REQUIRE(rrecv(fd, buf, 6, MSG_WAITALL) == 6 && memcmp(buf, "abcdef", 6) == 0, "got %.6s",
		buf);
	ok();

	begin("rpoll_mixed");
	REQUIRE(pipe(p) == 0, "pipe");
	REQUIRE(write(p[1], "p", 1) == 1, "write");
	pf[0].fd = p[0];
	pf[0].events = POLLIN;
	pf[1].fd = fd;
	pf[1].events = POLLIN;
	REQUIRE(rpoll(pf, 2, 0) == 1 && pf[0].revents == POLLIN && pf[1].revents == 0,
		"pipe %#x rsocket %#x", pf[0].revents, pf[1].revents);
	REQUIRE(read(p[0], buf, 1) == 1, "read");
	notify(x_pipe[1]);
	REQUIRE(rpoll(pf, 2, 10000) == 1 && pf[0].revents == 0 && pf[1].revents == POLLIN,
		"pipe %#x rsocket %#x", pf[0].revents, pf[1].revents);
	ok();

	begin("rselect_mixed");
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_SET(p[0], &rd);
	FD_SET(fd, &rd);
	FD_SET(fd, &wr);
	REQUIRE(rselect((fd > p[0] ? fd : p[0]) + 1, &rd, &wr, NULL, &tv) == 2 &&
		FD_ISSET(fd, &rd) && FD_ISSET(fd, &wr) && !FD_ISSET(p[0], &rd), "rselect");
	REQUIRE(rrecv(fd, buf, 1, 0) == 1 && buf[0] == 'x', "x");
	close(p[0]);
	close(p[1]);
	ok();

	begin("riowrite_before_later_data");
	map = mmap(NULL, MAP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(map != MAP_FAILED, "mmap");
	REQUIRE(riomap(fd, map, MAP_LEN, PROT_WRITE, 0, 0) == 0, "riomap");
	send_all(fd, "M", 1); /* the map is announced before it */
	recv_exact(fd, buf, 1);
	REQUIRE(buf[0] == 'W', "got %c", buf[0]);
	for (val = 0; val < MAP_LEN; val++)
		REQUIRE(map[val] == (char)(val * 7), "byte %d is %d", val, map[val]);
	ok();

	begin("riounmap");
	REQUIRE(riounmap(fd, map, MAP_LEN) == 0, "riounmap");
	REQUIRE(riounmap(fd, map, MAP_LEN) == -1 && errno == EINVAL, "second riounmap");
	ok();

	begin("half_close_eof");
	recv_exact(fd, buf, 3);
	REQUIRE(memcmp(buf, "bye", 3) == 0, "bye");
	REQUIRE(rrecv(fd, buf, 1, 0) == 0, "end-of-file");
	send_all(fd, "still", 5);
	ok();

	begin("peer_close_hup");
	pf[0].fd = fd;
	pf[0].events = POLLIN;
	do {
		REQUIRE(rpoll(pf, 1, 10000) == 1, "rpoll");
	} while (!(pf[0].revents & POLLHUP));
	REQUIRE(rrecv(fd, buf, 1, 0) == 0, "rrecv after the peer's close");
	REQUIRE(rsend(fd, "z", 1, 0) == -1 && errno == ECONNRESET, "rsend after the peer's close");
	ok();

	begin("closed_number_ebadf");
	REQUIRE(rclose(fd) == 0 && rclose(lfd) == 0, "rclose");
	REQUIRE(rsend(fd, "z", 1, 0) == -1 && errno == EBADF, "rsend");
	ok();
	return 0;
}

static int client(void)
{
	struct sockaddr_in sin = server_addr(PORT), refused = server_addr(PORT + 1), peer;
	char buf[MAP_LEN];
	socklen_t len;
	int s, err, i;
	struct pollfd pf;

	await(ready_pipe[0]);

	begin("connect_refused");
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(s >= 0, "rsocket");
	REQUIRE(rconnect(s, (struct sockaddr *)&refused, sizeof(refused)) == -1 &&
		errno == ECONNREFUSED, "rconnect");
	REQUIRE(rclose(s) == 0, "rclose");
	ok();

	begin("connect_nonblocking_refused");
	s = rsocket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	REQUIRE(s >= 0, "rsocket");
	REQUIRE(rconnect(s, (struct sockaddr *)&refused, sizeof(refused)) == -1 &&
		errno == EINPROGRESS, "rconnect");
	pf.fd = s;
	pf.events = POLLOUT;
	REQUIRE(rpoll(&pf, 1, 10000) == 1 && (pf.revents & POLLERR), "revents %#x", pf.revents);
	len = sizeof(err);
	REQUIRE(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ECONNREFUSED,
		"SO_ERROR %d", err);
	REQUIRE(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0,
		"SO_ERROR again %d", err);
	REQUIRE(rclose(s) == 0, "rclose");
	ok();

	begin("connect");
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(s >= 0, "rsocket");
	/* The table of the peer's maps this side keeps (the server riomaps into it). */
	i = 1;
	REQUIRE(rsetsockopt(s, SOL_RDMA, RDMA_IOMAPSIZE, &i, sizeof(i)) == 0, "RDMA_IOMAPSIZE");
	REQUIRE(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)) == 0, "rconnect");
	len = sizeof(peer);
	REQUIRE(rgetpeername(s, (struct sockaddr *)&peer, &len) == 0 &&
		peer.sin_addr.s_addr == sin.sin_addr.s_addr && peer.sin_port == sin.sin_port,
		"rgetpeername");
	ok();

	await(accepted_pipe[0]);
	send_all(s, "hello", 5);
	send_all(s, "ab", 2);
	send_all(s, "cdef", 4);
	await(x_pipe[0]);
	send_all(s, "x", 1);

	begin("riowrite");
	recv_exact(s, buf, 1);
	REQUIRE(buf[0] == 'M', "got %c", buf[0]);
	for (i = 0; i < MAP_LEN; i++)
		buf[i] = (char)(i * 7);
	REQUIRE(riowrite(s, buf, MAP_LEN, 0, 0) == MAP_LEN, "riowrite");
	REQUIRE(riowrite(s, buf, 1, MAP_LEN, 0) == (size_t)-1 && errno == EINVAL,
		"riowrite past the map");
	send_all(s, "W", 1);
	ok();

	begin("half_close_still_receives");
	send_all(s, "bye", 3);
	REQUIRE(rshutdown(s, SHUT_WR) == 0, "rshutdown");
	REQUIRE(rsend(s, "z", 1, 0) == -1 && errno == ECONNRESET, "rsend after SHUT_WR");
	recv_exact(s, buf, 5);
	REQUIRE(memcmp(buf, "still", 5) == 0, "still");
	ok();

	REQUIRE(rclose(s) == 0, "rclose");
	return 0;
}

int main(void)
{
	alarm(25);
	REQUIRE(pipe(ready_pipe) == 0 && pipe(accepted_pipe) == 0 && pipe(x_pipe) == 0, "pipe");
	return run_server_and_client(server, client);
}
