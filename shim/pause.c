/* The shim's pauses: pause.h. */
#include "core/shim.h"
#include "pause.h"

void
dmutex__shim_pause_ms(int64_t ms)
{
	int cs = dmutex__nocancel();

	dmutex__sleep_until(dmutex__now_ns() + ms * DMUTEX__MS);
	dmutex__cancel_restore(cs);
}

void
dmutex__shim_backoff(int attempt)
{
	int64_t ms = 50 << (attempt < 5 ? attempt : 5);

	dmutex__shim_pause_ms(ms < 1000 ? ms : 1000);
}
