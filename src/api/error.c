#include <errno.h>

#include "dmutex.h"

/* Every value a dmutex call returns, and what it means for a dmutex. */
#define DMUTEX__ERRNO_MAP(X) \
	X(0,               "success") \
	X(EINVAL,          "invalid argument: NULL, uninitialized or destroyed object, bad name, URL, option or deadline") \
	X(EBUSY,           "lock is held (trylock), or object is in use (destroy, client close)") \
	X(ETIMEDOUT,       "deadline passed before the lock could be taken") \
	X(EDEADLK,         "the calling thread already holds this non-recursive lock") \
	X(EAGAIN,          "recursive lock count would pass INT_MAX") \
	X(EPERM,           "the calling thread does not hold this lock") \
	X(EOWNERDEAD,      "lock acquired; its previous owner died holding it: make the state consistent, then call dmutex_consistent") \
	X(ENOTRECOVERABLE, "lock is not recoverable: a previous owner died and its state was never made consistent (dmutex reset NAME)") \
	X(ENOLCK,          "the hold was lost: its lease ran out or the lock was taken from us") \
	X(EIO,             "lock backend unreachable or failing (see the log for the cause)") \
	X(ENOTSUP,         "not supported by this build") \
	X(ENOMEM,          "out of memory")

#define DMUTEX__ERR_CASE(code, msg) case code: return msg;

const char *
dmutex_strerror(int err)
{
	switch (err) {
	DMUTEX__ERRNO_MAP(DMUTEX__ERR_CASE)
	}
	return "unknown dmutex error";
}
