/* Names for what the pthread shim defines: namespace, site, ordinal. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/shim.h"
#include "local.h"
#include "name.h"

#define NAMESPACE_MAX 128

static pthread_once_t ns_once = PTHREAD_ONCE_INIT;
static char ns[NAMESPACE_MAX + 1];
static int ns_err;

/* The program's name: its executable's, so that argv[0] (a symlink, a
 * login shell's "-sh") does not change it; else what argv[0] says. */
static const char *
program_name(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	char *slash;

	if (n <= 0)
		return program_invocation_short_name;
	buf[n] = '\0';
	/* A binary replaced while it runs reads "NAME (deleted)". */
	if (n > 10 && !strcmp(buf + n - 10, " (deleted)"))
		buf[n - 10] = '\0';
	return (slash = strrchr(buf, '/')) ? slash + 1 : buf;
}

static void
ns_read(void)
{
	char exe[4096];
	const char *v = getenv("DMUTEX_NAMESPACE");

	if (!v || !*v)
		v = program_name(exe, sizeof exe);
	if (!v || !*v)
		v = "program";
	if (strlen(v) > NAMESPACE_MAX) {
		dmutex__log(DMUTEX_LOG_ERROR, "DMUTEX_NAMESPACE is longer than %d bytes", NAMESPACE_MAX);
		ns_err = EINVAL;
		return;
	}
	strcpy(ns, v);
}

/* NAMESPACE/BASENAME:LINE from site "FILE:LINE"; ord > 0 adds "#ord". */
static int
compose(const char *site, size_t ord, char out[DMUTEX_NAME_MAX + 1])
{
	const char *base, *colon;
	int n;

	/* Every object the shim names passes here: the shim is in effect. */
	dmutex__shim_in_effect();
	pthread_once(&ns_once, ns_read);
	if (ns_err)
		return ns_err;
	/* The mark of a DMUTEX_SHIM_LOCAL_FILE unit is no part of the name. */
	if (site && *site == DMUTEX__SHIM_LOCAL_MARK[0])
		site++;
	if (!site || !(colon = strrchr(site, ':'))) {
		dmutex__log(DMUTEX_LOG_ERROR, "shim: bad definition site");
		return EINVAL;
	}
	for (base = colon; base > site && base[-1] != '/'; base--)
		;
	n = ord ? snprintf(out, DMUTEX_NAME_MAX + 1, "%s/%s#%zu", ns, base, ord)
		: snprintf(out, DMUTEX_NAME_MAX + 1, "%s/%s", ns, base);
	if (n < 0 || n > DMUTEX_NAME_MAX) {
		dmutex__log(DMUTEX_LOG_ERROR, "shim: the name of the object defined at %s is longer than %d bytes; "
				"name it with pthread_mutexattr_setname_np", site, DMUTEX_NAME_MAX);
		return EINVAL;
	}
	return 0;
}

/* ---- zero-filled objects in static storage ---- */

int
dmutex__shim_zero_name(const void *obj, char site[DMUTEX__SHIM_SITE_MAX + 1], char out[DMUTEX_NAME_MAX + 1])
{
	char exe[4096];
	const char *module, *slash;
	Dl_info info;
	int n;

	pthread_once(&ns_once, ns_read);
	if (ns_err)
		return ns_err;
	/* Static storage is inside a loaded module; the heap, a stack or a
	 * mapping is not, and has no name every process agrees on. */
	if (!dladdr(obj, &info) || !info.dli_fbase)
		return ESRCH;
	module = info.dli_fname && *info.dli_fname ? info.dli_fname : program_name(exe, sizeof exe);
	if ((slash = strrchr(module, '/')))
		module = slash + 1;
	n = snprintf(site, DMUTEX__SHIM_SITE_MAX + 1, "@%s+0x%lx", module,
			(unsigned long)((const char *)obj - (const char *)info.dli_fbase));
	if (n < 0 || n > DMUTEX__SHIM_SITE_MAX)
		return EINVAL;
	n = snprintf(out, DMUTEX_NAME_MAX + 1, "%s/%s", ns, site);
	if (n < 0 || n > DMUTEX_NAME_MAX) {
		dmutex__log(DMUTEX_LOG_ERROR, "shim: the name of the zero-filled object at %s is longer than %d bytes",
				site, DMUTEX_NAME_MAX);
		return EINVAL;
	}
	return 0;
}

