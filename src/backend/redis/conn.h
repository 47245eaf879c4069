/*
 * An owned connection to one Redis server: a socket driven with poll(2)
 * and calls that do not block, every wait bounded by an absolute
 * CLOCK_MONOTONIC deadline for the whole request (never per recv), buffers
 * on the heap.  A plain socket waits for a reply in recv itself, in slices
 * that end before the deadline (conn.c, await_in).  hiredis is
 * used only to format commands and to parse RESP (redisReader), so this
 * builds with hiredis 0.14 and 1.x.  Requests may be pipelined: append
 * several, then read the replies in order.
 */
#ifndef DMUTEX_CONN_H
#define DMUTEX_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

struct dmutex__node_addr;
struct ssl_ctx_st;
struct ssl_st;
struct dmutex__conn;

/*
 * A reply owed to no caller: the answer to a request sent without waiting
 * (an asynchronous release).  Whichever reader of the connection meets it
 * first, in the connection's order, hands it to done (dmutex__conn_next),
 * so pooled connections carry these between users.  done runs in that
 * reader's thread and must not block nor take locks; it may append to c
 * (and owe again).  reply is done's to free; NULL when the connection is
 * freed first: the request may or may not have run.
 */
struct dmutex__conn_owed {
	struct dmutex__conn_owed *next;
	unsigned long long seq;         /* the reply's place among c's replies */
	void (*done)(struct dmutex__conn *c, struct dmutex__conn_owed *o, void *reply);
};

struct dmutex__conn {
	int fd;
	int err;                        /* nonzero: broken, never reuse */
	char errstr[128];
	unsigned pending;               /* replies appended but not yet read,
	                                 * the owed ones included */
	unsigned long long sent, got;   /* requests appended, replies read */
	struct dmutex__conn_owed *owed, *owed_tail;  /* in reply order */
	unsigned nowed;
	unsigned command_ms;            /* the node's command timeout, for callers
	                                 * that have no deadline of their own */
	redisReader *rd;
	char *out;                      /* formatted commands not yet sent */
	size_t outlen, outoff, outcap;
	char *in;                       /* recv buffer, DMUTEX__CONN_IN bytes */
	struct ssl_st *ssl;             /* rediss://: the session over fd, else NULL */
	short want;                     /* TLS: the poll event it waits for */
	int tls_refused;                /* err came from TLS: a certificate or an
	                                 * alert, not the network */
	unsigned gen;                   /* redis-sentinel://: the generation of the
	                                 * master's address it was dialled for */
	int abandoned;                  /* freed in a fork child: what it owes
	                                 * is the parent's business */
	int64_t drained_ns;             /* plain: when a read last emptied the socket, or a
	                                 * poll last found it empty */
	int blocking;                   /* plain: the socket blocks (recv waits for
	                                 * a reply, SO_RCVTIMEO bounding it); every
	                                 * other call says MSG_DONTWAIT */
	uint64_t scripts_ok;            /* bit per script (scripts.h) its server
	                                 * answered without NOSCRIPT: a request
	                                 * nobody waits for may go by SHA */
};

/* Connect (DNS, TCP or unix; then the TLS handshake when tls is not NULL)
 * by the deadline; NULL with why filled on failure, *refused set when TLS
 * refused (a certificate not accepted, by either side).  The socket is
 * close-on-exec, TCP_NODELAY and keep-alive; non-blocking over TLS, else
 * blocking with a receive timeout (every call but a reply's wait says
 * MSG_DONTWAIT: pollers of c->fd see no difference). */
struct dmutex__conn *dmutex__conn_dial(const struct dmutex__node_addr *a, struct ssl_ctx_st *tls,
		int64_t deadline, char *why, size_t whylen, int *refused);
/* Owed replies not read get done(NULL) (see above). */
void dmutex__conn_free(struct dmutex__conn *c);

/* Queue one command; 0 or -1 (out of memory, c->err set). */
int dmutex__conn_append_argv(struct dmutex__conn *c, int argc, const char **argv,
		const size_t *lens);
int dmutex__conn_appendf(struct dmutex__conn *c, const char *fmt, ...);

/* The reply to the request appended last goes to o->done, not to a
 * caller (see struct dmutex__conn_owed). */
void dmutex__conn_owe(struct dmutex__conn *c, struct dmutex__conn_owed *o);
/* Read and hand over every owed reply by the deadline: 0, or -1 (c->err
 * set; the owed ones left get NULL when c is freed). */
int dmutex__conn_settle(struct dmutex__conn *c, int64_t deadline);
/* On a connection that owes no caller a reply: read what has arrived
 * without waiting, handing owed replies over: 0, or -1 if it is broken
 * (the server closed it: a pooled connection after a restart).  No read
 * when nothing can have come: every reply read, the socket found empty
 * within DMUTEX__CONN_QUIET_NS (see conn.c). */
int dmutex__conn_check(struct dmutex__conn *c);

/* Whether the server has closed c (it died or restarted, CLIENT KILL, an
 * idle timeout), told without a read: one poll(2).  Then nothing sent on
 * c could run; answers already on it are handed over, and c is broken. */
int dmutex__conn_closed(struct dmutex__conn *c);

/* Send what can go without waiting: 1 all sent, 0 more to send, -1 broken. */
int dmutex__conn_write(struct dmutex__conn *c);
/* Send everything by the deadline: 0 or -1. */
int dmutex__conn_flush(struct dmutex__conn *c, int64_t deadline);
/* Read what has arrived without waiting: 0, or -1 broken (EOF included).
 * Over TLS it reads until the socket is empty, so that no decrypted reply
 * waits inside OpenSSL while the caller polls the socket. */
int dmutex__conn_fill(struct dmutex__conn *c);
/* One parsed reply if buffered (*reply NULL if none): 0, or -1 on a
 * protocol error.  Owed replies are handed to their done first, never
 * returned. */
int dmutex__conn_next(struct dmutex__conn *c, void **reply);
/* Flush, then wait for the next reply until the deadline: 0 with *reply,
 * or -1 (c->err set; a timeout breaks the connection: a reply is owed). */
int dmutex__conn_get(struct dmutex__conn *c, void **reply, int64_t deadline);
/* The events to poll c->fd for, given those the caller wants (POLLIN,
 * POLLOUT): over TLS a read may need to write first, and the reverse. */
short dmutex__conn_events(const struct dmutex__conn *c, short events);
/* now + c->command_ms. */
int64_t dmutex__conn_deadline(const struct dmutex__conn *c);
/* appendf + get. NULL on failure. */
redisReply *dmutex__conn_command(struct dmutex__conn *c, int64_t deadline, const char *fmt, ...);
/* A command that carries a secret (AUTH's password), sent and its reply
 * waited for as dmutex__conn_command does, but formatted straight into our
 * output buffer (hiredis's redisFormatCommand would leave a copy in memory
 * it frees unzeroed) and zeroed there once the reply came or the
 * connection failed.  What no code of ours can reach: the kernel's socket
 * buffer until the server acknowledges the bytes, and over TLS OpenSSL's
 * record buffer, where the bytes are encrypted in place before they are
 * sent.  hiredis's own context buffers are not used (this conn layer
 * reads and writes the socket itself). */
redisReply *dmutex__conn_command_secret(struct dmutex__conn *c, int64_t deadline, int argc,
		const char **argv);

#endif
