#include "core/bind.h"
#include "core/internal.h"

int
dmutex_destroy(dmutex_t *m)
{
	int cs = dmutex__nocancel(), err = dmutex__destroy_object(&dmutex__mutex_kind, DMUTEX__HANDLE(m, NULL));

	dmutex__cancel_restore(cs);
	return err;
}
