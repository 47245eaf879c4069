// dmutex.hpp — C++ over the C API of <dmutex.h>: distributed mutexes,
// read-write locks, condition variables and semaphores that meet the
// standard library's requirements, so std::lock_guard, std::unique_lock,
// std::scoped_lock, std::shared_lock and std::condition_variable_any work
// with them unchanged.  Header-only; found by the same
// `pkg-config --cflags --libs dmutex` (C++11 or later; C++17 for
// std::scoped_lock, C++20 for std::counting_semaphore's counterpart).
//
// Every object is constructed from a lock name; objects of the same name
// on the same backend are one lock, in any process on any host.
//
// Errors throw std::system_error with the errno value (generic_category),
// except where the standard forbids it:
//  - unlock() and unlock_shared() never throw.  A hold that was lost (its
//    lease not renewed in time) shows through the on_lost hook of the
//    options and through fence(), which then throws ENOLCK.
//  - try_lock() is false only for EBUSY (held by someone); a backend that
//    fails throws EIO.
//  - A robust mutex whose previous owner died (EOWNERDEAD) is locked
//    normally; owner_died() then says so until consistent() is called.
//
// std::condition_variable_any over these mutexes wakes only threads of its
// own process: only dmutex::condition_variable is distributed.
#ifndef DMUTEX_HPP
#define DMUTEX_HPP

#include <dmutex.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <condition_variable>
#include <system_error>
#include <type_traits>
#include <utility>

namespace dmutex {

// What every lock may be given besides its name.
struct options {
	dmutex_client_t *client = nullptr;      // nullptr: the default client ($DMUTEX_URL)
	unsigned lease_ms = 0;                  // 0: the client's lease
	bool robust = false;                    // mutexes: EOWNERDEAD -> owner_died()
	// Called once when a hold is lost, from the library's renewal thread
	// (or the holder's own call): keep it short.
	std::function<void(const char *name)> on_lost;
};

class condition_variable;

namespace detail {

inline void
check(int err, const char *what)
{
	if (err)
		throw std::system_error(err, std::generic_category(), what);
}

// The loss hook lives as long as the lock: the C library keeps its address.
struct hook {
	std::function<void(const char *)> fn;
	static void call(const char *name, void *arg)
	{
		auto *h = static_cast<hook *>(arg);
		if (h->fn)
			h->fn(name);
	}
};

// Attributes from options; the hook pointer must outlive the lock.
class attr {
public:
	attr(const options &o, int type, hook *h)
	{
		check(dmutex_attr_init(&a_), "dmutex_attr_init");
		check(dmutex_attr_settype(&a_, type), "dmutex_attr_settype");
		if (o.robust)
			check(dmutex_attr_setrobust(&a_, DMUTEX_ROBUST), "dmutex_attr_setrobust");
		if (o.lease_ms)
			check(dmutex_attr_setlease(&a_, o.lease_ms), "dmutex_attr_setlease");
		check(dmutex_attr_setclient(&a_, o.client), "dmutex_attr_setclient");
		if (o.on_lost)
			check(dmutex_attr_setonlost(&a_, &hook::call, h), "dmutex_attr_setonlost");
	}
	~attr() { dmutex_attr_destroy(&a_); }
	attr(const attr &) = delete;
	attr &operator=(const attr &) = delete;
	const dmutex_attr_t *get() const { return &a_; }

private:
	dmutex_attr_t a_;
};

// An absolute deadline on a C clock: system_clock is CLOCK_REALTIME,
// steady_clock CLOCK_MONOTONIC, any other clock is converted to steady.
template <class Clock, class Duration>
inline clockid_t
deadline(const std::chrono::time_point<Clock, Duration> &tp, struct timespec *ts)
{
	using namespace std::chrono;
	clockid_t clk;
	nanoseconds since;

	if (std::is_same<Clock, system_clock>::value) {
		clk = CLOCK_REALTIME;
		since = duration_cast<nanoseconds>(tp.time_since_epoch());
	} else if (std::is_same<Clock, steady_clock>::value) {
		clk = CLOCK_MONOTONIC;
		since = duration_cast<nanoseconds>(tp.time_since_epoch());
	} else {
		clk = CLOCK_MONOTONIC;
		since = duration_cast<nanoseconds>(steady_clock::now().time_since_epoch() +
				(tp - Clock::now()));
	}
	if (since.count() < 0)
		since = nanoseconds(0);
	ts->tv_sec = static_cast<time_t>(since.count() / 1000000000);
	ts->tv_nsec = static_cast<long>(since.count() % 1000000000);
	return clk;
}

// now + d on the steady clock, saturated: duration::max() (and any wait
// longer than the clock can count) means "no deadline we can reach", not
// a signed overflow into the past; a negative d means now.
template <class Rep, class Period>
inline std::chrono::steady_clock::time_point
after(const std::chrono::duration<Rep, Period> &d)
{
	using namespace std::chrono;
	const steady_clock::time_point now = steady_clock::now();

	if (d <= d.zero())
		return now;
	if (duration<long double>(d) >= duration<long double>(steady_clock::time_point::max() - now))
		return steady_clock::time_point::max();
	return now + duration_cast<steady_clock::duration>(d);
}

// Mutexes: one class, the type a template parameter.
class mutex_base {
public:
	using native_handle_type = dmutex_t *;

