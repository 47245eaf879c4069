/*
 * Runtime defects the public POSIX suites found through the shim (issue
 * 29), each as an ordinary pthread program shaped like the suite's test
 * that found it, against a real redis-server.  One case per run (argv[1]),
 * each in a child process with a deadline, so that a hang or a crash is a
 * failure of that case and not of the runner:
 *
 *   destroy  "signal, unlock, destroy, free" of a condition variable whose
 *            woken waiter is still leaving (LTP pthread_cond_destroy
 *            speculative 4-1, 2-1; then its memory zeroed and destroyed
 *            again, as 2-1 does); a barrier destroyed by the thread its
 *            cycle released first while the others are still leaving.
 *            Run with MALLOC_PERTURB_ and no tcache, so that a read of a
 *            freed object finds garbage (under ASan, the use after free).
 *   exit     LTP sem_init 3-1: a producer and a consumer on semaphores,
 *            joined, then the main thread calls pthread_exit: the process
 *            ends (status 0), though the library's own threads live on.
 *   nomem    LTP pthread_mutex_init 5-1: with the address space full
 *            (RLIMIT_AS), pthread_mutex_init returns 0 or ENOMEM at once,
 *            for each attribute type, and does not retry for ever.
 *   handler  sem_post from a signal handler (LTP pthread_mutex_trylock 4-3,
 *            cond_broadcast 4-2): the handler interrupts a thread that is
 *            itself inside sem_post and sem_wait; every handler's post
 *            arrives, none is lost as a "retry" or deadlocks.
 *   seen     LTP sem_post 6-1: a handler posts, and once it has returned
 *            its thread reads the value (and takes the permit): the post
 *            is there, every round, though a thread of the shim's makes it;
 *            then the same in a forked child (which has its own poster).
 *   rwexit   LTP pthread_rwlock_timedrdlock 6-2, timedwrlock 6-2: a thread
 *            waits in a timed read (write) lock while the main thread
 *            writes, gets it once the writer unlocks, and returns without
 *            unlocking (a read twice, recursively); the hold ends with the
 *            thread: pthread_rwlock_destroy is 0, and a writer of the same
 *            name (initialized anew) gets it at once with trywrlock.
 *   reinit   musl's pthread-robust-detach: a robust mutex initialized at one
 *            line, locked by a detached thread that returns holding it,
 *            then locked (EOWNERDEAD) and left so by the main thread; the
 *            same mutex initialized again without a destroy, twice: each
 *            round's thread gets the new mutex, the main thread
 *            EOWNERDEAD again.
 *   eintr    LTP sem_wait 7-1, sem_timedwait 9-1: a handler installed
 *            without SA_RESTART interrupts sem_wait and sem_timedwait with
 *            -1 and errno EINTR.
 *   smalllog a thread with a PTHREAD_STACK_MIN stack (as LTP
 *            pthread_cond_broadcast 1-2 makes them) whose call logs an
 *            error deep down does not overflow its stack.
 *   cancellog a thread with a cancel pending locks two static mutexes
 *            initialized on one line: the second logs a warning (write(2),
 *            a cancellation point of libc's) while the shim holds its
 *            names' lock.  pthread_mutex_lock is not a cancellation point:
 *            the thread gets to its own pthread_testcancel, and the names'
 *            lock is free for the next static mutex.
 *   herd     (LTP pthread_cond_broadcast 1-2's 1,000 waiters were 25 times
 *            slower than natively) a message for one waiting thread wakes
 *            that thread, not every thread that waits on something: with
 *            HERD threads asleep on semaphores of their own, NEWS
 *            messages on one's channel cost far fewer than HERD * NEWS
 *            context switches.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "check.h"
#include "harness.h"

static struct th_redis srv;

/* ---- destroy ---- */

enum { CROUNDS = 200, BROUNDS = 10, BTHREADS = 4 };

struct cv_case {
	pthread_mutex_t m;
	pthread_cond_t c;
	int ready, go;
};

