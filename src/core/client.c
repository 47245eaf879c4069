/* Client lifetime, the default client, and what fork and exit do to holds. */
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "internal.h"
#include "base/lockorder.h"
#include "metrics.h"
#include "shim.h"

/* The lock server when neither the caller nor DMUTEX_URL names one. */
#define DEFAULT_URL "redis://127.0.0.1:6379"

static pthread_mutex_t clients_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dmutex_client *clients;   /* every open client, clients_mu */
static struct dmutex_client *default_client;
static pthread_mutex_t default_mu = PTHREAD_MUTEX_INITIALIZER;   /* opening it */
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

/*
 * Take every lock that guards a table the child inherits, in the order of
 * internal.h's hierarchy, one level at a time across all clients (every
 * client.mu, then every renewer.mu, ...), log_mu last: a thread that holds
 * node.mu and logs ("reachable again") takes them in that order too, so
 * taking log_mu first deadlocked fork against a reconnect (issue 16 item 7).
 * default_mu is not taken (an open may connect for seconds): the child
 * makes it anew.
 */
static pthread_mutex_t holds_mu;       /* below, with the holds */
static void holds_atfork_child(void);

static void
atfork_prepare(void)
{
	struct dmutex_client *c;

	dmutex__waiter_create_lock();
	dmutex__lo_acquired(DMUTEX__LK_CREATE, "fork: create_mu");
	dmutex__mu_lock(&clients_mu, DMUTEX__LK_CLIENTS, "fork: clients_mu");
	for (c = clients; c; c = c->next_all)
		dmutex__mu_lock(&c->mu, DMUTEX__LK_CLIENT, "fork: client.mu");
	for (c = clients; c; c = c->next_all)
		dmutex__mu_lock(&c->renewer.mu, DMUTEX__LK_RENEWER, "fork: renewer.mu");
	for (c = clients; c; c = c->next_all) {
		dmutex__waiter_lock(c->be);
		dmutex__lo_acquired(DMUTEX__LK_WAITER, "fork: waiter.mu");
	}
	for (c = clients; c; c = c->next_all)
		c->be->ops->atfork_prepare(c->be);
	dmutex__log_lock();
	pthread_mutex_lock(&holds_mu);
}

static void
atfork_parent(void)
{
	struct dmutex_client *c;

	pthread_mutex_unlock(&holds_mu);
	dmutex__log_unlock();
	for (c = clients; c; c = c->next_all)
		c->be->ops->atfork_parent(c->be);
	for (c = clients; c; c = c->next_all) {
		dmutex__lo_released(DMUTEX__LK_WAITER);
		dmutex__waiter_unlock(c->be);
	}
	for (c = clients; c; c = c->next_all)
		dmutex__mu_unlock(&c->renewer.mu, DMUTEX__LK_RENEWER);
	for (c = clients; c; c = c->next_all)
		dmutex__mu_unlock(&c->mu, DMUTEX__LK_CLIENT);
	dmutex__mu_unlock(&clients_mu, DMUTEX__LK_CLIENTS);
	dmutex__lo_released(DMUTEX__LK_CREATE);
	dmutex__waiter_create_unlock();
}

/*
 * The child holds none of its parent's locks and shares none of its
 * connections; the parent's threads do not exist here.  Entry mutexes may
 * have been held by parent threads at fork time: make them anew.
 */
