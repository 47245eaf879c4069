/*
 * A TCP proxy that delays every byte by a settable time, both ways, keeping
 * each connection's byte order (the harness's th_proxy drops and
 * blackholes; this one is chained in front of it for delays).  One thread,
 * one poll loop, in the process that starts it; sockets are CLOEXEC.
 */
#ifndef TORTURE_DPROXY_H
#define TORTURE_DPROXY_H

struct tt_dproxy;

/* Listen on a free loopback port, forward to 127.0.0.1:target.  NULL on
 * failure (message on stderr). */
struct tt_dproxy *tt_dproxy_start(int target);
int tt_dproxy_port(const struct tt_dproxy *p);
/* Bytes read from now on are passed on delay_ms later (0: at once). */
void tt_dproxy_set_delay(struct tt_dproxy *p, int delay_ms);
void tt_dproxy_stop(struct tt_dproxy *p);

#endif