/* ---- ordinals: per (kind, site) the ordinals in use; per object its own */

struct site {
	struct site *next;
	int kind;
	unsigned char *used;            /* one byte per ordinal */
	size_t cap;
	char name[];                    /* the composed name without ordinal */
};

struct obj {
	struct obj *next;
	int kind;
	const void *addr;
	struct site *site;
	size_t ord;
};

#define OBJ_BUCKETS 1024

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t mu_once = PTHREAD_ONCE_INIT;
static struct site *sites;
static struct obj *objs[OBJ_BUCKETS];

/* A fork while another thread names something must not leave mu locked
 * in the child. */
static void
fork_prepare(void)
{
	pthread_mutex_lock(&mu);
}

static void
fork_parent(void)
{
	pthread_mutex_unlock(&mu);
}

static void
fork_child(void)
{
	pthread_mutex_init(&mu, NULL);
}

static void
mu_setup(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void
lock(void)
{
	pthread_once(&mu_once, mu_setup);
	pthread_mutex_lock(&mu);
}

static void
unlock(void)
{
	pthread_mutex_unlock(&mu);
}

/* Static objects seen, to tell when two share a name. */
struct seen {
	struct seen *next;
	int kind;
	const void *addr;
	int warned;
	char name[];
};

static struct seen *seen;

int
dmutex__shim_static_name(int kind, const void *obj, const char *site, char out[DMUTEX_NAME_MAX + 1])
{
	struct seen *s;
	size_t len;
	int err;

	if ((err = compose(site, 0, out)))
		return err;
	len = strlen(out);
	lock();
	for (s = seen; s; s = s->next)
		if (s->kind == kind && !strcmp(s->name, out))
			break;
	if (!s && (s = malloc(sizeof *s + len + 1))) {
		s->kind = kind;
		s->addr = obj;
		s->warned = 0;
		memcpy(s->name, out, len + 1);
		s->next = seen;
		seen = s;
	} else if (s && s->addr != obj && !s->warned) {
		s->warned = 1;
		dmutex__log(DMUTEX_LOG_WARN, "shim: two %s statically initialized at %s are one "
				"(initializers on one line, in a header, or in a function run again)",
				kind == DMUTEX__SHIM_MUTEX ? "mutexes" : "condition variables", site);
	}
	unlock();
	return 0;
}

static struct obj **
obj_slot(int kind, const void *addr)
{
	struct obj **pp = &objs[((uintptr_t)addr >> 4) % OBJ_BUCKETS];

	while (*pp && ((*pp)->addr != addr || (*pp)->kind != kind))
		pp = &(*pp)->next;
	return pp;
}

/* Under mu. */
static void
obj_drop(struct obj **pp)
{
	struct obj *o = *pp;

	o->site->used[o->ord] = 0;
	*pp = o->next;
	free(o);
}

static struct site *
site_get(int kind, const char *name)
{
	struct site *s;
	size_t len = strlen(name);

	for (s = sites; s; s = s->next)
		if (s->kind == kind && !strcmp(s->name, name))
			return s;
	if (!(s = calloc(1, sizeof *s + len + 1)))
		return NULL;
	s->kind = kind;
	memcpy(s->name, name, len + 1);
	s->next = sites;
	sites = s;
	return s;
}

static int
ord_take(struct site *s, size_t *out)
{
	size_t i;

	for (i = 0; i < s->cap && s->used[i]; i++)
		;
	if (i == s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 8;
		unsigned char *nu = realloc(s->used, nc);
		if (!nu)
			return ENOMEM;
		memset(nu + s->cap, 0, nc - s->cap);
		s->used = nu;
		s->cap = nc;
	}
	s->used[i] = 1;
	*out = i;
	return 0;
}

int
dmutex__shim_site_name(int kind, const void *addr, const char *site, char out[DMUTEX_NAME_MAX + 1])
{
	struct obj **pp, *o;
	struct site *s;
	int err;

	if ((err = compose(site, 0, out)))
		return err;
	if (!(o = calloc(1, sizeof *o)))
		return ENOMEM;
	lock();
	/* Initialized again without a destroy: the old object is gone. */
	if (*(pp = obj_slot(kind, addr)))
		obj_drop(pp);
	if (!(s = site_get(kind, out)) || (err = ord_take(s, &o->ord))) {
		pthread_mutex_unlock(&mu);
		free(o);
		return err ? err : ENOMEM;
	}
	o->kind = kind;
	o->addr = addr;
	o->site = s;
	o->next = *pp;
	*pp = o;
	pthread_mutex_unlock(&mu);
	if (o->ord && (err = compose(site, o->ord, out)))
		dmutex__shim_site_release(kind, addr);
	return err;
}

int
dmutex__shim_site_live(int kind, const void *addr)
{
	int live;

	lock();
	live = *obj_slot(kind, addr) != NULL;
	pthread_mutex_unlock(&mu);
	return live;
}

void
dmutex__shim_site_release(int kind, const void *addr)
{
	struct obj **pp;

	lock();
	if (*(pp = obj_slot(kind, addr)))
		obj_drop(pp);
	pthread_mutex_unlock(&mu);
	dmutex__shim_announce_forget(addr);
}

/* ---- names given with pthread_mutexattr_setname_np ---- */

struct interned {
	struct interned *next;
	char name[];
};

static struct interned *interned;

const char *
dmutex__shim_intern(const char *name)
{
	struct interned *i;
	size_t len = strlen(name);

	lock();
	for (i = interned; i; i = i->next)
		if (!strcmp(i->name, name))
			break;
	if (!i && (i = malloc(sizeof *i + len + 1))) {
		memcpy(i->name, name, len + 1);
		i->next = interned;
		interned = i;
	}
	pthread_mutex_unlock(&mu);
	return i ? i->name : NULL;
}

/* ---- the core binds the shim's static initializers with these names ---- */

static int
namer(int kind, const void *obj, char out[DMUTEX_NAME_MAX + 1], int *type)
{
	/* Both kinds start with the same fields (dmutex.h). */
	const dmutex_t *o = obj;

	const char *what = kind == DMUTEX__STATIC_MUTEX ? "mutex" : "condition variable";
	int err;

	if (kind == DMUTEX__STATIC_MUTEX)
		*type = (int)(uintptr_t)o->__reserved[1];
	if (o->__reserved[0] == DMUTEX__SHIM_ZERO) {
		/* Named when it was found zero-filled (object.c). */
		if (strlen(o->__static_name) > DMUTEX_NAME_MAX)
			return EINVAL;
		strcpy(out, o->__static_name);
		dmutex__shim_announce(obj, what, out, o->__reserved[4], 0);
		return 0;
	}
	err = dmutex__shim_static_name(kind == DMUTEX__STATIC_MUTEX ? DMUTEX__SHIM_MUTEX : DMUTEX__SHIM_COND,
			obj, o->__static_name, out);
	if (!err)
		dmutex__shim_announce(obj, what, out, o->__static_name, 0);
	return err;
}

/* Before main and before any constructor of a program linked with us:
 * the core calls back only through what it is handed (STYLE.md, Layers). */
__attribute__((constructor)) static void
namer_register(void)
{
	dmutex__set_static_namer(namer);
}