static void *
cv_waiter(void *arg)
{
	struct cv_case *k = arg;

	pthread_mutex_lock(&k->m);
	k->ready = 1;
	while (!k->go)
		if (pthread_cond_wait(&k->c, &k->m))
			break;
	pthread_mutex_unlock(&k->m);
	return NULL;
}

/* LTP pthread_cond_destroy speculative 4-1: the waiter is woken, and the
 * condition variable destroyed and its memory reused before the waiter
 * returns. */
static int
cond_round(void)
{
	struct cv_case *k = calloc(1, sizeof *k);
	pthread_t t;
	int bad = 0, ready = 0;

	if (!k || pthread_mutex_init(&k->m, NULL) || pthread_cond_init(&k->c, NULL) ||
			pthread_create(&t, NULL, cv_waiter, k))
		return 1;
	for (long long until = th_now_ms() + 10000; !ready && th_now_ms() < until;) {
		pthread_mutex_lock(&k->m);
		ready = k->ready;
		pthread_mutex_unlock(&k->m);
		if (!ready)
			usleep(1000);
	}
	/* ready: the waiter is in pthread_cond_wait once we hold the mutex. */
	pthread_mutex_lock(&k->m);
	k->go = 1;
	bad |= pthread_cond_signal(&k->c) != 0;
	pthread_mutex_unlock(&k->m);
	if (pthread_cond_destroy(&k->c)) {
		fprintf(stderr, "pthread_cond_destroy after signal and unlock failed\n");
		bad = 1;
	}
	/* Its memory reused as PTHREAD_COND_INITIALIZER's zeros, and
	 * destroyed again, as LTP pthread_cond_destroy 2-1 does. */
	memset(&k->c, 0, sizeof k->c);
	if (pthread_cond_destroy(&k->c)) {
		fprintf(stderr, "pthread_cond_destroy of zeroed memory failed\n");
		bad = 1;
	}
	memset(&k->c, 0xa5, sizeof k->c);
	pthread_join(t, NULL);
	pthread_mutex_destroy(&k->m);
	free(k);
	return bad || !ready;
}

static pthread_barrier_t *bar;
static int bar_destroy_err = -1;

static void *
bar_waiter(void *arg)
{
	pthread_barrier_t *b = bar;

	(void)arg;
	if (pthread_barrier_wait(b) == PTHREAD_BARRIER_SERIAL_THREAD)
		bar_destroy_err = pthread_barrier_destroy(b);
	return NULL;
}

/* The thread a cycle releases (the serial one) destroys the barrier at
 * once: the others are released, not blocked, so POSIX allows it. */
static int
barrier_round(void)
{
	pthread_t t[BTHREADS];
	int bad = 0;

	bar = malloc(sizeof *bar);
	if (!bar || pthread_barrier_init(bar, NULL, BTHREADS))
		return 1;
	bar_destroy_err = -1;
	for (int i = 0; i < BTHREADS; i++)
		pthread_create(&t[i], NULL, bar_waiter, NULL);
	for (int i = 0; i < BTHREADS; i++)
		pthread_join(t[i], NULL);
	if (bar_destroy_err != 0) {
		fprintf(stderr, "pthread_barrier_destroy by the serial thread: %d\n", bar_destroy_err);
		bad = 1;
	}
	free(bar);
	return bad;
}

static int
case_destroy(void *arg)
{
	int bad = 0;

	(void)arg;
	for (int i = 0; i < CROUNDS && !bad; i++)
		bad |= cond_round();
	for (int i = 0; i < BROUNDS && !(bad & 2); i++)
		bad |= barrier_round() << 1;
	return bad;
}

/* ---- exit ---- */

static sem_t psem, csem;
static int produced;

static void *
producer(void *arg)
{
	for (long i = 0; i < (long)arg; i++) {
		sem_wait(&psem);
		produced++;
		sem_post(&csem);
	}
	return NULL;
}

