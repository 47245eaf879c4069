/*
 * Which processes use an object the shim names from its source line and
 * whose state outlives a hold: a semaphore of sem_init (its count), a
 * robust mutex (its owner-died and not-recoverable state).  That state
 * lives in the backend under the object's name, so a second run of the
 * same program would find what the first one left: the count of the last
 * run, a mutex still not recoverable.
 *
 * Each process using such an object holds a read share of the
 * read-write lock "NAME users" for as long as it does; the share is a
 * lease, renewed while the process lives, ended at exit and, when the
 * process dies, by its lease running out.  A process whose try for the
 * write lock succeeds is the only one there: what is stored was left by
 * processes that are gone, and it starts the object afresh before taking
 * its share.  The last one to leave (destroy, or exit) removes the state
 * the same way.  Processes starting together: the write lock lets one
 * reset at a time, and none resets under a process that has joined, for
 * no try for the write lock succeeds while that one holds its share: as
 * long as it holds it, that is; a share lost (on_lost) is taken again.
 *
 * A share belongs to the thread that took it and ends with it (client.c);
 * the program's threads come and go, so one thread of ours takes and
 * gives every share of the process.
 *
 * A forked child uses what its parent initialized without initializing
 * it: it takes shares of its own (never starting afresh) at its first
 * semaphore call, and a process that has forked does not drop the state
 * when it leaves last, since a child may not have taken its share yet.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "users.h"
#include "core/shim.h"

#define SUFFIX " users"
/* How long exit waits for the shares to be given back: an exit must not
 * hang on a backend that is away (the leases then run out). */
#define EXIT_WAIT_S 3

struct member {
	struct member *next;
	drwlock_t rw;
	unsigned refs;
	int lost;               /* its share ran out: to be taken again */
	int (*last)(const char *name);
	char un[DMUTEX_NAME_MAX + 1];   /* its users lock's */
	char name[];
};

/* A users lock whose share was lost (on_lost), for the helper. */
struct lost {
	struct lost *next;
	char name[];
};

enum { JOIN, LEAVE, LEAVE_ALL, ADOPT };

