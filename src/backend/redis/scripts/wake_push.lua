-- A wake-up pushed by a waiting process's wake-up thread (waiter.c) into
-- the list its waiting thread pops with BLPOP (a non-fair waiter that pops
-- its grant: wake_queue.lua): that thread heard nothing the list did not
-- carry otherwise (an older client's "r", a lock made not recoverable, a
-- reset, a lost subscription), and looks again at once.
--
-- KEYS[1]  the waiter's list (its wake channel's name)
-- ARGV     the message ("r"), how long the list lives (ms)
--
-- One script, not RPUSH and PEXPIRE: a list left behind by a waiter that
-- has gone must not stay without a TTL.
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
