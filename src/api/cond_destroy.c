#include "core/bind.h"
#include "core/cond.h"

int
dcond_destroy(dcond_t *c)
{
	int cs = dmutex__nocancel(), err = dmutex__destroy_object(&dmutex__cond_kind, DMUTEX__HANDLE(c, NULL));

	dmutex__cancel_restore(cs);
	return err;
}
