// <dmutex.hpp> against a real redis-server, built as C++17 and as C++20:
// the standard lock types over dmutex objects (lock_guard, unique_lock,
// scoped_lock over two mutexes in two processes that take them in opposite
// orders, shared_lock, condition_variable_any), dmutex::condition_variable
// with std::unique_lock<dmutex::mutex>, timed and recursive mutexes,
// counting_semaphore, errors as std::system_error, owner_died(), fence().
#include <dmutex.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>

#include <signal.h>
#include <unistd.h>

#include "harness.h"

static struct th_redis srv;
static int failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)

template <class F>
static int throws(F f)
{
	try {
		f();
	} catch (const std::system_error &e) {
		return e.code().value();
	}
	return 0;
}

static void standard_locks()
{
	dmutex::mutex m("cpp-m");
	{
		std::lock_guard<dmutex::mutex> g(m);
		CHECK(m.fence() > 0);
		std::thread t([&] { CHECK(!m.try_lock()); });
		t.join();
		CHECK(throws([&] { m.lock(); }) == EDEADLK);
	}
	CHECK(m.try_lock());
	m.unlock();
	CHECK(throws([&] { m.fence(); }) == EPERM);
	{
		std::unique_lock<dmutex::mutex> lk(m, std::try_to_lock);
		CHECK(lk.owns_lock());
		lk.unlock();
		CHECK(!lk.owns_lock());
	}
	CHECK(throws([] { dmutex::mutex bad(""); }) == EINVAL);

	dmutex::timed_mutex tm("cpp-tm");
	CHECK(tm.try_lock_for(std::chrono::milliseconds(100)));
	std::thread t([&] {
		CHECK(!tm.try_lock_for(std::chrono::milliseconds(100)));
		CHECK(!tm.try_lock_until(std::chrono::system_clock::now() + std::chrono::milliseconds(50)));
	});
	t.join();
	// duration::max(): a wait with no reachable deadline, not an overflow
	// into the past that gives up at once (issue 30).
	std::atomic<int> got(-1);
	std::thread forever([&] {
		got = tm.try_lock_for(std::chrono::nanoseconds::max()) ? 1 : 0;
		if (got == 1)
			tm.unlock();
	});
	auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
	while (got == -1 && std::chrono::steady_clock::now() < until)
		std::this_thread::sleep_for(std::chrono::milliseconds(5));
	CHECK(got == -1);       // still waiting for the holder
	tm.unlock();
	forever.join();
	CHECK(got == 1);
	CHECK(tm.try_lock_for(std::chrono::hours::max()));
	tm.unlock();
	CHECK(tm.try_lock_for(std::chrono::milliseconds(-5)));
	tm.unlock();

	dmutex::recursive_timed_mutex rm("cpp-rm");
	{
		std::lock_guard<dmutex::recursive_timed_mutex> a(rm);
		std::lock_guard<dmutex::recursive_timed_mutex> b(rm);
		CHECK(rm.try_lock());
		rm.unlock();
	}
	dmutex::recursive_mutex rm2("cpp-rm2");
	std::lock_guard<dmutex::recursive_mutex> c(rm2);
}

static void shared()
{
	dmutex::shared_mutex sm("cpp-sm");
	{
		std::shared_lock<dmutex::shared_mutex> r1(sm);
		std::thread t([&] {
			std::shared_lock<dmutex::shared_mutex> r2(sm, std::try_to_lock);
			CHECK(r2.owns_lock());
			r2.unlock();
			CHECK(!sm.try_lock());
			CHECK(!sm.try_lock_for(std::chrono::milliseconds(50)));
		});
		t.join();
		CHECK(throws([&] { sm.lock(); }) == EDEADLK);
	}
	{
		std::unique_lock<dmutex::shared_mutex> w(sm);
		CHECK(sm.fence() > 0);
		std::thread t([&] {
			CHECK(!sm.try_lock_shared());
			CHECK(!sm.try_lock_shared_for(std::chrono::milliseconds(50)));
		});
		t.join();
	}
}

