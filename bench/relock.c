/* Scenario 3: a recursive owner locking again: no round trip at all. */
#include <stdio.h>

#include "bench.h"
#include "dmutex.h"

int
bench_relock(struct bench *b)
{
	const int batch = 1000, batches = b->opt.quick ? 300 : 2000;
	dmutex_client_t *cli = NULL;
	struct samples s = { 0 };
	dmutex_attr_t a;
	dmutex_t m;
	char name[64];
	struct row *r;
	int err, held = 0;

	if ((err = dmutex_client_open(&cli, b->tgt.url)))
		goto out;
	snprintf(name, sizeof name, "%s:recursive", b->run_id);
	dmutex_attr_init(&a);
	dmutex_attr_setclient(&a, cli);
	dmutex_attr_settype(&a, DMUTEX_RECURSIVE);
	err = dmutex_init(&m, name, &a);
	dmutex_attr_destroy(&a);
	if (err)
		goto out;
	if ((err = dmutex_lock(&m)))
		goto out_destroy;
	held = 1;
	samples_init(&s, (size_t)batches);
	err = samples_lock_pairs(&s, &m, batches, batch);
	if (err)
		goto out_unlock;
	r = row_new(3, "recursive re-lock + unlock by the owner");
	r->median_ns = samples_pct(&s, 50);
	r->p99_ns = samples_pct(&s, 99);
	r->ratio = r->median_ns / b->ping_ns;
	snprintf(r->ratio_to, sizeof r->ratio_to, "PING");
	row_metric(r, "pairs", (double)batch * batches, "");
	row_note(r, "median and p99 over batches of %d pairs (one pair alone is too short to time)",
			batch);
	row_target(r, r->median_ns < 100 ? MET_YES : MET_NO, "< 100 ns");
out_unlock:
	if (held) {
		int e = dmutex_unlock(&m);
		err = err ? err : e;
	}
out_destroy:
	dmutex_destroy(&m);
out:
	samples_free(&s);
	if (cli)
		dmutex_client_close(cli);
	if (err)
		fprintf(stderr, "bench: recursive: %s\n", dmutex_strerror(err));
	return err ? -1 : 0;
}