static void
atfork_child(void)
{
	holds_atfork_child();
	dmutex__token_atfork_child();
	dmutex__own_atfork_child();
	dmutex__log_unlock();
	for (struct dmutex_client *c = clients; c; c = c->next_all) {
		/* Made anew below (renewer, waiter, backend): only the count. */
		dmutex__lo_released(DMUTEX__LK_RENEWER);
		dmutex__lo_released(DMUTEX__LK_WAITER);
		/* The backend's own (node.mu) in its atfork_child. */
		for (size_t i = 0; i < c->tab_size; i++)
			for (struct dmutex__entry *e = c->tab[i]; e; e = e->next) {
				dmutex__entry_init_sync(e);
				e->held = 0;
				e->acquiring = 0;
				e->dropping = 0;
				e->rw_wwait = 0;
				e->rw_rd_asking = 0;
				e->ngone = 0;   /* the parent's reader threads */
				/* A fair mutex's local queue names the parent's
				 * waiting threads, on their stacks: none of them is
				 * here, and a thread of the child queued behind
				 * them would wait for ever. */
				e->fifo_head = e->fifo_tail = NULL;
				/* The parent's kept leases are the parent's: forget
				 * them without a word to the waiter (made anew below);
				 * the child asks Redis, which says the parent holds it. */
				e->ksub = NULL;
				/* Nor does a parent thread's hold end here: the
				 * child counts from zero (dmutex__met_atfork_child),
				 * and the counters' mutex may be a parent thread's. */
				e->counted_ns = 0;
				memset(&e->met_local, 0, sizeof e->met_local);
				e->met_queued = 0;      /* see dmutex__met_atfork_child */
				dmutex__entry_forget(e);
				/* Nor is the parent's history of holds the child's:
				 * a child that locks once must release at its unlock
				 * (a child that keeps a lease and _exits holds the
				 * name for a whole lease). */
				e->last_end_ns = e->start_ns = e->last_use_ns = 0;
				e->nocache_until_ns = 0;
				e->registered = 0;
				/* The parent's releases: its to answer. */
				dmutex__entry_rel_drop(e);
			}
		c->held = 0;
		c->pid = getpid();
		c->be->ops->atfork_child(c->be);
		dmutex__waiter_atfork_child(c->be);
		dmutex__renewer_atfork_child(&c->renewer);
		dmutex__met_atfork_child(c);
		dmutex__mu_unlock(&c->mu, DMUTEX__LK_CLIENT);
	}
	dmutex__mu_unlock(&clients_mu, DMUTEX__LK_CLIENTS);
	dmutex__lo_released(DMUTEX__LK_CREATE);
	dmutex__waiter_create_unlock();
	/* Possibly held by a thread that was opening the default client. */
	pthread_mutex_init(&default_mu, NULL);
}

/*
 * Holds and the end of their thread (issue 12 item 4, issue 16 item 5).
 *
 * A hold ends when its thread unlocks, when its thread or process ends, or
 * when its lease is lost.  Each thread keeps the entries it holds in
 * thread-specific data: the key's destructor, which runs when the thread
 * returns or calls pthread_exit (glibc nptl and musl both run it before the
 * thread is gone), ends what is still held, marked owner-died.  exit() ends
 * only the holds of the thread calling it, from the library's destructor,
 * which runs after every atexit handler: a handler that joins workers
 * still inside their critical sections finds their holds intact.  Threads
 * still running when the process ends keep theirs until the process dies
 * and their lease runs out, as when the process is killed.
 */
struct thread_holds {
	struct thread_holds *next, **pprev;     /* all_holds */
	size_t n, cap;
	struct thread_hold {
		struct dmutex__entry *e;
		uint64_t gen;
		void (*end)(struct dmutex__entry *, const char *);  /* NULL: a mutex's */
	} *h;
};

static pthread_key_t holds_key;
static int holds_key_ok;
/* Every thread's record: a forked child frees those of its parent's other
 * threads, which do not exist there and would never end (the shim's
 * helper holds shares for ever, users.c).  A leaf: nothing is locked
 * under it. */
static pthread_mutex_t holds_mu = PTHREAD_MUTEX_INITIALIZER;
static struct thread_holds *all_holds;

static void
holds_link(struct thread_holds *t)
{
	pthread_mutex_lock(&holds_mu);
	if ((t->next = all_holds))
		all_holds->pprev = &t->next;
	t->pprev = &all_holds;
	all_holds = t;
	pthread_mutex_unlock(&holds_mu);
}

static void
holds_unlink(struct thread_holds *t)
{
	pthread_mutex_lock(&holds_mu);
	if ((*t->pprev = t->next))
		t->next->pprev = t->pprev;
	pthread_mutex_unlock(&holds_mu);
}