	mutex_base(const mutex_base &) = delete;
	mutex_base &operator=(const mutex_base &) = delete;

	void lock() { took(dmutex_lock(&m_), "dmutex_lock"); }
	bool try_lock()
	{
		int err = dmutex_trylock(&m_);
		if (err == EBUSY)
			return false;
		took(err, "dmutex_trylock");
		return true;
	}
	// Never throws: a lost hold was reported through on_lost already.
	void unlock() noexcept { (void)dmutex_unlock(&m_); }

	// The caller's fencing token; throws EPERM (not held), ENOLCK (lost).
	std::uint64_t fence()
	{
		std::uint64_t t = 0;
		check(dmutex_fence(&m_, &t), "dmutex_fence");
		return t;
	}
	// Robust: the lock was taken from an owner that died.
	bool owner_died() const noexcept { return died_; }
	void consistent()
	{
		check(dmutex_consistent(&m_), "dmutex_consistent");
		died_ = false;
	}
	native_handle_type native_handle() noexcept { return &m_; }

protected:
	mutex_base(const std::string &name, int type, const options &o) : hook_(new hook{ o.on_lost })
	{
		attr a(o, type, hook_.get());
		check(dmutex_init(&m_, name.c_str(), a.get()), "dmutex_init");
	}
	~mutex_base() { dmutex_destroy(&m_); }

	// 0 or EOWNERDEAD: held.
	void took(int err, const char *what)
	{
		if (err == EOWNERDEAD) {
			died_ = true;
			return;
		}
		check(err, what);
		died_ = false;
	}
	template <class Clock, class Duration>
	bool lock_until(const std::chrono::time_point<Clock, Duration> &tp)
	{
		struct timespec ts;
		clockid_t clk = deadline(tp, &ts);
		int err = dmutex_clocklock(&m_, clk, &ts);
		if (err == ETIMEDOUT)
			return false;
		took(err, "dmutex_clocklock");
		return true;
	}

	friend class dmutex::condition_variable;   // sets died_ after a wait
	dmutex_t m_;
	bool died_ = false;     // touched by the holder only
	std::unique_ptr<hook> hook_;
};

template <int Type>
class timed : public mutex_base {
public:
	explicit timed(const std::string &name, const options &o = options())
		: mutex_base(name, Type, o) {}
	template <class Rep, class Period>
	bool try_lock_for(const std::chrono::duration<Rep, Period> &d)
	{
		return lock_until(detail::after(d));
	}
	template <class Clock, class Duration>
	bool try_lock_until(const std::chrono::time_point<Clock, Duration> &tp)
	{
		return lock_until(tp);
	}
};

} // namespace detail

// Lockable.  A relock by the owner throws EDEADLK (it would hang).
class mutex : public detail::mutex_base {
public:
	explicit mutex(const std::string &name, const options &o = options())
		: mutex_base(name, DMUTEX_NORMAL, o) {}
};

// TimedLockable.
using timed_mutex = detail::timed<DMUTEX_NORMAL>;

// Lockable, recursive.
class recursive_mutex : public detail::mutex_base {
public:
	explicit recursive_mutex(const std::string &name, const options &o = options())
		: mutex_base(name, DMUTEX_RECURSIVE, o) {}
};

// TimedLockable, recursive.
using recursive_timed_mutex = detail::timed<DMUTEX_RECURSIVE>;

// SharedTimedLockable: a distributed read-write lock (drwlock_t).  Writers
// are preferred; no upgrade (throws EDEADLK).
class shared_mutex {
public:
	using native_handle_type = drwlock_t *;

