/* Process stamps on shim objects (stamp.h). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/shim.h"
#include "stamp.h"

/* slot 0: TAG | pshared; slot 1: pid; slot 2: sequence number */
#define TAG ((uintptr_t)0x7374616d0000u) /* "stam" */
#define TAG_MASK ((uintptr_t)0xffffffff0000u)

/* Stamps made by this process so far (each object gets the next one). */
static uint64_t seq;

/*
 * The processes this one is a fork of, nearest last, each with the number
 * of stamps it had made when it forked: objects it stamped up to then are
 * in our copy of its heap.  Deeper than MAX_ANCESTORS, the oldest drop
 * (their objects are refused, never misread).
 */
#define MAX_ANCESTORS 32
static struct { pid_t pid; uint64_t seq; } ancestors[MAX_ANCESTORS];
static int n_ancestors;
/* What prepare saw, for the child handler of the same fork. */
static __thread pid_t fork_pid;
static __thread uint64_t fork_seq;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void
prepare(void)
{
	fork_pid = getpid();
	fork_seq = __atomic_load_n(&seq, __ATOMIC_ACQUIRE);
}

static void
child(void)
{
	if (n_ancestors == MAX_ANCESTORS) {
		for (int i = 1; i < MAX_ANCESTORS; i++)
			ancestors[i - 1] = ancestors[i];
		n_ancestors--;
	}
	ancestors[n_ancestors].pid = fork_pid;
	ancestors[n_ancestors].seq = fork_seq;
	n_ancestors++;
}

static void
setup(void)
{
	pthread_atfork(prepare, NULL, child);
}

void
dmutex__shim_stamp(void *slots[3], int pshared)
{
	pthread_once(&once, setup);
	slots[0] = (void *)(TAG | (uintptr_t)(pshared & 0xffff));
	slots[1] = (void *)(uintptr_t)getpid();
	slots[2] = (void *)(uintptr_t)__atomic_add_fetch(&seq, 1, __ATOMIC_ACQ_REL);
}

int
dmutex__shim_stamp_pshared(void *const slots[3])
{
	uintptr_t v = (uintptr_t)slots[0];

	return (v & TAG_MASK) == TAG ? (int)(v & 0xffff) : 0;
}

int
dmutex__shim_stamp_check(void *const slots[3], const char *what, const void *obj)
{
	pid_t pid;
	uint64_t s;

	if (((uintptr_t)slots[0] & TAG_MASK) != TAG)
		return 0;
	pid = (pid_t)(uintptr_t)slots[1];
	s = (uint64_t)(uintptr_t)slots[2];
	if (pid == getpid())
		return 0;
	for (int i = n_ancestors; i-- > 0;)
		if (ancestors[i].pid == pid && s <= ancestors[i].seq)
			return 0;
	dmutex__log(DMUTEX_LOG_ERROR, "%s %p was initialized by process %d, which this process did not fork "
			"from afterwards: its state is in that process.  Through the shim a pthread object in shared "
			"memory is usable by the process that initialized it and by children forked after that; "
			"others initialize their own (same name: pthread_mutexattr_setname_np)",
			what, obj, (int)pid);
	return EINVAL;
}
