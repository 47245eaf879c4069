/*
 * The shim's DMUTEX_LOG=info lines (local.h): one when it takes effect in
 * a process, naming the backend, then one per object at its first use.
 * Threads racing to bind one static object each run the namer (the core
 * keeps one binding): the set of objects already logged keeps it to one
 * line.  Kept only while info lines are wanted.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/shim.h"
#include "local.h"
#include "name.h"

#define BUCKETS 1024

struct seen {
	struct seen *next;
	const void *obj;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct seen *seen[BUCKETS];
static pid_t owner;     /* the process the set and the first line are of */

/* A fork while another thread logs must not leave mu locked in the child;
 * the child is another process, which logs its own lines (owner). */
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

__attribute__((constructor)) static void
announce_setup(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static struct seen **
slot(const void *obj)
{
	uintptr_t h = (uintptr_t)obj;
	struct seen **pp;

	h ^= h >> 17;
	for (pp = &seen[(h * 0x9e3779b97f4a7c15ULL) >> 54 & (BUCKETS - 1)]; *pp && (*pp)->obj != obj;
			pp = &(*pp)->next)
		;
	return pp;
}

/* Under mu: 1 if this is the process's first line (its set begun). */
static int
first_use(void)
{
	if (owner == getpid())
		return 0;
	for (size_t i = 0; i < BUCKETS; i++)
		while (seen[i]) {
			struct seen *s = seen[i];
			seen[i] = s->next;
			free(s);
		}
	owner = getpid();
	return 1;
}

/* Not under mu: the log takes its own lock, which a fork takes before mu
 * (the client's fork handlers are registered after announce_setup). */
static void
first_line(void)
{
	char url[1024];
	const char *env = getenv("DMUTEX_SHIM_LOCAL");

	dmutex__shim_url_text(url, sizeof url);
	dmutex__log(DMUTEX_LOG_INFO, "shim: in effect in process %ld: its pthread and C11 objects are distributed "
			"over %s%s%s%s", (long)getpid(), url, env && *env ? "; DMUTEX_SHIM_LOCAL='" : "",
			env && *env ? env : "", env && *env ? "' keeps those it matches local" : "");
}

void
dmutex__shim_in_effect(void)
{
	int first;

	if (!dmutex__log_enabled(DMUTEX_LOG_INFO))
		return;
	pthread_mutex_lock(&mu);
	first = first_use();
	pthread_mutex_unlock(&mu);
	if (first)
		first_line();
}

void
dmutex__shim_announce(const void *obj, const char *what, const char *name, const char *site, int local)
{
	struct seen **pp, *s;
	int before, first;

	if (!dmutex__log_enabled(DMUTEX_LOG_INFO))
		return;
	pthread_mutex_lock(&mu);
	first = first_use();
	if (!(before = *(pp = slot(obj)) != NULL) && (s = malloc(sizeof *s))) {
		/* (no memory to remember it: logged again, at worst) */
		s->obj = obj;
		s->next = NULL;
		*pp = s;
	}
	pthread_mutex_unlock(&mu);
	if (first)
		first_line();
	if (before)
		return;
	dmutex__log(DMUTEX_LOG_INFO, "shim: %s '%s' defined at %s: %s", what, name ? name : "?",
			site ? dmutex__shim_site_text(site) : "?",
			local ? "local to this process" : "distributed");
}

void
dmutex__shim_announce_forget(const void *obj)
{
	struct seen **pp, *s;

	if (!dmutex__log_enabled(DMUTEX_LOG_INFO))
		return;
	pthread_mutex_lock(&mu);
	if (owner == getpid() && (s = *(pp = slot(obj)))) {
		*pp = s->next;
		free(s);
	}
	pthread_mutex_unlock(&mu);
}
