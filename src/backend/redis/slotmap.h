/*
 * A Redis Cluster as the backend sees it: its masters (members, found from
 * the seeds and by redirections) and which serves each of the 16384 slots.
 * Members are only ever added, so a member pointer stays valid for the
 * map's life; each is a node of its own (pool, TLS context, credentials of
 * the URL's template address).
 */
#ifndef DMUTEX_SLOTMAP_H
#define DMUTEX_SLOTMAP_H

#include <pthread.h>
#include <stdint.h>

#include "crc16.h"
#include "node.h"

#define DMUTEX__MEMBERS_MAX 64

struct dmutex__member {
	struct dmutex__node node;
	struct dmutex__node_addr addr;  /* the template's, with this host and port */
};

struct dmutex__slotmap {
	const struct dmutex__node_addr *tmpl;   /* the URL's: credentials, TLS, seeds */
	unsigned connect_ms, command_ms;
	pthread_mutex_t mu;             /* leaf: no I/O, no other lock under it */
	/* Read without mu by the waiter (atomic loads): set once, never freed
	 * before the map. */
	struct dmutex__member *member[DMUTEX__MEMBERS_MAX];
	size_t nmembers;
	unsigned char owner[DMUTEX__SLOTS];     /* member index; NO_OWNER unknown */
	int64_t refreshed_ns;           /* the last refresh that got an answer */
	int refreshing;
};

#define DMUTEX__NO_OWNER 0xff

/* 0 or ENOMEM. */
int dmutex__slotmap_init(struct dmutex__slotmap *m, const struct dmutex__node_addr *tmpl,
		unsigned connect_ms, unsigned command_ms);
void dmutex__slotmap_fini(struct dmutex__slotmap *m);
void dmutex__slotmap_atfork_child(struct dmutex__slotmap *m);

/* Ask the members known, then the seeds, for CLUSTER SLOTS until one
 * answers, by deadline; `force` 0 skips it when another thread refreshes
 * or one answered in the last 100 ms.  0, or EIO (logged when `loud`). */
int dmutex__slotmap_refresh(struct dmutex__slotmap *m, int64_t deadline, int force, int loud);
/* The member serving a slot, -1 unknown. */
int dmutex__slotmap_owner(struct dmutex__slotmap *m, unsigned slot);
/* The member at host:port, added if new (-1: no room or no memory; logged). */
int dmutex__slotmap_member(struct dmutex__slotmap *m, const char *host, int port);
void dmutex__slotmap_set(struct dmutex__slotmap *m, unsigned slot, int member);
/* Member i, NULL if there is none (yet). */
struct dmutex__node *dmutex__slotmap_node(struct dmutex__slotmap *m, size_t i);

#endif
