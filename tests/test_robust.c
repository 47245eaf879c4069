/*
 * Robust mutexes against a real redis-server: a holder that is SIGKILLed,
 * exits while holding, or loses its lease counts as owner-died; the next
 * robust locker gets EOWNERDEAD, non-robust lockers acquire as usual;
 * unlocking without dmutex_consistent makes the lock not recoverable for
 * every process until an operator resets it.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmutex.h"
#include "harness.h"
#include "dmt.h"

/* Each criterion test runs in its own worker process: these are per test. */
static struct th_redis srv;
static pid_t child_pid;

static void srv_up(void)
{
	cr_assert_eq(th_redis_start(&srv, NULL), 0, "redis-server did not start");
	cr_assert_eq(dmt_backend_up(&srv), 0, "Redlock nodes did not start");
}

static void srv_down(void)
{
	dmt_backend_down();
	/* A failed assertion may leave a child stopped or waiting. */
	dmt_reap(&child_pid);
	th_redis_stop(&srv);
}

TestSuite(robust, .init = srv_up, .fini = srv_down, .timeout = 20);

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

/* The robust state in the meta hash: "" when absent (clean). */
static const char *meta_state(const char *name)
{
	static char state[64];

	dmt_meta_state(&srv, name, state, sizeof state);
	return state;
}

/* 1 if NAME's lock key holds a hold (a token), not the not-recoverable
 * mark nor nothing. */
static int held(const char *name)
{
	char tok[128];

	return dmt_lock_field(&srv, name, "token", tok, sizeof tok);
}

static long long lock_pttl(const char *name)
{
	return dmt_lock_pttl(&srv, name);
}

/* Over etcd (README "etcd") a lease is whole seconds, 2 s at least, its
 * TTL a second longer than the hold's; etcd reports what is left rounded
 * down to the second, and its lessor looks for ended leases every 500 ms:
 * the slack each bound below adds there. */
static long long etcd_slack_ms(void)
{
	return dmt_etcd() ? 1500 : 0;
}

/* A client and a mutex of this process. */
struct proc_mutex {
	dmutex_client_t *c;
	dmutex_t m;
};

static void pm_open(struct proc_mutex *pm, const char *name, int robust)
{
	cr_assert_eq(dmutex_client_open(&pm->c, srv.url), 0);
	cr_assert_eq(dmt_init_mutex(&pm->m, name, pm->c, &(struct dmt_attr){ .robust = robust }), 0);
}

static void pm_close(struct proc_mutex *pm)
{
	cr_assert_eq(dmutex_destroy(&pm->m), 0);
	cr_assert_eq(dmutex_client_close(pm->c), 0);
}

/* ------------------------------------------------------------------ */
/* the holder child                                                    */
/* ------------------------------------------------------------------ */

enum {
	HOLD_UNTIL_KILLED,      /* wait to be SIGKILLed */
	HOLD_EXIT,              /* exit(0) while holding */
	HOLD_STOPPED            /* be SIGSTOPped, then report the loss */
};

struct holder_arg {
	char url[700];
	const char *name;
	int robust;
	unsigned lease_ms;
	int how;
	struct th_sync ready;   /* child -> parent: I hold it */
	struct th_sync go;      /* parent -> child: look at your hold now */
};

/* Exit codes: 0 as expected; 10.. set-up; 14 fence, 15 unlock gave the
 * wrong code after the loss; 30 was never killed. */
static int holder(void *p)
{
	struct holder_arg *a = p;
	dmutex_client_t *c;
	dmutex_t m;
	uint64_t tok;

	if (dmutex_client_open(&c, a->url))
		return 10;
	if (dmt_init_mutex(&m, a->name, c,
			&(struct dmt_attr){ .robust = a->robust, .lease_ms = a->lease_ms }))
		return 11;
	if (dmutex_lock(&m))
		return 12;
	th_sync_post(&a->ready);
	switch (a->how) {
	case HOLD_EXIT:
		/* A normal exit (atexit handlers run) while holding. */
		exit(0);
	case HOLD_STOPPED:
		if (th_sync_wait(&a->go, 15000))
			return 13;
		if (dmutex_fence(&m, &tok) != ENOLCK)
			return 14;
		if (dmutex_unlock(&m) != ENOLCK)
			return 15;
		return 0;
	default:
		th_sync_wait(&a->go, 15000);
		return 30;
	}
}