static void condition_variables()
{
	dmutex::mutex m("cpp-cv-m");
	dmutex::condition_variable cv("cpp-cv");
	bool ready = false;     // guarded by m within this process

	std::thread t([&] {
		std::unique_lock<dmutex::mutex> lk(m);
		ready = true;
		cv.notify_all();
	});
	{
		std::unique_lock<dmutex::mutex> lk(m);
		CHECK(cv.wait_for(lk, std::chrono::seconds(10), [&] { return ready; }));
	}
	t.join();
	{
		std::unique_lock<dmutex::mutex> lk(m);
		CHECK(cv.wait_for(lk, std::chrono::milliseconds(50)) == std::cv_status::timeout);
		CHECK(lk.owns_lock());
	}

	// condition_variable_any: this process's threads only.
	std::condition_variable_any any;
	bool go = false;
	std::thread u([&] {
		std::lock_guard<dmutex::mutex> lk(m);
		go = true;
		any.notify_all();
	});
	{
		std::unique_lock<dmutex::mutex> lk(m);
		CHECK(any.wait_for(lk, std::chrono::seconds(10), [&] { return go; }));
	}
	u.join();
}

static void semaphore()
{
	dmutex::counting_semaphore<4> s("cpp-sem", 2);
	CHECK(s.try_acquire());
	s.acquire();
	CHECK(!s.try_acquire());
	CHECK(!s.try_acquire_for(std::chrono::milliseconds(50)));
	s.release(2);
	CHECK(s.try_acquire());
	s.release();
	CHECK(dmutex::counting_semaphore<4>::max() == 4);
}

// Two processes take two mutexes in opposite orders: std::scoped_lock's
// deadlock avoidance (lock one, try the other) works across processes.
static int scoped_child(void *arg)
{
	bool reverse = *static_cast<bool *>(arg);
	dmutex::mutex a("cpp-a"), b("cpp-b");

	for (int i = 0; i < 20; i++) {
		if (reverse) {
			std::scoped_lock lk(b, a);
		} else {
			std::scoped_lock lk(a, b);
		}
	}
	return 0;
}

static void scoped_two_processes()
{
	bool fwd = false, rev = true;
	pid_t p1 = th_spawn(scoped_child, &fwd), p2 = th_spawn(scoped_child, &rev);

	CHECK(th_wait_child(p1, 60000) == 0);
	CHECK(th_wait_child(p2, 60000) == 0);
}

// A robust mutex whose owner was killed: locked normally, owner_died().
static int die_holding(void *arg)
{
	(void)arg;
	dmutex::options o;
	o.robust = true;
	o.lease_ms = 300;
	dmutex::mutex m("cpp-robust", o);
	m.lock();
	kill(getpid(), SIGKILL);
	return 1;
}

static void robust()
{
	dmutex::options o;
	std::atomic<int> lost{ 0 };
	o.robust = true;
	o.on_lost = [&](const char *) { lost++; };
	dmutex::mutex m("cpp-robust", o);

	CHECK(th_wait_child(th_spawn(die_holding, nullptr), 10000) == 128 + SIGKILL);
	m.lock();
	CHECK(m.owner_died());
	m.consistent();
	CHECK(!m.owner_died());
	m.unlock();
	m.lock();
	CHECK(!m.owner_died());
	m.unlock();
	CHECK(lost == 0);
}

int main()
{
	if (th_redis_start(&srv, nullptr)) {
		std::fprintf(stderr, "redis-server did not start\n");
		return 2;
	}
	setenv("DMUTEX_URL", srv.url, 1);
	try {
		standard_locks();
		shared();
		condition_variables();
		semaphore();
		scoped_two_processes();
		robust();
	} catch (const std::exception &e) {
		std::fprintf(stderr, "unexpected exception: %s\n", e.what());
		failures++;
	}
	th_redis_stop(&srv);
	if (failures)
		std::fprintf(stderr, "%d failures (C++ %ld)\n", failures, (long)__cplusplus);
	return failures != 0;
}