static void *
consumer(void *arg)
{
	for (long i = 0; i < (long)arg; i++) {
		sem_wait(&csem);
		sem_post(&psem);
	}
	return NULL;
}

static void
on_exit_usr1(int signo)
{
	(void)signo;
}

static int
case_exit(void *arg)
{
	struct sigaction sa;
	pthread_t p, c;

	(void)arg;
	if (sem_init(&csem, 0, 0) || sem_init(&psem, 0, 1) ||
			pthread_create(&p, NULL, producer, (void *)3L) ||
			pthread_create(&c, NULL, consumer, (void *)3L))
		return 1;
	if (pthread_join(p, NULL) || pthread_join(c, NULL) || produced != 3)
		return 2;
	/* A handler of the program's starts the shim's poster thread
	 * (sigwrap.c): that one must not keep the process alive either. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_exit_usr1;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL))
		return 3;
	pthread_exit(NULL);
}

/* ---- nomem ---- */

static int
case_nomem(void *arg)
{
	pthread_mutexattr_t ma[4], *pma[5];
	pthread_mutex_t mtx;
	struct rlimit rl = { 64 << 20, 64 << 20 };
	void *ptr, *prev = NULL;
	int ret[5], bad = 0;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	(void)arg;
#if defined(__SANITIZE_ADDRESS__)
	return 0;       /* ASan's shadow memory does not fit any RLIMIT_AS */
#endif
	for (int i = 0; i < 4; i++) {
		pma[i] = &ma[i];
		pthread_mutexattr_init(pma[i]);
	}
	pma[4] = NULL;
	pthread_mutexattr_settype(pma[1], PTHREAD_MUTEX_NORMAL);
	pthread_mutexattr_settype(pma[2], PTHREAD_MUTEX_RECURSIVE);
	pthread_mutexattr_settype(pma[3], PTHREAD_MUTEX_ERRORCHECK);
	if (setrlimit(RLIMIT_AS, &rl))
		return 3;
	while ((ptr = malloc(page))) {
		*(void **)ptr = prev;
		prev = ptr;
	}
	while ((ptr = malloc(sizeof(void *)))) {
		*(void **)ptr = prev;
		prev = ptr;
	}
	/* Some heap back, as a program's own frees would give: the library's
	 * small allocations succeed, a thread's stack cannot be mapped. */
	for (int i = 0; i < 20000 && prev; i++) {
		ptr = prev;
		prev = *(void **)ptr;
		free(ptr);
	}
	for (int i = 0; i < 5; i++)
		if (!(ret[i] = pthread_mutex_init(&mtx, pma[i])))
			pthread_mutex_destroy(&mtx);
	while (prev) {
		ptr = prev;
		prev = *(void **)ptr;
		free(ptr);
	}
	if (getenv("SHIM_DEFECTS_VERBOSE"))
		fprintf(stderr, "pthread_mutex_init with memory full: %d %d %d %d %d\n", ret[0], ret[1], ret[2],
				ret[3], ret[4]);
	for (int i = 0; i < 5; i++)
		if (ret[i] != 0 && ret[i] != ENOMEM) {
			fprintf(stderr, "pthread_mutex_init with attribute %d and memory full: %d\n", i, ret[i]);
			bad = 1;
		}
	return bad;
}

/* ---- handler ---- */

enum { KICKS = 5000 };

static sem_t work, sig;
static int handled, stop_work;

static void
on_usr1(int signo)
{
	(void)signo;
	if (sem_post(&sig) == 0)
		__atomic_fetch_add(&handled, 1, __ATOMIC_SEQ_CST);
}

static void *
worker(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stop_work, __ATOMIC_SEQ_CST)) {
		sem_post(&work);
		sem_wait(&work);
	}
	return NULL;
}