/* Start a holder child and wait until it holds the lock. */
static void spawn_holder(struct holder_arg *a, const char *name, int robust, unsigned lease_ms, int how)
{
	snprintf(a->url, sizeof a->url, "%s", srv.url);
	a->name = name;
	a->robust = robust;
	a->lease_ms = lease_ms;
	a->how = how;
	cr_assert_eq(th_sync_init(&a->ready), 0);
	cr_assert_eq(th_sync_init(&a->go), 0);
	child_pid = th_spawn(holder, a);
	cr_assert_gt(child_pid, 0);
	cr_assert_eq(th_sync_wait(&a->ready, 5000), 0, "the child did not take the lock");
	/* (One that exits at once may have released it already.) */
	if (how != HOLD_EXIT)
		cr_assert_eq(dmt_lock_exists(&srv, name), 1);
}

static int wait_holder(int timeout_ms)
{
	int rc = th_wait_child(child_pid, timeout_ms);
	child_pid = 0;
	return rc;
}

/* A child that exited(0) while holding `name`: the lock is owner-died. */
static void make_owner_died(const char *name)
{
	static struct holder_arg a;
	int rc;

	spawn_holder(&a, name, DMUTEX_ROBUST, 10000, HOLD_EXIT);
	rc = wait_holder(5000);
	cr_assert_eq(rc, 0, "holder exit code %d", rc);
	th_sync_close(&a.ready);
	th_sync_close(&a.go);
}

/* SIGKILL the holder; returns the lock key's PTTL read right after, and
 * the monotonic time of that read in *at. */
static long long kill_holder(const char *name, long long *at)
{
	long long pttl;
	int rc;

	cr_assert_eq(kill(child_pid, SIGKILL), 0);
	rc = wait_holder(5000);
	cr_assert_eq(rc, 128 + SIGKILL, "holder exit code %d", rc);
	pttl = lock_pttl(name);
	*at = th_now_ms();
	cr_assert(pttl > 0, "the killed holder's lock key is gone at once (PTTL %lld)", pttl);
	return pttl;
}

/* ------------------------------------------------------------------ */
/* 1. SIGKILLed holder: EOWNERDEAD after the lease                     */
/* ------------------------------------------------------------------ */

Test(robust, sigkilled_holder_gives_eownerdead_after_lease)
{
	static struct holder_arg a;
	const char *name = "robust-kill";
	struct proc_mutex pm;
	char died[8];
	long long pttl, at, waited;
	int rc;

	spawn_holder(&a, name, DMUTEX_ROBUST, 500, HOLD_UNTIL_KILLED);
	/* Connected before the kill: a fresh connection (a TLS handshake in
	 * robust-tls) under a loaded ASan run is not what the bound below
	 * measures. */
	pm_open(&pm, name, DMUTEX_ROBUST);
	pttl = kill_holder(name, &at);
	/* (over etcd: 500 ms granted as 2 s, its TTL 3 s) */
	cr_assert_leq(pttl, dmt_etcd() ? 3000 : 500);
	cr_assert_str_eq(meta_state(name), "held");

	rc = dmutex_lock(&pm.m);
	waited = th_now_ms() - at;
	cr_assert_eq(rc, EOWNERDEAD, "robust lock after SIGKILL: %s", dmutex_strerror(rc));
	/* Not before the dead holder's lease ran out (15 ms for clocks and
	 * rounding), and not much later: the wait is bounded by that lease. */
	cr_assert_geq(waited, pttl - 15, "acquired %lld ms after the kill, the lease had %lld ms left", waited,
			pttl);
	cr_assert_lt(waited, pttl + 1500 + etcd_slack_ms(), "acquired only %lld ms after the lease ended",
			waited - pttl);
	/* (Over etcd the hold's key has no "died": EOWNERDEAD is the sign.) */
	if (!dmt_etcd()) {
		cr_assert(dmt_lock_field(&srv, name, "died", died, sizeof died));
		cr_assert_str_eq(died, "1");
	}

	cr_assert_eq(dmutex_consistent(&pm.m), 0);
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	cr_assert_str_eq(meta_state(name), "", "state '%s' after consistent + unlock", meta_state(name));
	/* Made consistent: the next hold is clean. */
	rc = dmutex_lock(&pm.m);
	cr_assert_eq(rc, 0, "lock after recovery: %s", dmutex_strerror(rc));
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	pm_close(&pm);
}