	explicit shared_mutex(const std::string &name, const options &o = options())
		: hook_(new detail::hook{ o.on_lost })
	{
		detail::attr a(o, DMUTEX_DEFAULT, hook_.get());
		if (o.robust)
			detail::check(EINVAL, "drwlock_init: a rwlock is not robust");
		detail::check(drwlock_init(&rw_, name.c_str(), a.get()), "drwlock_init");
	}
	~shared_mutex() { drwlock_destroy(&rw_); }
	shared_mutex(const shared_mutex &) = delete;
	shared_mutex &operator=(const shared_mutex &) = delete;

	void lock() { detail::check(drwlock_wrlock(&rw_), "drwlock_wrlock"); }
	bool try_lock() { return tried(drwlock_trywrlock(&rw_), "drwlock_trywrlock"); }
	void unlock() noexcept { (void)drwlock_unlock(&rw_); }
	void lock_shared() { detail::check(drwlock_rdlock(&rw_), "drwlock_rdlock"); }
	bool try_lock_shared() { return tried(drwlock_tryrdlock(&rw_), "drwlock_tryrdlock"); }
	void unlock_shared() noexcept { (void)drwlock_unlock(&rw_); }

	template <class Rep, class Period>
	bool try_lock_for(const std::chrono::duration<Rep, Period> &d)
	{
		return try_lock_until(detail::after(d));
	}
	template <class Clock, class Duration>
	bool try_lock_until(const std::chrono::time_point<Clock, Duration> &tp)
	{
		struct timespec ts;
		clockid_t clk = detail::deadline(tp, &ts);
		return timed(drwlock_clockwrlock(&rw_, clk, &ts), "drwlock_clockwrlock");
	}
	template <class Rep, class Period>
	bool try_lock_shared_for(const std::chrono::duration<Rep, Period> &d)
	{
		return try_lock_shared_until(detail::after(d));
	}
	template <class Clock, class Duration>
	bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration> &tp)
	{
		struct timespec ts;
		clockid_t clk = detail::deadline(tp, &ts);
		return timed(drwlock_clockrdlock(&rw_, clk, &ts), "drwlock_clockrdlock");
	}

	// The writer's fencing token; throws EPERM (not the writer), ENOLCK.
	std::uint64_t fence()
	{
		std::uint64_t t = 0;
		detail::check(drwlock_fence(&rw_, &t), "drwlock_fence");
		return t;
	}
	native_handle_type native_handle() noexcept { return &rw_; }

private:
	static bool tried(int err, const char *what)
	{
		if (err == EBUSY)
			return false;
		detail::check(err, what);
		return true;
	}
	static bool timed(int err, const char *what)
	{
		if (err == ETIMEDOUT)
			return false;
		detail::check(err, what);
		return true;
	}
	drwlock_t rw_;
	std::unique_ptr<detail::hook> hook_;
};

// A distributed condition variable (dcond_t), used with
// std::unique_lock<dmutex::mutex>.  Spurious wake-ups happen: wait with a
// predicate.  A robust mutex taken back from a dead owner sets its
// owner_died().  notify_one/notify_all throw EIO when the backend did not
// confirm (std::condition_variable's never fail; ours talk to a network).
class condition_variable {
public:
	explicit condition_variable(const std::string &name, dmutex_client_t *client = nullptr)
	{
		dcond_attr_t a;
		detail::check(dcond_attr_init(&a), "dcond_attr_init");
		dcond_attr_setclient(&a, client);
		int err = dcond_init(&c_, name.c_str(), &a);
		dcond_attr_destroy(&a);
		detail::check(err, "dcond_init");
	}
	~condition_variable() { dcond_destroy(&c_); }
	condition_variable(const condition_variable &) = delete;
	condition_variable &operator=(const condition_variable &) = delete;

	void notify_one() { detail::check(dcond_signal(&c_), "dcond_signal"); }
	void notify_all() { detail::check(dcond_broadcast(&c_), "dcond_broadcast"); }