static int
case_handler(void *arg)
{
	struct sigaction sa;
	struct timespec at;
	pthread_t t;
	int bad = 0, v = -1, got = 0;

	(void)arg;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sem_init(&work, 0, 0) || sem_init(&sig, 0, 0) || sigaction(SIGUSR1, &sa, NULL) ||
			pthread_create(&t, NULL, worker, NULL))
		return 1;
	/* Many: the window where the worker takes a token is short. */
	for (int i = 0; i < KICKS; i++) {
		pthread_kill(t, SIGUSR1);
		if (i % 8 == 0)
			usleep(100);
	}
	__atomic_store_n(&stop_work, 1, __ATOMIC_SEQ_CST);
	pthread_join(t, NULL);
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 30;
	while (got < __atomic_load_n(&handled, __ATOMIC_SEQ_CST) && sem_timedwait(&sig, &at) == 0)
		got++;
	if (getenv("SHIM_DEFECTS_VERBOSE"))
		fprintf(stderr, "%d handlers posted, %d posts arrived\n", handled, got);
	if (got != handled || handled == 0) {
		fprintf(stderr, "%d handlers posted, %d posts arrived\n", handled, got);
		bad = 1;
	}
	if (sem_getvalue(&sig, &v) || v != 0) {
		fprintf(stderr, "after every post was taken the value is %d\n", v);
		bad = 1;
	}
	return bad;
}

/* ---- seen ---- */

enum { SEEN_ROUNDS = 300 };

static sem_t seen_sem;

static void
on_alrm(int signo)
{
	(void)signo;
	sem_post(&seen_sem);
}

static int
seen_child(void *arg)
{
	int v = -1;

	(void)arg;
	raise(SIGALRM);
	if (sem_getvalue(&seen_sem, &v) || v != 1) {
		fprintf(stderr, "forked child: after the handler's post the value is %d, want 1\n", v);
		return 1;
	}
	return sem_trywait(&seen_sem) != 0;
}

static int
case_seen(void *arg)
{
	struct sigaction sa;
	int bad = 0, v;

	(void)arg;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alrm;
	sigemptyset(&sa.sa_mask);
	if (sem_init(&seen_sem, 0, 0) || sigaction(SIGALRM, &sa, NULL))
		return 1;
	for (int i = 0; i < SEEN_ROUNDS && !bad; i++) {
		/* raise() returns after the handler has run on this thread. */
		raise(SIGALRM);
		v = -1;
		if (sem_getvalue(&seen_sem, &v) || v != 1) {
			fprintf(stderr, "round %d: after the handler's post the value is %d, want 1\n", i, v);
			bad = 1;
		}
		raise(SIGALRM);
		if (sem_trywait(&seen_sem) || sem_trywait(&seen_sem)) {
			fprintf(stderr, "round %d: the handlers' posts not there for trywait (errno %d)\n", i, errno);
			bad = 1;
		}
	}
	return bad || th_wait_child(th_spawn(seen_child, NULL), 20000) != 0;
}

/* ---- rwexit ---- */

static pthread_rwlock_t rwx;
static int rwx_state;

static void *
rwx_taker(void *arg)
{
	int write = arg != NULL, r;
	struct timespec at;

	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 20;
	__atomic_store_n(&rwx_state, 1, __ATOMIC_SEQ_CST);
	r = write ? pthread_rwlock_timedwrlock(&rwx, &at) : pthread_rwlock_timedrdlock(&rwx, &at);
	if (!r && !write)
		r = pthread_rwlock_rdlock(&rwx);
	__atomic_store_n(&rwx_state, r ? -1 : 2, __ATOMIC_SEQ_CST);
	/* Returns holding it. */
	return NULL;
}

