/*
 * A retried operation is idempotent for as long as it is retried:
 * - the server keeps its result for the window and a second more, from
 *   when the first try reached it;
 * - the client stops once the window has passed since the first try that
 *   may have been applied went out unanswered (a try that cannot have
 *   been, no connection or an error answered, opens no window: it is asked
 *   again for as long as the caller asks);
 * - every retry carries a deadline on the server's clock, no later than
 *   the server's time when that try went out plus the window, past which
 *   the server refuses it: a retry held up on the way is not applied after
 *   the result may be gone.  That time is bounded from below by a reading
 *   of the server's clock taken after the loss, less the time elapsed here
 *   since the try went out (the server's clock moved no further than ours
 *   in between, within the second of margin).
 */
#include <errno.h>

#include "base/base.h"
#include "base/log.h"
#include "retry.h"

int
dmutex__op_init(struct dmutex__op *o)
{
	*o = (struct dmutex__op){ .window_ms = 0 };
	return dmutex__token(o->token);
}

static int
give_up(struct dmutex__op *o, const char *what, const char *kind, const char *name)
{
	o->expired = 1;
	dmutex__log(DMUTEX_LOG_ERROR, "%s of %s '%s': no answer within retry_window_ms (%u ms) of the "
			"first unanswered try; whether it was applied is unknown", what, kind, name,
			o->window_ms);
	return EIO;
}

int
dmutex__op_begin(struct dmutex__op *o, unsigned window_ms, dmutex__op_clock *clock,
		void *arg, const char *what, const char *kind, const char *name)
{
	int64_t window = (int64_t)window_ms * DMUTEX__MS;
	long long server;
	int err;

	if (o->expired)
		return EIO;
	o->window_ms = window_ms;
	if (o->lost_at && dmutex__now_ns() - o->lost_at >= window)
		return give_up(o, what, kind, name);
	if (o->lost_at && !o->deadline_ms) {
		if ((err = clock(arg, &server)))
			return err;
		int64_t gone = dmutex__now_ns() - o->lost_at;
		if (gone >= window)
			return give_up(o, what, kind, name);
		o->deadline_ms = server + (window - gone) / DMUTEX__MS;
		if (o->deadline_ms < 1)         /* 0 would mean none */
			o->deadline_ms = 1;
	}
	o->maybe_done = 0;
	o->sent = dmutex__now_ns();
	return 0;
}

int
dmutex__op_end(struct dmutex__op *o, int err, int refused, const char *what,
		const char *kind, const char *name)
{
	if (err) {
		/* A try that cannot have been applied (no connection, an error
		 * answered) leaves nothing the server could forget: no window. */
		if (!o->lost_at && o->maybe_done)
			o->lost_at = o->sent;
		return err;
	}
	if (refused)
		return give_up(o, what, kind, name);
	/* Answered: what the lost tries did is known now (a take that found
	 * nothing free was not remembered; the next loss starts afresh). */
	o->lost_at = 0;
	o->deadline_ms = 0;
	return 0;
}