/* In a forked child: only the calling thread's record stays.  Their
 * entries' references stay taken (the entries stay in their client's
 * table, the holds forgotten there: atfork_child). */
static void
holds_atfork_child(void)
{
	struct thread_holds *t, *next, *own = holds_key_ok ? pthread_getspecific(holds_key) : NULL;

	pthread_mutex_init(&holds_mu, NULL);
	for (t = all_holds; t; t = next) {
		next = t->next;
		if (t != own) {
			free(t->h);
			free(t);
		}
	}
	all_holds = NULL;
	if (own)
		holds_link(own);
}

/* The owner, without e->mu: end the hold gen of e if it is still ours.
 * Every release of one thread's end shares one command timeout counted from
 * t0: a thread (or process) that ends holding 200 locks while the server is
 * down must not take 200 timeouts to go; what is not released by then is
 * retried in the background, or ends with its lease. */
static void
end_hold(struct dmutex__entry *e, uint64_t gen, const char *why, int64_t t0)
{
	struct dmutex_client *c = e->client;
	char token[DMUTEX__TOKEN_HEX + 1];
	struct dmutex__lost lost_rep = { 0 };
	struct dmutex__suspects sus = { 0 };
	struct dmutex__orphan_rep orep = { 0 };
	unsigned lease_ms;
	int robust, mode, err, lost, was_kept;

	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	if (!e->held || e->gen != gen || e->releasing || !pthread_equal(e->owner, pthread_self())) {
		dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
		return;
	}
	/* As an unlock (mutex_unlock.c): a loss already found is reported;
	 * one the release finds is reported too, and on a kept lease with
	 * every hold granted on it since its last confirmation (README "The
	 * fast paths" rule 2): the thread is gone, its onlost is not. */
	dmutex__entry_check_lost(e, dmutex__now_ns(), &lost_rep);
	lost = e->lost;
	was_kept = e->kept;
	memcpy(token, e->token, sizeof token);
	lease_ms = e->lease_ms;
	robust = e->robust;
	mode = DMUTEX__REL_DIED | (e->fair ? DMUTEX__REL_FAIR : 0);
	/* Unconfirmed, its release goes on in the background and reports a
	 * certain "not ours" as an unlock's does (mutex_unlock.c). */
	if (!lost && !was_kept)
		orep = (struct dmutex__orphan_rep){ .e = e, .valid_ns = e->deadline_ns,
			.fence = e->fence, .cb = e->onlost, .arg = e->onlost_arg };
	e->releasing = 1;
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__lost_report(e, &lost_rep);
	if (robust)
		dmutex__log(DMUTEX_LOG_INFO, "'%s': %s while holding it: released as owner-died "
				"(the next locker gets EOWNERDEAD)", e->name, why);
	else
		dmutex__log(DMUTEX_LOG_WARN, "'%s': %s while holding it: released", e->name, why);
	dmutex__renewer_remove(c, e);
	err = dmutex__renewer_release_rep(c, e->name, token, mode,
			t0 + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS, NULL, lease_ms, &orep);
	dmutex__mu_lock(&e->mu, DMUTEX__LK_ENTRY, "entry.mu");
	dmutex__kept_release_answered(e, err, lost, was_kept, &lost_rep, &sus);
	dmutex__entry_forget(e);
	dmutex__mu_unlock(&e->mu, DMUTEX__LK_ENTRY);
	dmutex__lost_report(e, &lost_rep);
	dmutex__kept_report(e, &sus);
}

static void
end_thread_holds(struct thread_holds *t, const char *why)
{
	int64_t t0 = dmutex__now_ns();

	holds_unlink(t);
	/* Latest first, as the thread would have unlocked them. */
	while (t->n) {
		struct thread_hold th = t->h[--t->n];
		if (th.end)
			th.end(th.e, why);
		else
			end_hold(th.e, th.gen, why, t0);
		dmutex__entry_put(th.e);
	}
	free(t->h);
	free(t);
}