static int
rwx_round(int write)
{
	pthread_t t;
	long long t0;
	int err;

	if (pthread_rwlock_init(&rwx, NULL) || pthread_rwlock_wrlock(&rwx))
		return 1;
	__atomic_store_n(&rwx_state, 0, __ATOMIC_SEQ_CST);
	pthread_create(&t, NULL, rwx_taker, write ? &rwx : NULL);
	t0 = th_now_ms();
	while (__atomic_load_n(&rwx_state, __ATOMIC_SEQ_CST) != 1 && th_now_ms() - t0 < 10000)
		usleep(1000);
	usleep(200000);         /* let it block (as LTP's sleep; not the outcome) */
	if (pthread_rwlock_unlock(&rwx))
		return 1;
	pthread_join(t, NULL);
	if (__atomic_load_n(&rwx_state, __ATOMIC_SEQ_CST) != 2) {
		fprintf(stderr, "%s: the thread did not get the lock\n", write ? "timedwrlock" : "timedrdlock");
		return 1;
	}
	if ((err = pthread_rwlock_destroy(&rwx))) {
		fprintf(stderr, "%s: destroy after the holder's thread returned: %d, want 0\n",
				write ? "timedwrlock" : "timedrdlock", err);
		return 1;
	}
	if (pthread_rwlock_init(&rwx, NULL) || (err = pthread_rwlock_trywrlock(&rwx))) {
		fprintf(stderr, "%s: trywrlock after the holder's thread returned: %d, want 0\n",
				write ? "timedwrlock" : "timedrdlock", err);
		return 1;
	}
	pthread_rwlock_unlock(&rwx);
	return pthread_rwlock_destroy(&rwx) != 0;
}

static int
case_rwexit(void *arg)
{
	(void)arg;
	return rwx_round(0) | rwx_round(1) << 1;
}

/* ---- reinit ---- */

static pthread_mutex_t ri_m;
static int ri_locked;

static void *
ri_locker(void *arg)
{
	(void)arg;
	if (!pthread_mutex_lock(&ri_m))
		__atomic_store_n(&ri_locked, 1, __ATOMIC_SEQ_CST);
	return NULL;    /* holding it */
}

static int
ri_round(int round)
{
	pthread_mutexattr_t a;
	struct timespec at;
	pthread_t t;
	long long t0;
	int r;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	if ((r = pthread_mutex_init(&ri_m, &a))) {
		fprintf(stderr, "round %d: pthread_mutex_init %d\n", round, r);
		return 1;
	}
	__atomic_store_n(&ri_locked, 0, __ATOMIC_SEQ_CST);
	if (pthread_create(&t, NULL, ri_locker, NULL) || pthread_detach(t))
		return 1;
	t0 = th_now_ms();
	while (!__atomic_load_n(&ri_locked, __ATOMIC_SEQ_CST) && th_now_ms() - t0 < 10000)
		usleep(1000);
	if (!__atomic_load_n(&ri_locked, __ATOMIC_SEQ_CST)) {
		fprintf(stderr, "round %d: the thread did not get the mutex initialized again\n", round);
		return 1;
	}
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 10;
	if ((r = pthread_mutex_timedlock(&ri_m, &at)) != EOWNERDEAD) {
		fprintf(stderr, "round %d: timedlock after the holder's thread returned: %d, want EOWNERDEAD\n",
				round, r);
		return 1;
	}
	/* Left locked and inconsistent, not destroyed, as musl's test does. */
	return 0;
}

static int
case_reinit(void *arg)
{
	int bad = 0;

	(void)arg;
	for (int i = 0; i < 3 && !bad; i++)
		bad = ri_round(i);
	return bad;
}

/* ---- eintr ---- */

static pthread_t waiter_thread;

static void
on_usr2(int signo)
{
	(void)signo;
}

static void *
kicker(void *arg)
{
	(void)arg;
	usleep(300000);
	pthread_kill(waiter_thread, SIGUSR2);
	return NULL;
}