struct req {
	struct req *next;
	int op;
	const char *name;
	int (*fresh)(const char *name);
	int (*last)(const char *name);
	int err, done;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER, finished = PTHREAD_COND_INITIALIZER;
static struct req *head, **tail = &head;
static struct member *members;  /* the helper's own */
static struct member *parents;  /* a forked child's parent's: not ours */
static int running;
static pid_t helper_pid;
static pthread_t helper;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int atexit_set;
static unsigned joined;         /* atomic: members, for the fork handler */
static int forked;              /* atomic: this process forked since it joined */
static int adopt_pending;       /* atomic: a child's inherited names to join */
static struct lost *lostq;      /* under mu */
static int relost;              /* the helper's: a member has lost its share */

static struct member *
find(const char *name)
{
	struct member *m;

	for (m = members; m && strcmp(m->name, name); m = m->next)
		;
	return m;
}

/* "NAME users": kept in DMUTEX_NAME_MAX by cutting NAME, so that two long
 * names may share one lock; they then only keep each other from being
 * reset, never reset each other. */
static void
users_name(const char *name, char out[DMUTEX_NAME_MAX + 1])
{
	size_t n = strlen(name), room = DMUTEX_NAME_MAX - (sizeof SUFFIX - 1);

	if (n > room)
		n = room;
	memcpy(out, name, n);
	memcpy(out + n, SUFFIX, sizeof SUFFIX);
}

/*
 * A share lost while the process lives (the backend away, or the process
 * stopped, for longer than the lease): a process starting meanwhile found
 * no users and may have started the object afresh under us; that cannot be
 * undone, but a later one must not do it again, so the helper takes the
 * share again as soon as it can.  Called on the renewal thread (or on a
 * caller's, reporting), never holding mu.
 */
static void
on_lost(const char *name, void *arg)
{
	size_t n = strlen(name);
	struct lost *l = malloc(sizeof *l + n + 1);

	(void)arg;
	if (!l)
		return;
	memcpy(l->name, name, n + 1);
	pthread_mutex_lock(&mu);
	l->next = lostq;
	lostq = l;
	pthread_cond_signal(&work);
	pthread_mutex_unlock(&mu);
}

/* The helper's: the members named in l marked lost, l freed. */
static void
mark_lost(struct lost *l)
{
	struct lost *next;
	struct member *m;

	for (; l; l = next) {
		next = l->next;
		for (m = members; m; m = m->next)
			if (!strcmp(m->un, l->name))
				relost = m->lost = 1;
		free(l);
	}
}

/* The helper's: each lost share taken again, as a reader only (no reset:
 * the object is in use, ours); one the backend refuses stays marked, for
 * the next second. */
static void
retake(void)
{
	struct member *m;
	int err;

	relost = 0;
	for (m = members; m; m = m->next) {
		if (!m->lost)
			continue;
		drwlock_unlock(&m->rw);         /* ENOLCK: our count forgotten */
		if ((err = drwlock_rdlock(&m->rw))) {
			relost = 1;
			continue;
		}
		m->lost = 0;
		dmutex__log(DMUTEX_LOG_WARN, "'%s': the share was lost and is taken again; a process that "
				"started while it was lost may have started '%s' afresh", m->un, m->name);
	}
}

static int
join(const char *name, int (*fresh)(const char *), int (*last)(const char *))
{
	struct member *m = find(name);
	size_t n = strlen(name);
	dmutex_attr_t a;
	int err;

	if (m) {
		m->refs++;
		return 0;
	}
	if (!(m = calloc(1, sizeof *m + n + 1)))
		return ENOMEM;
	memcpy(m->name, name, n + 1);
	users_name(name, m->un);
	dmutex_attr_init(&a);
	dmutex_attr_setonlost(&a, on_lost, NULL);
	err = drwlock_init(&m->rw, m->un, &a);
	dmutex_attr_destroy(&a);
	if (err) {
		free(m);
		/* A client over several masters has no read-write locks: no
		 * run is told from the next there. */
		return err == ENOTSUP ? 0 : err;
	}
	if (!(err = drwlock_trywrlock(&m->rw))) {
		err = fresh ? fresh(name) : 0;
		if (drwlock_unlock(&m->rw) && !err)
			err = EIO;
	} else if (err == EBUSY) {
		err = 0;
	}
	if (!err)
		err = drwlock_rdlock(&m->rw);
	if (err) {
		drwlock_destroy(&m->rw);
		free(m);
		return err == ENOTSUP ? 0 : err;
	}
	m->refs = 1;
	m->last = last;
	/* Linked under mu, which a fork holds (prepare): a child never
	 * copies a member half linked. */
	pthread_mutex_lock(&mu);
	m->next = members;
	members = m;
	pthread_mutex_unlock(&mu);
	__atomic_fetch_add(&joined, 1, __ATOMIC_ACQ_REL);
	return 0;
}

static void
leave_member(struct member *m)
{
	drwlock_unlock(&m->rw);
	if (m->last && !__atomic_load_n(&forked, __ATOMIC_ACQUIRE) && !drwlock_trywrlock(&m->rw)) {
		m->last(m->name);
		drwlock_unlock(&m->rw);
	}
	drwlock_destroy(&m->rw);
	free(m);
	__atomic_fetch_sub(&joined, 1, __ATOMIC_ACQ_REL);
}

static void
leave(const char *name)
{
	struct member **pp, *m;

	for (pp = &members; (m = *pp) && strcmp(m->name, name); pp = &m->next)
		;
	if (!m || --m->refs)
		return;
	pthread_mutex_lock(&mu);        /* as join's link */
	*pp = m->next;
	pthread_mutex_unlock(&mu);
	leave_member(m);
}

static void
leave_all(void)
{
	struct member *m;

	for (;;) {
		pthread_mutex_lock(&mu);
		if ((m = members))
			members = m->next;
		pthread_mutex_unlock(&mu);
		if (!m)
			break;
		leave_member(m);
	}
}

/* A forked child's shares of what its parent had joined: joined as the
 * parent's users, never afresh (the parent may be gone already, the state
 * is the child's now). */
static void
adopt(void)
{
	struct member *m;

	for (m = parents; m; m = m->next)
		if (m->refs && !find(m->name) && !join(m->name, NULL, m->last))
			m->refs = 0;
}

static void *
helper_main(void *arg)
{
	struct req *r;
	struct lost *l;
	struct timespec at;
	int again;

	(void)arg;
	dmutex__shim_own_thread();
	pthread_mutex_lock(&mu);
	for (;;) {
		/* Never for ever: the program may have ended under us. */
		for (again = 0; !head && !lostq && !again; ) {
			clock_gettime(CLOCK_REALTIME, &at);
			at.tv_sec++;
			if (pthread_cond_timedwait(&work, &mu, &at) == ETIMEDOUT) {
				pthread_mutex_unlock(&mu);
				dmutex__shim_exit_if_alone();
				pthread_mutex_lock(&mu);
				again = relost;
			}
		}
		l = lostq;
		lostq = NULL;
		if ((r = head) && !(head = r->next))
			tail = &head;
		pthread_mutex_unlock(&mu);
		mark_lost(l);
		if (relost)
			retake();
		if (!r) {
			pthread_mutex_lock(&mu);
			continue;
		}
		r->err = 0;
		if (r->op == JOIN)
			r->err = join(r->name, r->fresh, r->last);
		else if (r->op == LEAVE)
			leave(r->name);
		else if (r->op == ADOPT)
			adopt();
		else
			leave_all();
		pthread_mutex_lock(&mu);
		r->done = 1;
		pthread_cond_broadcast(&finished);
	}
	return NULL;
}

/* A process with its parent's shares (joined or still to join) has
 * forked too: its child inherited them and may not have taken its own. */
static void
prepare(void)
{
	pthread_mutex_lock(&mu);
}

static void
parent(void)
{
	pthread_mutex_unlock(&mu);
	if (__atomic_load_n(&joined, __ATOMIC_ACQUIRE) || __atomic_load_n(&adopt_pending, __ATOMIC_ACQUIRE) ||
			parents)
		__atomic_store_n(&forked, 1, __ATOMIC_RELEASE);
}

/* A forked child has no helper and none of the parent's shares: it takes
 * its own at its first semaphore call (dmutex__shim_users_adopt). */
static void
child(void)
{
	pthread_mutex_init(&mu, NULL);
	pthread_cond_init(&work, NULL);
	pthread_cond_init(&finished, NULL);
	head = NULL;
	tail = &head;
	/* The parent's shares lost: its helper takes them again, not ours. */
	while (lostq) {
		struct lost *l = lostq;
		lostq = l->next;
		free(l);
	}
	relost = 0;
	/* Kept reachable, never used: the parent's. */
	if (members) {
		struct member *m = members;
		while (m->next)
			m = m->next;
		m->next = parents;
		parents = members;
		members = NULL;
		__atomic_store_n(&adopt_pending, 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&forked, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&joined, 0, __ATOMIC_RELEASE);
	running = 0;
}

static void atfork_set(void)
{
	pthread_atfork(prepare, parent, child);
}

/* Under mu. */
static int
start(void)
{
	sigset_t all, old;
	int err;

	if (running && helper_pid == getpid())
		return 0;
	/* Ours: no signal of the program's is delivered here. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&helper, NULL, helper_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return err;
	pthread_detach(helper);
	running = 1;
	helper_pid = getpid();
	return 0;
}

/* mu, waited for at most until `until` (0: for ever). */
static int
lock_mu(const struct timespec *until)
{
	return until ? pthread_mutex_timedlock(&mu, until) : pthread_mutex_lock(&mu);
}

/* r queued and waited for, at most until `until` (0: for ever): 0, or
 * ETIMEDOUT with r left to the helper.  Not a cancellation point: the
 * calls that ask (sem_init, sem_destroy, a robust mutex's init and
 * destroy) are none, and a thread cancelled in the wait would end holding
 * mu, leaving the helper, every later ask and exit waiting for ever. */
static int
ask(struct req *r, const struct timespec *until)
{
	int cs = dmutex__nocancel(), err;

	pthread_once(&atfork_once, atfork_set);
	if ((err = lock_mu(until))) {
		dmutex__cancel_restore(cs);
		return err;
	}
	if ((err = start())) {
		pthread_mutex_unlock(&mu);
		dmutex__cancel_restore(cs);
		return err;
	}
	r->done = 0;
	r->next = NULL;
	*tail = r;
	tail = &r->next;
	pthread_cond_signal(&work);
	while (!r->done && !err)
		err = until ? pthread_cond_timedwait(&finished, &mu, until)
			: pthread_cond_wait(&finished, &mu);
	pthread_mutex_unlock(&mu);
	dmutex__cancel_restore(cs);
	return r->done ? 0 : err;
}

/* At exit the process leaves everything it joined: the next run must not
 * wait for its leases to run out to start afresh. */
static void
at_exit(void)
{
	static struct req r = { .op = LEAVE_ALL };     /* the helper may outlast us */
	struct timespec at;
	int go;

	/* Bounded from the start, mu too: whatever holds it, exit goes on. */
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += EXIT_WAIT_S;
	if (lock_mu(&at))
		return;
	go = running && helper_pid == getpid();
	pthread_mutex_unlock(&mu);
	if (!go)
		return;
	if (pthread_equal(pthread_self(), helper)) {
		leave_all();
		return;
	}
	ask(&r, &at);
}

int
dmutex__shim_users_join(const char *name, int (*fresh)(const char *name),
		int (*last)(const char *name))
{
	struct req r = { .op = JOIN, .name = name, .fresh = fresh, .last = last };
	int cs, err = ask(&r, NULL);

	if (err)
		return err;
	/* After the first join, which made the first connection: our exit
	 * handler then runs before the library's own (dial.c), which would
	 * end our connections under us. */
	cs = dmutex__nocancel();
	pthread_mutex_lock(&mu);
	if (!r.err && !atexit_set && !atexit(at_exit))
		atexit_set = 1;
	pthread_mutex_unlock(&mu);
	dmutex__cancel_restore(cs);
	return r.err;
}

void
dmutex__shim_users_leave(const char *name)
{
	struct req r = { .op = LEAVE, .name = name };

	ask(&r, NULL);
}

void
dmutex__shim_users_adopt(void)
{
	struct req r = { .op = ADOPT };

	if (__atomic_exchange_n(&adopt_pending, 0, __ATOMIC_ACQ_REL))
		ask(&r, NULL);
}