static void
thread_exit(void *arg)
{
	int cs;

	/* Not a cancellation point inside, whatever ended the thread. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	end_thread_holds(arg, "its thread exited");
	pthread_setcancelstate(cs, NULL);
}

void
dmutex__thread_hold(struct dmutex__entry *e, uint64_t gen)
{
	dmutex__thread_hold_end(e, gen, NULL);
}

void
dmutex__thread_hold_end(struct dmutex__entry *e, uint64_t gen,
		void (*end)(struct dmutex__entry *, const char *why))
{
	struct thread_holds *t;
	int cs;

	if (!holds_key_ok)
		return;
	if (!(t = pthread_getspecific(holds_key))) {
		if (!(t = calloc(1, sizeof *t)) || pthread_setspecific(holds_key, t)) {
			free(t);
			goto nomem;
		}
		holds_link(t);
	}
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 4;
		struct thread_hold *h = realloc(t->h, cap * sizeof *h);
		if (!h)
			goto nomem;
		t->h = h;
		t->cap = cap;
	}
	/* A reference: the hold may outlive every dmutex_t of its name only
	 * in a forked child, which forgets it (gen moves on). */
	__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQ_REL);
	t->h[t->n].e = e;
	t->h[t->n].gen = gen;
	t->h[t->n].end = end;
	t->n++;
	return;
nomem:
	/* A log line's write is a cancellation point, and lock_fast calls
	 * us with cancellation enabled. */
	cs = dmutex__nocancel();
	dmutex__log(DMUTEX_LOG_WARN, "'%s': out of memory: the hold will not end with its thread", e->name);
	dmutex__cancel_restore(cs);
}

void
dmutex__thread_unhold(struct dmutex__entry *e)
{
	struct thread_holds *t;

	if (!holds_key_ok || !(t = pthread_getspecific(holds_key)))
		return;
	for (size_t i = t->n; i-- > 0;)
		if (t->h[i].e == e) {
			t->h[i] = t->h[--t->n];
			dmutex__entry_put(e);
			return;
		}
}

/*
 * The library's last destructor: after every atexit handler (glibc runs
 * ELF destructors from _dl_fini, which __libc_start_main registered before
 * any handler of the program).  Once a client exists the library is pinned
 * (pin_self), so this runs at process exit only, never at dlclose.
 */
__attribute__((destructor)) static void
at_exit(void)
{
	struct thread_holds *t;

	if (holds_key_ok && (t = pthread_getspecific(holds_key))) {
		pthread_setspecific(holds_key, NULL);
		end_thread_holds(t, "the process exited");
	}
	/* Leases kept for the process (lease_cache.c) that no thread holds:
	 * given back now, not left to their end, so another process does not
	 * wait for them.  One command timeout per client for all of them. */
	dmutex__mu_lock(&clients_mu, DMUTEX__LK_CLIENTS, "clients_mu");
	for (struct dmutex_client *c = clients; c; c = c->next_all)
		if (c->pid == getpid())
			dmutex__renewer_give_back_all(c, dmutex__now_ns() +
					(int64_t)c->cfg.command_timeout_ms * DMUTEX__MS);
	dmutex__mu_unlock(&clients_mu, DMUTEX__LK_CLIENTS);
}

/*
 * Our threads, fork handlers and thread-specific destructor run library
 * code: a plugin that uses dmutex and is unloaded with dlclose must not
 * unmap it under them (issue 16 item 1).  Pin the object that contains
 * this code (libdmutex.so, or the plugin it is linked into statically) as
 * ld -z nodelete would.  From a constructor before main this is harmless.
 */
