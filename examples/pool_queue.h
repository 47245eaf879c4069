/* pool's work queue: one per process (pool_queue.c). */
#ifndef POOL_QUEUE_H
#define POOL_QUEUE_H

/* Add job (>= 0); pop one, or -1 once closed and empty. */
void queue_push(int job);
int queue_pop(void);
/* No more jobs: poppers drain the queue, then get -1. */
void queue_close(void);

#endif
