/* dmutex_client_metrics: the public entry; the counting is metrics.c's. */
#include <errno.h>
#include <string.h>

#include "core/internal.h"
#include "core/metrics.h"

int
dmutex_client_metrics(dmutex_client_t *c, const char *name, dmutex_metrics_t *out)
{
	int err;

	if (!out || (name && (!*name || strlen(name) > DMUTEX_NAME_MAX))) {
		dmutex__log(DMUTEX_LOG_ERROR, "dmutex_client_metrics: %s", !out ? "out is NULL"
				: "a lock name is 1 to DMUTEX_NAME_MAX bytes");
		return EINVAL;
	}
	if (!c && (err = dmutex__client_default(&c)))
		return err;
	dmutex__entries_fold(c);
	dmutex__met_totals(c, name, out);
	return 0;
}
