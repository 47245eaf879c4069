/*
 * Connection set-up (DNS, TCP, AUTH, SELECT, PING, later TLS) runs on a
 * library thread of its own with an explicitly sized stack: getaddrinfo and
 * a TLS handshake want tens of KiB, and the caller may be a thread created
 * with a PTHREAD_STACK_MIN stack.  The caller waits for it only until the
 * deadline, which therefore bounds DNS too (getaddrinfo takes no timeout).
 */
#ifndef DMUTEX_DIAL_H
#define DMUTEX_DIAL_H

#include <stdint.h>

#define DMUTEX__DIAL_STACK (1024 * 1024)

/*
 * Run fn(arg) on a new library thread and wait for it until deadline
 * (CLOCK_MONOTONIC ns).  0: fn ran and returned, arg holds its result.
 * ETIMEDOUT: the caller gave up; the thread calls drop(arg) when fn
 * returns, and arg must not be touched again.  Another errno: no thread
 * could be started, fn did not run.  On 0 the thread has ended, its
 * thread-specific destructors included (OpenSSL frees its per-thread state
 * there); a thread given up on is joined by a later call or at exit.
 */
int dmutex__dial_run(void (*fn)(void *), void (*drop)(void *), void *arg, int64_t deadline);

/*
 * Join, at process exit, the dial threads given up on that are still
 * running (for at most 2 s): an atexit handler registered on the first
 * call.  Call it once OpenSSL is initialised (tls.c, after SSL_CTX_new):
 * handlers run in reverse order, so it runs before OpenSSL's own cleanup,
 * which a thread still using OpenSSL must not race with.
 */
void dmutex__dial_reap_at_exit(void);

#endif