/* ------------------------------------------------------------------ */
/* 2. exit() while holding: EOWNERDEAD at once                         */
/* ------------------------------------------------------------------ */

Test(robust, exit_while_holding_gives_eownerdead_at_once)
{
	const char *name = "robust-exit";
	struct proc_mutex pm;
	long long t0, waited;
	int rc;

	make_owner_died(name);
	/* exit() released the lock at once, marked owner-died. */
	cr_assert_eq(dmt_lock_exists(&srv, name), 0, "the lock is still held after the holder exited");
	cr_assert_str_eq(meta_state(name), "died");

	pm_open(&pm, name, DMUTEX_ROBUST);
	t0 = th_now_ms();
	rc = dmutex_lock(&pm.m);
	waited = th_now_ms() - t0;
	cr_assert_eq(rc, EOWNERDEAD, "robust lock after exit(): %s", dmutex_strerror(rc));
	/* One round trip; 3 s allows a loaded 2-core machine's scheduling
	 * delays and still tells a wait for the 10 s lease apart. */
	cr_assert_lt(waited, 3000, "took %lld ms: waited for the 10 s lease?", waited);
	cr_assert_eq(dmutex_consistent(&pm.m), 0);
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	cr_assert_eq(dmutex_lock(&pm.m), 0);
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	pm_close(&pm);
}

/* ------------------------------------------------------------------ */
/* 3. ENOTRECOVERABLE for every process until an operator resets it    */
/* ------------------------------------------------------------------ */

struct notrec_arg {
	char url[700];
	const char *name;
};

/* Another process, robust and not: 0 if both get ENOTRECOVERABLE. */
static int notrec_other_process(void *p)
{
	struct notrec_arg *a = p;
	dmutex_client_t *c;
	dmutex_t robust, plain;

	if (dmutex_client_open(&c, a->url))
		return 10;
	if (dmt_init_mutex(&robust, a->name, c, &(struct dmt_attr){ .robust = DMUTEX_ROBUST }) ||
			dmt_init_mutex(&plain, a->name, c, &(struct dmt_attr){ .robust = DMUTEX_STALLED }))
		return 11;
	if (dmutex_lock(&robust) != ENOTRECOVERABLE)
		return 12;
	if (dmutex_lock(&plain) != ENOTRECOVERABLE)
		return 13;
	if (dmutex_trylock(&plain) != ENOTRECOVERABLE)
		return 14;
	return 0;
}