static void
pin_self(void)
{
	struct link_map *lm = NULL;
	Dl_info info;
	void *h;

	if (!dladdr1((void *)pin_self, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return;
	/* Linked into the program itself (l_name ""): never unloaded. */
	if (!lm->l_name || !*lm->l_name)
		return;
	if (!(h = dlopen(lm->l_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE))) {
		dmutex__log(DMUTEX_LOG_WARN, "cannot pin %s in memory (%s): do not dlclose it",
				lm->l_name, dlerror());
		return;
	}
	/* NODELETE stays; the extra reference is not needed. */
	dlclose(h);
}

static void
install_hooks(void)
{
	pin_self();
	holds_key_ok = !pthread_key_create(&holds_key, thread_exit);
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/*
 * The backend cannot be reached at open (issue 17 item 3): one line that
 * names the URL tried, where it came from and how to change it.  A program
 * that keeps trying (every lock through the default client opens it again)
 * repeats it at most once per URL per UNREACHABLE_PERIOD_S, process-wide,
 * with the number of failures not logged meanwhile
 * (dmutex_client_open(3) says the same).
 */
#define UNREACHABLE_PERIOD_S 10
enum { URL_ARG, URL_ENV, URL_DEFAULT };

static pthread_mutex_t unreach_mu = PTHREAD_MUTEX_INITIALIZER;  /* alone: no other lock inside */
static struct {
	uint64_t key;           /* hash of the URL as displayed; 0: free */
	int64_t last_ns;
	unsigned suppressed;
} unreach[16];

/* -1: not now (counted); otherwise how many were not logged before. */
static long
unreachable_may_log(const char *url)
{
	uint64_t key = 1469598103934665603ULL;
	int64_t now = dmutex__now_ns();
	size_t i, victim = 0;
	long r;

	for (const char *p = url; *p; p++)
		key = (key ^ (unsigned char)*p) * 1099511628211ULL;
	key |= 1;
	pthread_mutex_lock(&unreach_mu);
	for (i = 0; i < sizeof unreach / sizeof *unreach; i++) {
		if (unreach[i].key == key)
			break;
		if (unreach[i].last_ns < unreach[victim].last_ns)
			victim = i;
	}
	if (i == sizeof unreach / sizeof *unreach) {
		/* New URL: take the slot used longest ago. */
		i = victim;
		unreach[i].key = key;
		unreach[i].last_ns = INT64_MIN;
		unreach[i].suppressed = 0;
	}
	if (unreach[i].last_ns != INT64_MIN &&
			now - unreach[i].last_ns < (int64_t)UNREACHABLE_PERIOD_S * 1000 * DMUTEX__MS) {
		unreach[i].suppressed++;
		r = -1;
	} else {
		r = (long)unreach[i].suppressed;
		unreach[i].suppressed = 0;
		unreach[i].last_ns = now;
	}
	pthread_mutex_unlock(&unreach_mu);
	return r;
}

static void
unreachable(const struct dmutex_client *c, int source, size_t up, size_t need)
{
	static const char *const from[] = {
		[URL_ARG] = "the URL given to dmutex_client_open; pass another one to change it",
		[URL_ENV] = "from DMUTEX_URL; change that variable to change it",
		[URL_DEFAULT] = ("the built-in default, as DMUTEX_URL is not set; set DMUTEX_URL=redis://HOST:PORT "
			"or pass a URL to dmutex_client_open to change it"),
	};
	char url[1024] = "", more[96] = "", nodes[128] = "", why[1024];
	size_t len = 0;
	long skipped;

	for (size_t i = 0; i < c->cfg.nnodes && len < sizeof url; i++)
		len += (size_t)snprintf(url + len, sizeof url - len, "%s%s", i ? "," : "",
				c->cfg.nodes[i].display);
	if ((skipped = unreachable_may_log(url)) < 0)
		return;
	if (skipped)
		snprintf(more, sizeof more, " (%ld more failures in the last %d s not logged)",
				skipped, UNREACHABLE_PERIOD_S);
	if (c->cfg.nnodes > 1)
		snprintf(nodes, sizeof nodes, ": %zu of %zu Redlock nodes reachable, %zu needed",
				up, c->cfg.nnodes, need);
	/* Why (timed out, refused, authentication...): opening logged each
	 * node's own failure at debug level only. */
	dmutex__backend_why(c->be, why, sizeof why);
	dmutex__log(DMUTEX_LOG_ERROR, "cannot reach the lock server at %s%s%s%s (%s)%s", url, nodes,
			why[0] ? ": " : "", why, from[source], more);
}

static int
verify(struct dmutex_client *c, int source)
{
	size_t up = 0, need = 1;
	int err, shortage;

	dmutex__short_take();   /* an older call's, not ours */
	err = c->be->ops->verify(c->be, &up, &need);
	/* Not the server's fault: no thread could be started to reach it
	 * (base.h).  Said as it is, and not retried by callers as EIO is. */
	if (err == EIO && (shortage = dmutex__short_take())) {
		dmutex__log(DMUTEX_LOG_ERROR, "cannot open the lock client: out of resources: cannot start a thread "
				"to connect to the server (%s)", strerror(shortage));
		return shortage;
	}
	if (err == EIO)
		unreachable(c, source, up, need);
	return err;
}

static void
free_client(struct dmutex_client *c)
{
	if (c->be)
		c->be->ops->destroy(c->be);
	dmutex__config_free(&c->cfg);
	dmutex__met_free(c);
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->renewer.mu);
	pthread_cond_destroy(&c->renewer.cv);
	free(c->tab);
	free(c);
}

static int
dmutex_client_open_impl(dmutex_client_t **out, const char *url)
{
	struct dmutex_client *c;
	int err, source = URL_ARG;

	if (!out)
		return EINVAL;
	if (!url || !*url) {
		url = getenv("DMUTEX_URL");
		source = URL_ENV;
	}
	if (!url || !*url) {
		url = DEFAULT_URL;
		source = URL_DEFAULT;
	}
	pthread_once(&hooks_once, install_hooks);
	/* Before this client's threads exist (token.c says why). */
	if ((err = dmutex__random_init()))
		return err;
	if (!(c = calloc(1, sizeof *c)))
		return ENOMEM;
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->renewer.mu, NULL);
	dmutex__cond_init_mono(&c->renewer.cv);
	c->up.watch_rel = dmutex__renewer_watch_rel;
	c->up.orphan = dmutex__renewer_orphan;
	c->up.orphan_rep = dmutex__renewer_orphan_rep;
	c->pid = getpid();
	if (gethostname(c->host, sizeof c->host - 1))
		strcpy(c->host, "unknown");
	dmutex__hostid(c->hostid, sizeof c->hostid);
	if ((err = dmutex__met_init(c)))
		goto fail;
	if ((err = dmutex__url_parse(url, &c->cfg)))
		goto fail;
	{
		const struct dmutex__backend_cfg bc = {
			.nodes = c->cfg.nodes, .nnodes = c->cfg.nnodes,
			.connect_timeout_ms = c->cfg.connect_timeout_ms,
			.command_timeout_ms = c->cfg.command_timeout_ms,
			.lease_ms = c->cfg.lease_ms, .node_timeout_ms = c->cfg.node_timeout_ms,
			.idle_ms = c->cfg.idle_ms, .prefix = c->cfg.prefix,
			.host = c->host, .hostid = c->hostid, .pid = &c->pid,
		};
		err = dmutex__backend_create(&bc, &c->be);
	}
	if (!err)
		err = verify(c, source);
	if (err)
		goto fail;
	/* The default lease as the backend grants it (etcd: whole seconds). */
	c->cfg.lease_ms = dmutex__backend_lease(c->be, c->cfg.lease_ms);
	dmutex__mu_lock(&clients_mu, DMUTEX__LK_CLIENTS, "clients_mu");
	c->next_all = clients;
	clients = c;
	dmutex__mu_unlock(&clients_mu, DMUTEX__LK_CLIENTS);
	*out = c;
	return 0;
fail:
	free_client(c);
	return err;
}

static int
dmutex_client_close_impl(dmutex_client_t *c)
{
	struct dmutex_client **pp;
	unsigned mutexes;

	if (!c)
		return EINVAL;
	if (__atomic_load_n(&c->held, __ATOMIC_ACQUIRE))
		return EBUSY;
	/* Not the entry count: the renewal thread may hold a passing
	 * reference to an entry whose last mutex was just destroyed. */
	if ((mutexes = __atomic_load_n(&c->mutexes, __ATOMIC_ACQUIRE))) {
		/* Their dmutex_t objects point into this client. */
		dmutex__log(DMUTEX_LOG_ERROR, "client close: %u mutexes or condition variables still "
				"initialized on it; destroy them first", mutexes);
		return EBUSY;
	}
	dmutex__mu_lock(&clients_mu, DMUTEX__LK_CLIENTS, "clients_mu");
	if (c == default_client) {
		dmutex__mu_unlock(&clients_mu, DMUTEX__LK_CLIENTS);
		return EINVAL;
	}
	for (pp = &clients; *pp && *pp != c; pp = &(*pp)->next_all)
		;
	if (*pp)
		*pp = c->next_all;
	dmutex__mu_unlock(&clients_mu, DMUTEX__LK_CLIENTS);
	/* No orphan release is queued from here on (unlock_async.c). */
	__atomic_store_n(&c->closing, 1, __ATOMIC_RELEASE);
	/* Their mutexes gave back their kept leases when destroyed, unless a
	 * renewal was dropping one at that moment: none may stay behind. */
	dmutex__renewer_give_back_all(c,
			dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS);
	dmutex__renewer_stop(c);
	/* The last second's counts, bounded like any command. */
	dmutex__entries_fold(c);
	dmutex__met_flush(c, dmutex__now_ns() + (int64_t)c->cfg.command_timeout_ms * DMUTEX__MS);
	dmutex__waiter_stop(c->be);
	free_client(c);
	return 0;
}

int
dmutex__client_default(struct dmutex_client **out)
{
	int err = 0;

	/* Once open, no lock: a fork while another thread is opening it (a
	 * connect may take seconds) must not leave the child stuck here. */
	if ((*out = __atomic_load_n(&default_client, __ATOMIC_ACQUIRE)))
		return 0;
	dmutex__mu_lock(&default_mu, DMUTEX__LK_DEFAULT, "default_mu");
	if (!default_client) {
		struct dmutex_client *c;
		/* Not cached on failure: the next use tries again. */
		if (!(err = dmutex_client_open(&c, NULL))) {
			dmutex__mu_lock(&clients_mu, DMUTEX__LK_CLIENTS, "clients_mu");
			__atomic_store_n(&default_client, c, __ATOMIC_RELEASE);
			dmutex__mu_unlock(&clients_mu, DMUTEX__LK_CLIENTS);
		}
	}
	*out = default_client;
	dmutex__mu_unlock(&default_mu, DMUTEX__LK_DEFAULT);
	return err;
}

void
dmutex__shim_url_text(char *buf, size_t len)
{
	struct dmutex__config cfg;
	const char *url = getenv("DMUTEX_URL"), *from = "DMUTEX_URL";
	size_t n = 0;

	if (!url || !*url) {
		url = DEFAULT_URL;
		from = "the built-in default: DMUTEX_URL is not set";
	}
	memset(&cfg, 0, sizeof cfg);
	if (dmutex__url_parse(url, &cfg)) {
		snprintf(buf, len, "an invalid URL (%s)", from);
		return;
	}
	buf[0] = '\0';
	for (size_t i = 0; i < cfg.nnodes && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? "," : "", cfg.nodes[i].display);
	if (n < len)
		snprintf(buf + n, len - n, " (%s)", from);
	dmutex__config_free(&cfg);
}

int
dmutex_client_open(dmutex_client_t **out, const char *url)
{
	int cs = dmutex__nocancel(), err = dmutex_client_open_impl(out, url);

	dmutex__cancel_restore(cs);
	return err;
}

int
dmutex_client_close(dmutex_client_t *c)
{
	int cs = dmutex__nocancel(), err = dmutex_client_close_impl(c);

	dmutex__cancel_restore(cs);
	return err;
}