/* -1 and EINTR from wait, within a few seconds of the signal. */
static int
interrupted(int timed)
{
	struct timespec at;
	pthread_t k;
	long long t0 = th_now_ms();
	int r, e;

	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 20;
	pthread_create(&k, NULL, kicker, NULL);
	r = timed ? sem_timedwait(&sig, &at) : sem_wait(&sig);
	e = errno;
	pthread_join(k, NULL);
	if (r != -1 || e != EINTR || th_now_ms() - t0 > 5000) {
		fprintf(stderr, "%s: %d errno %d after %lld ms, want -1 EINTR\n", timed ? "sem_timedwait" : "sem_wait",
				r, e, th_now_ms() - t0);
		return 1;
	}
	return 0;
}

static int
case_eintr(void *arg)
{
	struct sigaction sa;

	(void)arg;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr2;
	sa.sa_flags = 0;        /* no SA_RESTART, as LTP's */
	sigemptyset(&sa.sa_mask);
	waiter_thread = pthread_self();
	if (sem_init(&sig, 0, 0) || sigaction(SIGUSR2, &sa, NULL))
		return 1;
	return interrupted(0) | interrupted(1) << 1;
}

/* ---- smalllog ---- */

static pthread_mutex_t sl_m;
static pthread_cond_t sl_c;

static void *
sl_thread(void *arg)
{
	struct timespec at;

	(void)arg;
	/* Not holding the mutex: EPERM, and an error line. */
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 5;
	return (void *)(long)pthread_cond_timedwait(&sl_c, &sl_m, &at);
}

static int
case_smalllog(void *arg)
{
	pthread_attr_t at;
	pthread_t t;
	void *r = NULL;

	(void)arg;
	if (pthread_mutex_init(&sl_m, NULL) || pthread_cond_init(&sl_c, NULL))
		return 1;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, (size_t)sysconf(_SC_THREAD_STACK_MIN));
	for (int i = 0; i < 3; i++) {
		if (pthread_create(&t, &at, sl_thread, NULL) || pthread_join(t, &r))
			return 2;
		if ((long)r != EPERM) {
			fprintf(stderr, "pthread_cond_timedwait without the mutex: %ld, want EPERM\n", (long)r);
			return 3;
		}
	}
	return 0;
}

/* ---- cancellog ---- */

static pthread_mutex_t cl_a = PTHREAD_MUTEX_INITIALIZER, cl_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cl_c = PTHREAD_MUTEX_INITIALIZER;
static volatile int cl_step;

static void *
cl_thread(void *arg)
{
	(void)arg;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_cancel(pthread_self());
	pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
	if (!pthread_mutex_lock(&cl_a) && !pthread_mutex_unlock(&cl_a))
		cl_step = 1;
	if (!pthread_mutex_lock(&cl_b) && !pthread_mutex_unlock(&cl_b))
		cl_step = 2;
	pthread_testcancel();
	cl_step = 3;
	return NULL;
}

static void *
cl_other(void *arg)
{
	(void)arg;
	if (!pthread_mutex_lock(&cl_c) && !pthread_mutex_unlock(&cl_c))
		return (void *)1;
	return NULL;
}

static int
case_cancellog(void *arg)
{
	struct timespec at;
	pthread_t t;
	void *r = NULL;

	(void)arg;
	if (pthread_create(&t, NULL, cl_thread, NULL) || pthread_join(t, &r))
		return 1;
	if (r != PTHREAD_CANCELED || cl_step != 2) {
		fprintf(stderr, "cancelled at step %d (want 2, at its own pthread_testcancel)\n", cl_step);
		return 2;
	}
	/* A static mutex binds under the names' lock: left locked, this
	 * would wait for ever. */
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 10;
	if (pthread_create(&t, NULL, cl_other, NULL) || pthread_timedjoin_np(t, &r, &at) || r != (void *)1) {
		fprintf(stderr, "another static mutex could not be bound\n");
		return 3;
	}
	return 0;
}

/* ---- herd ---- */

enum { HERD = 150, NEWS = 60 };

static sem_t herd[HERD];
static int herd_in;

static void *
herd_sleeper(void *arg)
{
	sem_t *s = arg;

	__atomic_fetch_add(&herd_in, 1, __ATOMIC_SEQ_CST);
	sem_wait(s);
	return NULL;
}