Test(robust, unlock_without_consistent_is_not_recoverable_everywhere)
{
	static struct notrec_arg na;
	const char *name = "robust-notrec";
	struct proc_mutex pm;
	dmutex_t plain;
	int rc;

	DMT_SINGLE_NODE();

	make_owner_died(name);
	pm_open(&pm, name, DMUTEX_ROBUST);
	cr_assert_eq(dmt_init_mutex(&plain, name, pm.c, &(struct dmt_attr){ .robust = DMUTEX_STALLED }), 0);
	cr_assert_eq(dmutex_lock(&pm.m), EOWNERDEAD);
	/* Unlock WITHOUT dmutex_consistent. */
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	cr_assert_str_eq(meta_state(name), "notrec");
	cr_assert_eq(held(name), 0);

	/* This process, robust or not, blocking or not. */
	cr_assert_eq(dmutex_lock(&pm.m), ENOTRECOVERABLE);
	cr_assert_eq(dmutex_trylock(&pm.m), ENOTRECOVERABLE);
	cr_assert_eq(dmutex_lock(&plain), ENOTRECOVERABLE);
	cr_assert_eq(held(name), 0, "ENOTRECOVERABLE took the lock");

	/* Another process, robust or not. */
	snprintf(na.url, sizeof na.url, "%s", srv.url);
	na.name = name;
	child_pid = th_spawn(notrec_other_process, &na);
	cr_assert_gt(child_pid, 0);
	rc = wait_holder(10000);
	cr_assert_eq(rc, 0, "other process exit code %d (12 robust, 13 plain lock, 14 plain trylock)", rc);
	cr_assert_str_eq(meta_state(name), "notrec");

	/* The operator resets it (as `dmutex reset` does: the lock key is the
	 * not-recoverable mark, key layout 3). */
	cr_assert_eq(dmt_lock_reset(&srv, name), 1);
	rc = dmutex_lock(&pm.m);
	cr_assert_eq(rc, 0, "lock after reset: %s", dmutex_strerror(rc));
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	cr_assert_eq(dmutex_lock(&plain), 0);
	cr_assert_eq(dmutex_unlock(&plain), 0);
	cr_assert_eq(dmutex_destroy(&plain), 0);
	pm_close(&pm);
}

/* ------------------------------------------------------------------ */
/* 4. non-robust locker after a SIGKILLed holder                       */
/* ------------------------------------------------------------------ */

Test(robust, non_robust_locker_acquires_normally_after_sigkill)
{
	static struct holder_arg a;
	const char *name = "robust-plain";
	struct proc_mutex pm, rb;
	char died[8];
	long long pttl, at, waited;
	int rc;

	spawn_holder(&a, name, DMUTEX_STALLED, 500, HOLD_UNTIL_KILLED);
	pttl = kill_holder(name, &at);

	pm_open(&pm, name, DMUTEX_STALLED);
	rc = dmutex_lock(&pm.m);
	waited = th_now_ms() - at;
	cr_assert_eq(rc, 0, "non-robust lock after SIGKILL: %s", dmutex_strerror(rc));
	cr_assert_geq(waited, pttl - 15, "acquired %lld ms after the kill, the lease had %lld ms left", waited,
			pttl);
	/* A non-robust holder's death leaves no trace in Redis (key layout
	 * 3: only robust holds keep a state), so nobody knows it died.  (Over
	 * etcd no robust state either: meta_state below.) */
	if (!dmt_etcd()) {
		cr_assert(dmt_lock_field(&srv, name, "died", died, sizeof died));
		cr_assert_str_eq(died, "0");
	}
	cr_assert_eq(dmutex_consistent(&pm.m), EINVAL, "consistent on a non-robust mutex");
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	/* Its clean unlock leaves a clean lock: a robust locker gets 0. */
	cr_assert_str_eq(meta_state(name), "");
	pm_open(&rb, name, DMUTEX_ROBUST);
	rc = dmutex_lock(&rb.m);
	cr_assert_eq(rc, 0, "robust lock after a clean unlock: %s", dmutex_strerror(rc));
	cr_assert_eq(dmutex_unlock(&rb.m), 0);
	pm_close(&rb);
	pm_close(&pm);
}

/* ------------------------------------------------------------------ */
/* 5. a lost lease counts as owner died                                */
/* ------------------------------------------------------------------ */