	void wait(std::unique_lock<mutex> &lk) { waited(dcond_wait(&c_, handle(lk)), lk, "dcond_wait"); }
	template <class Predicate>
	void wait(std::unique_lock<mutex> &lk, Predicate pred)
	{
		while (!pred())
			wait(lk);
	}
	template <class Clock, class Duration>
	std::cv_status wait_until(std::unique_lock<mutex> &lk,
			const std::chrono::time_point<Clock, Duration> &tp)
	{
		struct timespec ts;
		clockid_t clk = detail::deadline(tp, &ts);
		int err = dcond_clockwait(&c_, handle(lk), clk, &ts);
		if (err == ETIMEDOUT)
			return std::cv_status::timeout;
		waited(err, lk, "dcond_clockwait");
		return std::cv_status::no_timeout;
	}
	template <class Clock, class Duration, class Predicate>
	bool wait_until(std::unique_lock<mutex> &lk, const std::chrono::time_point<Clock, Duration> &tp,
			Predicate pred)
	{
		while (!pred())
			if (wait_until(lk, tp) == std::cv_status::timeout)
				return pred();
		return true;
	}
	template <class Rep, class Period>
	std::cv_status wait_for(std::unique_lock<mutex> &lk, const std::chrono::duration<Rep, Period> &d)
	{
		return wait_until(lk, detail::after(d));
	}
	template <class Rep, class Period, class Predicate>
	bool wait_for(std::unique_lock<mutex> &lk, const std::chrono::duration<Rep, Period> &d,
			Predicate pred)
	{
		return wait_until(lk, detail::after(d), std::move(pred));
	}
	dcond_t *native_handle() noexcept { return &c_; }

private:
	static dmutex_t *handle(std::unique_lock<mutex> &lk)
	{
		if (!lk.owns_lock())
			throw std::system_error(EPERM, std::generic_category(), "dcond_wait: lock not owned");
		return lk.mutex()->native_handle();
	}
	static void waited(int err, std::unique_lock<mutex> &lk, const char *what)
	{
		if (err == EOWNERDEAD) {
			lk.mutex()->died_ = true;
			return;
		}
		detail::check(err, what);
	}
	dcond_t c_;
};

// A distributed counting semaphore (dsem_t): the first creator's value
// applies; a permit taken stays taken until released (no owner).
template <std::ptrdiff_t LeastMaxValue = static_cast<std::ptrdiff_t>(DSEM_VALUE_MAX)>
class counting_semaphore {
	static_assert(LeastMaxValue >= 0 && LeastMaxValue <= static_cast<std::ptrdiff_t>(DSEM_VALUE_MAX),
			"dmutex::counting_semaphore holds at most DSEM_VALUE_MAX");

public:
	static constexpr std::ptrdiff_t max() noexcept { return LeastMaxValue; }

	counting_semaphore(const std::string &name, std::ptrdiff_t desired, dmutex_client_t *client = nullptr)
	{
		if (desired < 0 || desired > LeastMaxValue)
			detail::check(EINVAL, "dsem_init: value out of range");
		detail::check(dsem_init(&s_, name.c_str(), static_cast<unsigned>(desired), client, 0), "dsem_init");
	}
	~counting_semaphore() { dsem_destroy(&s_); }
	counting_semaphore(const counting_semaphore &) = delete;
	counting_semaphore &operator=(const counting_semaphore &) = delete;

	void release(std::ptrdiff_t update = 1)
	{
		for (; update > 0; update--)
			detail::check(dsem_post(&s_), "dsem_post");
	}
	void acquire() { detail::check(dsem_wait(&s_), "dsem_wait"); }
	bool try_acquire()
	{
		int err = dsem_trywait(&s_);
		if (err == EAGAIN)
			return false;
		detail::check(err, "dsem_trywait");
		return true;
	}
	template <class Rep, class Period>
	bool try_acquire_for(const std::chrono::duration<Rep, Period> &d)
	{
		return try_acquire_until(detail::after(d));
	}
	template <class Clock, class Duration>
	bool try_acquire_until(const std::chrono::time_point<Clock, Duration> &tp)
	{
		struct timespec ts;
		clockid_t clk = detail::deadline(tp, &ts);
		int err = dsem_clockwait(&s_, clk, &ts);
		if (err == ETIMEDOUT)
			return false;
		detail::check(err, "dsem_clockwait");
		return true;
	}
	dsem_t *native_handle() noexcept { return &s_; }

private:
	dsem_t s_;
};

using binary_semaphore = counting_semaphore<1>;

} // namespace dmutex

#endif