static long
switches(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_nvcsw + ru.ru_nivcsw;
}

/* The server's channels with a subscriber (every sleeper's is there), and
 * one of them. */
static long
channels(char *one, size_t len)
{
	redisReply *r = th_redis_cmd(&srv, "PUBSUB CHANNELS *");
	long n = r && r->type == REDIS_REPLY_ARRAY ? (long)r->elements : -1;

	if (n > 0 && one)
		snprintf(one, len, "%s", r->element[0]->str);
	if (r)
		freeReplyObject(r);
	return n;
}

/* News on one sleeper's channel (as a post elsewhere would publish): that
 * sleeper looks again and sleeps on; the others must not even wake. */
static int
case_herd(void *arg)
{
	pthread_t t[HERD];
	pthread_attr_t at;
	char channel[256] = "";
	long before, used;
	int bad = 0;

	(void)arg;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 256 << 10);
	for (int i = 0; i < HERD; i++)
		if (sem_init(&herd[i], 0, 0) || pthread_create(&t[i], &at, herd_sleeper, &herd[i]))
			return 1;
	for (long long until = th_now_ms() + 30000; th_now_ms() < until &&
			(__atomic_load_n(&herd_in, __ATOMIC_SEQ_CST) < HERD || channels(NULL, 0) < HERD);)
		usleep(10000);
	if (channels(channel, sizeof channel) < HERD)
		return 2;
	before = switches();
	for (int i = 0; i < NEWS; i++) {
		redisReply *r = th_redis_cmd(&srv, "PUBLISH %s x", channel);

		if (r)
			freeReplyObject(r);
		usleep(2000);
	}
	used = switches() - before;
	if (getenv("SHIM_DEFECTS_VERBOSE") || used > HERD * NEWS / 4) {
		fprintf(stderr, "%d messages to one of %d sleeping threads: %ld context switches\n", NEWS, HERD,
				used);
		bad = used > HERD * NEWS / 4;
	}
	for (int i = 0; i < HERD; i++)
		sem_post(&herd[i]);
	for (int i = 0; i < HERD; i++)
		pthread_join(t[i], NULL);
	return bad;
}

/* ---- runner ---- */

struct one {
	const char *name;
	int (*fn)(void *);
	int timeout_ms;
};

static const struct one cases[] = {
	{ "destroy", case_destroy, 60000 },
	{ "exit", case_exit, 15000 },
	{ "nomem", case_nomem, 30000 },
	{ "handler", case_handler, 60000 },
	{ "seen", case_seen, 60000 },
	{ "rwexit", case_rwexit, 60000 },
	{ "reinit", case_reinit, 60000 },
	{ "eintr", case_eintr, 30000 },
	{ "herd", case_herd, 90000 },
	{ "smalllog", case_smalllog, 30000 },
	{ "cancellog", case_cancellog, 30000 },
};

int
main(int argc, char **argv)
{
	const struct one *k = NULL;
	int st;

	for (size_t i = 0; argc > 1 && i < sizeof cases / sizeof cases[0]; i++)
		if (!strcmp(argv[1], cases[i].name))
			k = &cases[i];
	if (!k) {
		fprintf(stderr, "usage: %s CASE\n", argv[0]);
		return 2;
	}
	if (th_redis_start(&srv, NULL)) {
		fprintf(stderr, "redis-server did not start\n");
		return 1;
	}
	setenv("DMUTEX_URL", srv.url, 1);
	setenv("DMUTEX_NAMESPACE", "shimdefects", 1);
	st = th_wait_child(th_spawn(k->fn, NULL), k->timeout_ms);
	if (st != 0)
		fprintf(stderr, "case %s: %s %d\n", k->name, st < 0 ? "timed out" : st > 128 ? "killed by signal" : "status",
				st > 128 ? st - 128 : st);
	EXPECT(st == 0);
	th_redis_stop(&srv);
	return th_check_status();
}