Test(robust, lost_lease_gives_eownerdead)
{
	static struct holder_arg a;
	const char *name = "robust-lost";
	struct proc_mutex pm;
	long long t0, waited;
	int rc;

	spawn_holder(&a, name, DMUTEX_ROBUST, 500, HOLD_STOPPED);
	/* Connected before the stop: the bound below is for the wait, not
	 * for a fresh connection (a TLS handshake in robust-tls). */
	pm_open(&pm, name, DMUTEX_ROBUST);
	cr_assert_eq(kill(child_pid, SIGSTOP), 0);
	cr_assert_eq(th_wait_stopped(child_pid), 0);
	t0 = th_now_ms();

	rc = dmutex_lock(&pm.m);
	waited = th_now_ms() - t0;
	cr_assert_eq(rc, EOWNERDEAD, "robust lock after the holder's lease was lost: %s", dmutex_strerror(rc));
	/* The 500 ms lease and a loaded machine's scheduling: a wait that is
	 * not ended by the stopped holder's expiry (the lock's 10 s
	 * default) is still far beyond it. */
	cr_assert_lt(waited, 3000 + (dmt_etcd() ? 2500 + etcd_slack_ms() : 0), "took %lld ms (lease 500)",
			waited);
	cr_assert_eq(dmutex_consistent(&pm.m), 0);

	/* The stalled holder resumes while we hold it: it is told. */
	cr_assert_eq(kill(child_pid, SIGCONT), 0);
	th_sync_post(&a.go);
	rc = wait_holder(10000);
	cr_assert_eq(rc, 0, "stalled holder exit code %d (14 fence, 15 unlock not ENOLCK)", rc);
	cr_assert_eq(dmt_lock_exists(&srv, name), 1, "the stalled holder's unlock freed our hold");
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	cr_assert_str_eq(meta_state(name), "");
	cr_assert_eq(dmutex_lock(&pm.m), 0);
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	pm_close(&pm);
	th_sync_close(&a.ready);
	th_sync_close(&a.go);
}

/* ------------------------------------------------------------------ */
/* 6. dmutex_consistent's errors                                       */
/* ------------------------------------------------------------------ */

static void *consistent_from_other_thread(void *m)
{
	return (void *)(intptr_t)dmutex_consistent(m);
}

Test(robust, consistent_by_non_holder_is_eperm)
{
	const char *name = "robust-eperm";
	struct proc_mutex pm;
	pthread_t th;
	void *ret;

	make_owner_died(name);
	pm_open(&pm, name, DMUTEX_ROBUST);
	/* Nobody holds it. */
	cr_assert_eq(dmutex_consistent(&pm.m), EPERM);
	cr_assert_eq(dmutex_lock(&pm.m), EOWNERDEAD);
	/* Inconsistent, held by the main thread: another thread may not. */
	cr_assert_eq(pthread_create(&th, NULL, consistent_from_other_thread, &pm.m), 0);
	pthread_join(th, &ret);
	cr_assert_eq((int)(intptr_t)ret, EPERM);
	/* The holder still can, once. */
	cr_assert_eq(dmutex_consistent(&pm.m), 0);
	cr_assert_eq(dmutex_consistent(&pm.m), EINVAL, "consistent twice");
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	cr_assert_str_eq(meta_state(name), "");
	pm_close(&pm);
}

Test(robust, consistent_on_consistent_mutex_is_einval)
{
	const char *name = "robust-einval";
	struct proc_mutex pm;

	pm_open(&pm, name, DMUTEX_ROBUST);
	cr_assert_eq(dmutex_lock(&pm.m), 0);
	cr_assert_eq(dmutex_consistent(&pm.m), EINVAL);
	/* It changed nothing: the unlock is clean. */
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	cr_assert_str_eq(meta_state(name), "");
	cr_assert_eq(dmutex_lock(&pm.m), 0);
	cr_assert_eq(dmutex_unlock(&pm.m), 0);
	pm_close(&pm);
}
