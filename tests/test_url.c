#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmutex.h"
#include "dmutex_config.h"
#include "core/url.h"

#if defined(DMUTEX_HAVE_TLS) && DMUTEX_HAVE_TLS
#define TLS_BUILD 1
#else
#define TLS_BUILD 0
#endif

static struct dmutex__config cfg;

static void
teardown(void)
{
	dmutex__config_free(&cfg);
}

TestSuite(url, .fini = teardown);

/* Log lines, captured so tests can count them and look for passwords. */
static char logged[16][600];
static int nlogged;

static void
capture(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	if (nlogged < 16)
		snprintf(logged[nlogged], sizeof logged[0], "%s", msg);
	nlogged++;
}

static int
is_zeroed(const struct dmutex__config *c)
{
	static const struct dmutex__config zero;
	return !memcmp(c, &zero, sizeof zero);
}

static void
ok(const char *url)
{
	int rc = dmutex__url_parse(url, &cfg);
	cr_assert_eq(rc, 0, "%s: got %d (%s)", url, rc, strerror(rc));
}

/* An error leaves cfg zeroed even if it held garbage, and logs one line. */
static void
fails(const char *url, int want)
{
	int rc;

	dmutex_set_logger(capture, NULL);
	nlogged = 0;
	memset(&cfg, 0xa5, sizeof cfg);
	rc = dmutex__url_parse(url, &cfg);
	dmutex_set_logger(NULL, NULL);
	cr_assert_eq(rc, want, "%s: got %d, want %d", url, rc, want);
	cr_assert(is_zeroed(&cfg), "%s: config not zeroed after an error", url);
	cr_assert_eq(nlogged, 1, "%s: %d log lines, want 1", url, nlogged);
}

static void
tcp_node(size_t i, const char *host, int port, int db)
{
	cr_assert_lt(i, cfg.nnodes);
	cr_assert_str_eq(cfg.nodes[i].host, host);
	cr_assert_eq(cfg.nodes[i].port, port);
	cr_assert_eq(cfg.nodes[i].db, db);
	cr_assert_null(cfg.nodes[i].path);
	cr_assert_eq(cfg.nodes[i].tls, 0);
}

Test(url, defaults)
{
	ok("redis://localhost");
	cr_assert_eq(cfg.nnodes, 1);
	tcp_node(0, "localhost", 6379, 0);
	cr_assert_null(cfg.nodes[0].user);
	cr_assert_null(cfg.nodes[0].password);
	cr_assert_str_eq(cfg.nodes[0].display, "redis://localhost");
	cr_assert_eq(cfg.connect_timeout_ms, 2000);
	cr_assert_eq(cfg.command_timeout_ms, 1000);
	cr_assert_eq(cfg.lease_ms, 10000);
	cr_assert_str_eq(cfg.prefix, "dmutex:");
	cr_assert_eq(cfg.metrics, 1);
	cr_assert_eq(cfg.lease_cache, 1);
	cr_assert_eq(cfg.retry_window_ms, 60000);
}

/* How long a semaphore's or barrier's operation whose reply was lost is
 * asked again (README "Semaphores"): a minute, or three command timeouts
 * if longer; client-wide; 100 ms to a day. */
Test(url, retry_window_option)
{
	ok("redis://h?retry_window_ms=100");
	cr_assert_eq(cfg.retry_window_ms, 100);
	dmutex__config_free(&cfg);
	ok("redis://h?retry_window_ms=86400000");
	cr_assert_eq(cfg.retry_window_ms, 86400000);
	dmutex__config_free(&cfg);
	ok("redis://h?command_timeout_ms=30000");
	cr_assert_eq(cfg.retry_window_ms, 90000);
	dmutex__config_free(&cfg);
	ok("redis://h?command_timeout_ms=20000");
	cr_assert_eq(cfg.retry_window_ms, 60000);
	dmutex__config_free(&cfg);
	ok("redis://h?command_timeout_ms=30000&retry_window_ms=5000");
	cr_assert_eq(cfg.retry_window_ms, 5000);
	dmutex__config_free(&cfg);
	ok("redis://a?retry_window_ms=700,redis://b?retry_window_ms=700");
	cr_assert_eq(cfg.retry_window_ms, 700);
	dmutex__config_free(&cfg);
	fails("redis://h?retry_window_ms=99", EINVAL);
	fails("redis://h?retry_window_ms=86400001", EINVAL);
	fails("redis://h?retry_window_ms=", EINVAL);
	fails("redis://h?retry_window_ms=1s", EINVAL);
	fails("redis://h?retry_window_ms=-1", EINVAL);
	fails("redis://a?retry_window_ms=700,redis://b?retry_window_ms=800", EINVAL);
}

/* Cached leases (README "Cached leases"): on or off, client-wide, the same
 * value on every URL of a Redlock list; nothing else is a value. */
Test(url, lease_cache_option)
{
	ok("redis://h?lease_cache=on");
	cr_assert_eq(cfg.lease_cache, 1);
	dmutex__config_free(&cfg);
	ok("redis://h?lease_cache=off");
	cr_assert_eq(cfg.lease_cache, 0);
	dmutex__config_free(&cfg);
	ok("redis://a?lease_cache=on,redis://b?lease_cache=on");
	cr_assert_eq(cfg.lease_cache, 1);
	dmutex__config_free(&cfg);
	fails("redis://h?lease_cache=1", EINVAL);
	fails("redis://h?lease_cache=", EINVAL);
	fails("redis://h?lease_cache=onn", EINVAL);
	fails("redis://a?lease_cache=on,redis://b?lease_cache=off", EINVAL);
}

/* Per-lock counters on (default) or off; nothing else is a value. */
Test(url, metrics_option)
{
	ok("redis://h?metrics=0");
	cr_assert_eq(cfg.metrics, 0);
	dmutex__config_free(&cfg);
	ok("redis://h?metrics=1");
	cr_assert_eq(cfg.metrics, 1);
	dmutex__config_free(&cfg);
	fails("redis://h?metrics=2", EINVAL);
	fails("redis://h?metrics=off", EINVAL);
}

Test(url, no_log_on_success)
{
	dmutex_set_logger(capture, NULL);
	nlogged = 0;
	ok("redis://alice:pw@h:1/2?prefix=x&lease_ms=100,unix:///s");
	cr_assert_eq(nlogged, 0);
}

Test(url, host_port)
{
	ok("redis://cache-1.example.com:6380");
	tcp_node(0, "cache-1.example.com", 6380, 0);
	cr_assert_str_eq(cfg.nodes[0].display, "redis://cache-1.example.com:6380");
}

Test(url, ipv4)
{
	ok("redis://127.0.0.1:7000");
	tcp_node(0, "127.0.0.1", 7000, 0);
}

Test(url, port_bounds)
{
	ok("redis://h:1");
	tcp_node(0, "h", 1, 0);
	dmutex__config_free(&cfg);
	ok("redis://h:65535");
	tcp_node(0, "h", 65535, 0);
}

Test(url, bad_port_zero) { fails("redis://h:0", EINVAL); }
Test(url, bad_port_65536) { fails("redis://h:65536", EINVAL); }
Test(url, bad_port_abc) { fails("redis://h:abc", EINVAL); }
Test(url, bad_port_empty) { fails("redis://h:", EINVAL); }
Test(url, bad_port_signed) { fails("redis://h:+80", EINVAL); }
Test(url, bad_port_huge) { fails("redis://h:99999999999999999999999999", EINVAL); }

Test(url, db_path)
{
	ok("redis://h:6379/7");
	tcp_node(0, "h", 6379, 7);
}

Test(url, db_path_empty)
{
	ok("redis://h/");
	tcp_node(0, "h", 6379, 0);
}

Test(url, db_path_bounds)
{
	ok("redis://h/0");
	tcp_node(0, "h", 6379, 0);
	dmutex__config_free(&cfg);
	ok("redis://h/1000000");
	tcp_node(0, "h", 6379, 1000000);
}

Test(url, db_path_out_of_range) { fails("redis://h/1000001", EINVAL); }
Test(url, db_path_negative) { fails("redis://h/-1", EINVAL); }
Test(url, db_path_trailing_garbage) { fails("redis://h/2/3", EINVAL); }

Test(url, db_query_for_redis)
{
	ok("redis://h?db=4");
	tcp_node(0, "h", 6379, 4);
}

Test(url, db_query_bounds)
{
	ok("redis://h?db=0");
	tcp_node(0, "h", 6379, 0);
	dmutex__config_free(&cfg);
	ok("redis://h?db=1000000");
	tcp_node(0, "h", 6379, 1000000);
}

Test(url, db_query_out_of_range) { fails("redis://h?db=1000001", EINVAL); }

Test(url, db_path_and_query_agree)
{
	ok("redis://h/5?db=5");
	tcp_node(0, "h", 6379, 5);
}

Test(url, db_path_and_query_conflict) { fails("redis://h/5?db=6", EINVAL); }
Test(url, db_query_twice_conflict) { fails("redis://h?db=1&db=2", EINVAL); }

Test(url, acl_user_password)
{
	ok("redis://alice:s3cret@h:6379/2");
	tcp_node(0, "h", 6379, 2);
	cr_assert_str_eq(cfg.nodes[0].user, "alice");
	cr_assert_str_eq(cfg.nodes[0].password, "s3cret");
	cr_assert_str_eq(cfg.nodes[0].display, "redis://alice:***@h:6379/2");
}

Test(url, legacy_password_only)
{
	ok("redis://:s3cret@h");
	tcp_node(0, "h", 6379, 0);
	cr_assert_null(cfg.nodes[0].user);
	cr_assert_str_eq(cfg.nodes[0].password, "s3cret");
	cr_assert_str_eq(cfg.nodes[0].display, "redis://:***@h");
}

Test(url, user_without_password)
{
	ok("redis://bob@h");
	cr_assert_str_eq(cfg.nodes[0].user, "bob");
	cr_assert_null(cfg.nodes[0].password);
	cr_assert_str_eq(cfg.nodes[0].display, "redis://bob@h");
}

Test(url, empty_userinfo)
{
	ok("redis://:@h");
	cr_assert_null(cfg.nodes[0].user);
	cr_assert_null(cfg.nodes[0].password);
	tcp_node(0, "h", 6379, 0);
}

Test(url, percent_decoded_password)
{
	ok("redis://b%6Fb:p%40ss%3Aw@h:6380");
	tcp_node(0, "h", 6380, 0);
	cr_assert_str_eq(cfg.nodes[0].user, "bob");
	cr_assert_str_eq(cfg.nodes[0].password, "p@ss:w");
	cr_assert_str_eq(cfg.nodes[0].display, "redis://b%6Fb:***@h:6380");
}

Test(url, raw_colon_in_password)
{
	ok("redis://u:a:b@h");
	cr_assert_str_eq(cfg.nodes[0].user, "u");
	cr_assert_str_eq(cfg.nodes[0].password, "a:b");
}

Test(url, percent_truncated) { fails("redis://u:abc%4@h", EINVAL); }
Test(url, percent_not_hex) { fails("redis://u:abc%zz@h", EINVAL); }
Test(url, percent_nul) { fails("redis://u:abc%00@h", EINVAL); }
Test(url, percent_bad_in_user) { fails("redis://u%g1:pw@h", EINVAL); }

Test(url, ipv6)
{
	ok("redis://[::1]:6380");
	tcp_node(0, "::1", 6380, 0);
	cr_assert_str_eq(cfg.nodes[0].display, "redis://[::1]:6380");
}

Test(url, ipv6_default_port_and_db)
{
	ok("redis://u:pw@[2001:db8::7]/3");
	tcp_node(0, "2001:db8::7", 6379, 3);
	cr_assert_str_eq(cfg.nodes[0].display, "redis://u:***@[2001:db8::7]/3");
}

Test(url, ipv6_zone)
{
	ok("redis://[fe80::1%25eth0]:7000");
	tcp_node(0, "fe80::1%eth0", 7000, 0);
}

Test(url, ipv6_unbracketed) { fails("redis://::1:6379", EINVAL); }
Test(url, ipv6_unclosed) { fails("redis://[::1:6379", EINVAL); }
Test(url, ipv6_empty) { fails("redis://[]:6379", EINVAL); }
Test(url, ipv6_junk_after) { fails("redis://[::1]x", EINVAL); }

Test(url, unix_socket_db)
{
	ok("unix:///tmp/redis.sock?db=3");
	cr_assert_eq(cfg.nnodes, 1);
	cr_assert_null(cfg.nodes[0].host);
	cr_assert_eq(cfg.nodes[0].port, 0);
	cr_assert_str_eq(cfg.nodes[0].path, "/tmp/redis.sock");
	cr_assert_eq(cfg.nodes[0].db, 3);
	cr_assert_str_eq(cfg.nodes[0].display, "unix:///tmp/redis.sock?db=3");
}

Test(url, unix_socket_password)
{
	ok("unix://u:pw@/var/run/redis.sock?lease_ms=500");
	cr_assert_str_eq(cfg.nodes[0].path, "/var/run/redis.sock");
	cr_assert_str_eq(cfg.nodes[0].user, "u");
	cr_assert_str_eq(cfg.nodes[0].password, "pw");
	cr_assert_eq(cfg.nodes[0].db, 0);
	cr_assert_eq(cfg.lease_ms, 500);
	cr_assert_str_eq(cfg.nodes[0].display, "unix://u:***@/var/run/redis.sock?lease_ms=500");
}

Test(url, unix_socket_percent_path)
{
	ok("unix:///tmp/a%40b%3F.sock");
	cr_assert_str_eq(cfg.nodes[0].path, "/tmp/a@b?.sock");
}

Test(url, unix_empty_path) { fails("unix://", EINVAL); }
Test(url, unix_empty_path_after_userinfo) { fails("unix://u:pw@", EINVAL); }
Test(url, unix_empty_path_before_query) { fails("unix://?db=1", EINVAL); }
Test(url, unix_relative_path) { fails("unix://tmp/redis.sock", EINVAL); }
Test(url, unix_path_too_long)
{
	char url[300] = "unix:///";
	memset(url + strlen(url), 'a', 200);
	fails(url, EINVAL);
}

Test(url, connect_timeout_in_range)
{
	ok("redis://h?connect_timeout_ms=1");
	cr_assert_eq(cfg.connect_timeout_ms, 1);
	dmutex__config_free(&cfg);
	ok("redis://h?connect_timeout_ms=600000");
	cr_assert_eq(cfg.connect_timeout_ms, 600000);
}

Test(url, connect_timeout_zero) { fails("redis://h?connect_timeout_ms=0", EINVAL); }
Test(url, connect_timeout_above) { fails("redis://h?connect_timeout_ms=600001", EINVAL); }

Test(url, command_timeout_in_range)
{
	ok("redis://h?command_timeout_ms=1");
	cr_assert_eq(cfg.command_timeout_ms, 1);
	dmutex__config_free(&cfg);
	ok("redis://h?command_timeout_ms=600000");
	cr_assert_eq(cfg.command_timeout_ms, 600000);
}

Test(url, command_timeout_zero) { fails("redis://h?command_timeout_ms=0", EINVAL); }
Test(url, command_timeout_above) { fails("redis://h?command_timeout_ms=600001", EINVAL); }

Test(url, lease_in_range)
{
	ok("redis://h?lease_ms=100");
	cr_assert_eq(cfg.lease_ms, 100);
	dmutex__config_free(&cfg);
	ok("redis://h?lease_ms=86400000");
	cr_assert_eq(cfg.lease_ms, 86400000);
}

Test(url, lease_below) { fails("redis://h?lease_ms=99", EINVAL); }
Test(url, lease_above) { fails("redis://h?lease_ms=86400001", EINVAL); }

Test(url, number_syntax)
{
	static const char *const bad[] = {
		"redis://h?lease_ms=", "redis://h?lease_ms=+500", "redis://h?lease_ms=-500",
		"redis://h?lease_ms=500x", "redis://h?lease_ms=0x200",
		"redis://h?lease_ms=18446744073709552616",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		fails(bad[i], EINVAL);
}

Test(url, prefix_empty)
{
	ok("redis://h?prefix=");
	cr_assert_str_eq(cfg.prefix, "");
}

Test(url, prefix_max_and_decoded)
{
	char url[512] = "redis://h?prefix=";
	memset(url + strlen(url), 'p', 125);
	strcat(url, "%2C%3Az");  /* 125 + 3 = 128 bytes once decoded */
	ok(url);
	cr_assert_eq(strlen(cfg.prefix), 128);
	cr_assert_str_eq(cfg.prefix + 125, ",:z");
}

Test(url, prefix_too_long)
{
	char url[512] = "redis://h?prefix=";
	memset(url + strlen(url), 'p', 129);
	fails(url, EINVAL);
}

Test(url, prefix_bad_escape) { fails("redis://h?prefix=a%2", EINVAL); }

Test(url, unknown_option) { fails("redis://h?foo=1", EINVAL); }
Test(url, option_case_matters) { fails("redis://h?Lease_ms=200", EINVAL); }
Test(url, option_without_equals) { fails("redis://h?lease_ms", EINVAL); }
Test(url, empty_option) { fails("redis://h?lease_ms=200&&prefix=x", EINVAL); }
Test(url, empty_query) { fails("redis://h?", EINVAL); }

Test(url, repeated_option_same_value)
{
	ok("redis://h?lease_ms=200&lease_ms=200&prefix=a&prefix=a");
	cr_assert_eq(cfg.lease_ms, 200);
	cr_assert_str_eq(cfg.prefix, "a");
}

Test(url, conflicting_option_same_url) { fails("redis://h?lease_ms=200&lease_ms=300", EINVAL); }
Test(url, conflicting_prefix_same_url) { fails("redis://h?prefix=a&prefix=b", EINVAL); }
Test(url, conflicting_option_across_urls)
{
	fails("redis://a?connect_timeout_ms=5,redis://b?connect_timeout_ms=6", EINVAL);
}
Test(url, conflicting_prefix_across_urls)
{
	fails("redis://a?prefix=x,redis://b,redis://c?prefix=y", EINVAL);
}

Test(url, three_nodes_with_options)
{
	ok("redis://a:7000/1?connect_timeout_ms=300,"
	   "redis://:pw@b?db=2&command_timeout_ms=400&prefix=app%3A,"
	   "unix://u:pw2@/tmp/c.sock?lease_ms=3000&connect_timeout_ms=300");
	cr_assert_eq(cfg.nnodes, 3);
	tcp_node(0, "a", 7000, 1);
	tcp_node(1, "b", 6379, 2);
	cr_assert_null(cfg.nodes[1].user);
	cr_assert_str_eq(cfg.nodes[1].password, "pw");
	cr_assert_str_eq(cfg.nodes[1].display,
			"redis://:***@b?db=2&command_timeout_ms=400&prefix=app%3A");
	cr_assert_null(cfg.nodes[2].host);
	cr_assert_str_eq(cfg.nodes[2].path, "/tmp/c.sock");
	cr_assert_str_eq(cfg.nodes[2].user, "u");
	cr_assert_str_eq(cfg.nodes[2].password, "pw2");
	cr_assert_eq(cfg.nodes[2].db, 0);
	cr_assert_eq(cfg.connect_timeout_ms, 300);
	cr_assert_eq(cfg.command_timeout_ms, 400);
	cr_assert_eq(cfg.lease_ms, 3000);
	cr_assert_str_eq(cfg.prefix, "app:");
}

Test(url, db_is_per_node)
{
	ok("redis://a/1,redis://b/2,redis://c");
	tcp_node(0, "a", 6379, 1);
	tcp_node(1, "b", 6379, 2);
	tcp_node(2, "c", 6379, 0);
}

Test(url, empty_element) { fails("redis://a,,redis://b", EINVAL); }
Test(url, leading_comma) { fails(",redis://a", EINVAL); }
Test(url, trailing_comma) { fails("redis://a,", EINVAL); }
Test(url, empty_url) { fails("", EINVAL); }

Test(url, sixty_four_nodes)
{
	char url[64 * 16] = "";
	for (int i = 0; i < 64; i++)
		sprintf(url + strlen(url), "%sredis://h%d", i ? "," : "", i);
	ok(url);
	cr_assert_eq(cfg.nnodes, 64);
	tcp_node(63, "h63", 6379, 0);
}

Test(url, too_many_nodes)
{
	char url[65 * 16] = "";
	for (int i = 0; i < 65; i++)
		sprintf(url + strlen(url), "%sredis://h%d", i ? "," : "", i);
	fails(url, EINVAL);
}

Test(url, rediss_not_supported, .disabled = TLS_BUILD)
{
	fails("rediss://u:SECRETPW@h:6380", ENOTSUP);
	cr_assert_str_eq(logged[0], "cannot use rediss://u:***@h:6380: rediss:// (TLS) "
			"is not supported by this build of dmutex");
}

Test(url, rediss_in_list_not_supported, .disabled = TLS_BUILD)
{
	fails("redis://a,rediss://b", ENOTSUP);
}

Test(url, rediss_supported, .disabled = !TLS_BUILD)
{
	ok("rediss://h:6380");
	cr_assert_eq(cfg.nodes[0].tls, 1);
}
/* TLS options are per URL (node) and read nothing at parse time. */
Test(url, tls_options)
{
	ok("rediss://h:6380?tls_ca=/etc/ca%26b.pem&tls_cert=/c.pem&tls_key=/k.pem"
			"&tls_server_name=redis.example&tls_verify=off,rediss://g?lease_ms=5000");
	cr_assert_str_eq(cfg.nodes[0].tls_ca, "/etc/ca&b.pem");
	cr_assert_str_eq(cfg.nodes[0].tls_cert, "/c.pem");
	cr_assert_str_eq(cfg.nodes[0].tls_key, "/k.pem");
	cr_assert_str_eq(cfg.nodes[0].tls_server_name, "redis.example");
	cr_assert_eq(cfg.nodes[0].tls_verify, 0);
	cr_assert_null(cfg.nodes[1].tls_ca);
	cr_assert_eq(cfg.nodes[1].tls_verify, 1);
	cr_assert_eq(cfg.lease_ms, 5000);
}

Test(url, tls_option_needs_rediss) { fails("redis://h?tls_ca=/ca.pem", EINVAL); }
Test(url, tls_verify_needs_rediss) { fails("unix:///s?tls_verify=on", EINVAL); }
Test(url, tls_cert_needs_key) { fails("rediss://h?tls_cert=/c.pem", EINVAL); }
Test(url, tls_key_needs_cert) { fails("rediss://h?tls_key=/k.pem", EINVAL); }
Test(url, tls_verify_on_off_only) { fails("rediss://h?tls_verify=no", EINVAL); }
Test(url, tls_option_empty) { fails("rediss://h?tls_ca=", EINVAL); }
Test(url, tls_server_name_bad) { fails("rediss://h?tls_server_name=a%20b", EINVAL); }
Test(url, tls_option_twice) { fails("rediss://h?tls_ca=/a&tls_ca=/b", EINVAL); }

Test(url, password_file)
{
	ok("redis://alice@h?password_file=/run/secrets/redis,unix:///s?password_file=/p");
	cr_assert_str_eq(cfg.nodes[0].password_file, "/run/secrets/redis");
	cr_assert_str_eq(cfg.nodes[0].user, "alice");
	cr_assert_null(cfg.nodes[0].password);
	cr_assert_str_eq(cfg.nodes[1].password_file, "/p");
}

Test(url, password_file_and_password)
{
	fails("redis://:SECRETPW@h?password_file=/p", EINVAL);
	cr_assert_null(strstr(logged[0], "SECRETPW"));
}

/* Malformed wins over unsupported, so the answer does not depend on the build. */
Test(url, rediss_malformed_is_einval) { fails("rediss://h:0", EINVAL); }

Test(url, scheme_case_insensitive)
{
	ok("REDIS://h");
	tcp_node(0, "h", 6379, 0);
}

Test(url, unknown_scheme) { fails("http://h", EINVAL); }
Test(url, missing_scheme) { fails("localhost:6379", EINVAL); }
Test(url, empty_host) { fails("redis://", EINVAL); }
Test(url, empty_host_with_port) { fails("redis://:6379", EINVAL); }
Test(url, empty_host_after_userinfo) { fails("redis://u:pw@", EINVAL); }
Test(url, bad_host_char) { fails("redis://h!st", EINVAL); }
Test(url, trailing_garbage_after_port) { fails("redis://h:6379x", EINVAL); }
Test(url, space) { fails("redis://h:6379 ", EINVAL); }
Test(url, raw_at_outside_userinfo) { fails("redis://h?prefix=a@b", EINVAL); }

Test(url, config_free_is_null_safe)
{
	struct dmutex__config zero = { 0 };

	dmutex__config_free(NULL);
	dmutex__config_free(&zero);
	cr_assert(is_zeroed(&zero));
	ok("redis://u:pw@h,unix:///s");
	dmutex__config_free(&cfg);
	cr_assert(is_zeroed(&cfg));
	dmutex__config_free(&cfg);
	cr_assert(is_zeroed(&cfg));
}

Test(url, password_never_logged)
{
	/* "SECRET" and "XYZZY" stand for the two halves of a password. */
	static const char *const urls[] = {
		"redis://u:SECRETXYZZY@host:99999",
		"redis://u:SECRETXYZZY@host/?bogus=1",
		"redis://u:SECRETXYZZY@host/abc",
		"redis://u:SECRETXYZZY@",
		"redis://u:SECRETXYZZY@[::1",
		"redis://u:SECRETXYZZY@h?lease_ms=1",
		"redis://u:SECRET%zzXYZZY@host",
		"redis://:SECRETXYZZY@host?prefix=a,redis://v:SECRETXYZZY@h2?prefix=b",
		"redis://u:SECRET/XYZZY@host",
		"redis://u:SECRET?XYZZY@host",
		"redis://u:SECRET XYZZY@host",
		"redis://u:SECRET,,XYZZY@host:0",
		"redis-sentinel://u:SECRETXYZZY@h1,h2:0/m",
		"redis-sentinel://h1/m?sentinel_password=SECRETXYZZY&bogus=1",
		"redis-sentinel://h1/m?sentinel_password=SECRETXYZZY&sentinel_password=x",
		"redis-sentinel://h1/m?sentinel_password=SECRETXYZZY&sentinel_password_file=/f",
		"redis://h?sentinel_password=SECRETXYZZY",
		"unix://u:SECRETXYZZY@tmp/redis.sock",
		"unix://u:SECRETXYZZY@",
		"u:SECRETXYZZY@host",
		"http://u:SECRETXYZZY@host",
		"rediss://u:SECRETXYZZY@host:0",
		"redis-cluster://u:SECRETXYZZY@a:1,b:0",
		"redis-cluster://u:SECRET,XYZZY@a:1,b?lease_ms=1",
		/* Issue 30: a raw '&' in sentinel_password= reads as more
		 * options, a raw ",scheme://" in a password as another node. */
		"redis-sentinel://h1/m?sentinel_password=SECRET&XYZZY",
		"redis-sentinel://h1/m?sentinel_password=SECRET&XYZZY=1",
		"redis-sentinel://h1/m?sentinel_password=SECRET&db=XYZZY",
		"redis-sentinel://h1/m?sentinel_password=SECRET&tls_verify=XYZZY",
		"redis-sentinel://h1/m?lease_ms=500&sentinel_password=SECRET&lease_ms=99999999",
		"redis-sentinel://h1/m?sentinel_password=SECRET,redis://XYZZY@h",
		"redis://u:SECRET,redis://XYZZY@h:1",
		"redis://u:SECRET,rediss://XYZZY@h:1?lease_ms=1",
		"redis://u:SECRET,XYZZY://x@h",
		"redis://h:1,redis://u:SECRET,redis://XYZZY@h:0",
		"redis://u:SECRETXYZZY,redis://v@h:1",
	};

	for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
		int rc;

		dmutex_set_logger(capture, NULL);
		nlogged = 0;
		rc = dmutex__url_parse(urls[i], &cfg);
		dmutex_set_logger(NULL, NULL);
		cr_assert_neq(rc, 0, "%s parsed", urls[i]);
		cr_assert_eq(nlogged, 1, "%s: %d log lines", urls[i], nlogged);
		cr_assert_null(strstr(logged[0], "SECRET"), "%s logged '%s'", urls[i], logged[0]);
		cr_assert_null(strstr(logged[0], "XYZZY"), "%s logged '%s'", urls[i], logged[0]);
	}
}

Test(url, error_names_the_problem)
{
	fails("redis://u:pw@h?foo=1", EINVAL);
	cr_assert_str_eq(logged[0], "bad URL redis://u:***@h?foo=1: unknown option 'foo'");
	fails("redis://a,redis://u:pw@b:0", EINVAL);
	/* "a,redis" may be a user and "//u:pw" its password, written raw:
	 * the first ':' after "redis://a" is the second element's scheme's. */
	cr_assert_str_eq(logged[0], "bad URL redis:***@b:0: bad port '0' (1..65535)");

	/* What may be part of a password under another reading is masked
	 * too (url_secret.c): the rest after sentinel_password=, and a
	 * "port" that may be a password's head cut off at ",redis://". */
	fails("redis-sentinel://h:1/m?sentinel_password=ab&cd", EINVAL);
	cr_assert_str_eq(logged[0], "bad URL redis-sentinel://h:1/m?sentinel_password=***: "
			"unknown option '***'");
	fails("redis://u:pa,redis://ss@h:1", EINVAL);
	cr_assert_str_eq(logged[0], "bad URL redis://u:***: bad port '***' (1..65535)");
	fails("redis-sentinel://h:1/m?db=x&sentinel_password=ab", EINVAL);
	cr_assert_str_eq(logged[0], "bad URL redis-sentinel://h:1/m?db=x&sentinel_password=***: "
			"bad db 'x' (0..1000000)");
}

/* Sentinel (issue 14 item 3): the user information is the master's, the
 * sentinel_* options the sentinels', TLS options apply to all of them. */
Test(url, sentinel_list)
{
	const struct dmutex__node_addr *m;

	ok("redis-sentinel://u:pw@s1:1,s2,[::1]:3/my%20master?sentinel_user=su&"
	   "sentinel_password=sp&db=2&lease_ms=500");
	cr_assert_eq(cfg.nnodes, 1);
	m = &cfg.nodes[0];
	cr_assert_null(m->host);
	cr_assert_null(m->path);
	cr_assert_str_eq(m->master_name, "my master");
	cr_assert_str_eq(m->user, "u");
	cr_assert_str_eq(m->password, "pw");
	cr_assert_eq(m->db, 2);
	cr_assert_eq(cfg.lease_ms, 500);
	cr_assert_str_eq(m->display, "redis-sentinel://u:***@s1:1,s2,[::1]:3/my%20master?"
			"sentinel_user=su&sentinel_password=***&db=2&lease_ms=500");
	cr_assert_eq(m->nsentinels, 3);
	cr_assert_str_eq(m->sentinels[0].host, "s1");
	cr_assert_eq(m->sentinels[0].port, 1);
	cr_assert_str_eq(m->sentinels[1].host, "s2");
	cr_assert_eq(m->sentinels[1].port, 26379);
	cr_assert_str_eq(m->sentinels[2].host, "::1");
	cr_assert_eq(m->sentinels[2].port, 3);
	cr_assert_str_eq(m->sentinels[2].display, "sentinel [::1]:3");
	for (size_t i = 0; i < 3; i++) {
		cr_assert_str_eq(m->sentinels[i].user, "su");
		cr_assert_str_eq(m->sentinels[i].password, "sp");
		cr_assert_eq(m->sentinels[i].db, 0);
		cr_assert_eq(m->sentinels[i].tls, 0);
	}
}

Test(url, sentinel_short_secret_still_hidden)
{
	ok("redis-sentinel://h/m?sentinel_password=a");
	cr_assert_str_eq(cfg.nodes[0].display, "redis-sentinel://h/m?sentinel_password=***");
	cr_assert_str_eq(cfg.nodes[0].sentinels[0].password, "a");
	cr_assert_null(cfg.nodes[0].sentinels[0].user);
}

Test(url, sentinel_password_file)
{
	ok("redis-sentinel://h/m?sentinel_password_file=/run/s&password_file=/run/m");
	cr_assert_str_eq(cfg.nodes[0].password_file, "/run/m");
	cr_assert_str_eq(cfg.nodes[0].sentinels[0].password_file, "/run/s");
	cr_assert_null(cfg.nodes[0].sentinels[0].password);
}

Test(url, sentinel_tls_to_all, .disabled = !TLS_BUILD)
{
	ok("rediss-sentinel://h1,h2/m?tls_ca=/ca.pem&tls_server_name=redis.example");
	cr_assert_eq(cfg.nodes[0].tls, 1);
	for (size_t i = 0; i < 2; i++) {
		cr_assert_eq(cfg.nodes[0].sentinels[i].tls, 1);
		cr_assert_eq(cfg.nodes[0].sentinels[i].tls_verify, 1);
		cr_assert_str_eq(cfg.nodes[0].sentinels[i].tls_ca, "/ca.pem");
		cr_assert_str_eq(cfg.nodes[0].sentinels[i].tls_server_name, "redis.example");
	}
}

Test(url, sentinel_tls_not_supported, .disabled = TLS_BUILD)
{
	fails("rediss-sentinel://h1/m", ENOTSUP);
}

Test(url, sentinel_needs_master_name)
{
	fails("redis-sentinel://h1,h2", EINVAL);
	cr_assert_str_eq(logged[0], "bad URL redis-sentinel://h1,h2: no master name: "
			"redis-sentinel://HOST:PORT,.../MASTERNAME");
	fails("redis-sentinel://h1,h2/", EINVAL);
	fails("redis-sentinel://h1/?db=1", EINVAL);
	fails("redis-sentinel://h1/m%zz", EINVAL);
}

Test(url, sentinel_bad_lists)
{
	fails("redis-sentinel://h1,,h2/m", EINVAL);
	fails("redis-sentinel://h1,/m", EINVAL);
	fails("redis-sentinel://,h1/m", EINVAL);
	fails("redis-sentinel://h1:0/m", EINVAL);
	fails("redis-sentinel:///m", EINVAL);
}

Test(url, sentinel_options_only_on_sentinel_urls)
{
	fails("redis://h?sentinel_user=u", EINVAL);
	cr_assert_str_eq(logged[0], "bad URL redis://h?sentinel_user=u: sentinel_user is an "
			"option of redis-sentinel:// URLs");
	fails("unix:///s?sentinel_password_file=/f", EINVAL);
	fails("redis-sentinel://h/m?sentinel_password=a&sentinel_password_file=/f", EINVAL);
	fails("redis-sentinel://h/m?sentinel_user=", EINVAL);
	fails("redis-sentinel://h/m?tls_ca=/ca.pem", EINVAL);
}

/* A ',' starts a new URL only when "scheme://" follows it. */
Test(url, comma_inside_a_url)
{
	ok("redis://u:pa,ss@h,redis://v:,x@h2:7,unix:///s");
	cr_assert_eq(cfg.nnodes, 3);
	cr_assert_str_eq(cfg.nodes[0].password, "pa,ss");
	cr_assert_str_eq(cfg.nodes[1].password, ",x");
	cr_assert_eq(cfg.nodes[1].port, 7);
	cr_assert_str_eq(cfg.nodes[2].path, "/s");
	fails("redis://a,b", EINVAL);
	cr_assert_str_eq(logged[0], "bad URL redis://a,b: bad host 'a,b'");
}

Test(url, redlock_lists_only_plain_urls)
{
	fails("redis://a,redis-sentinel://h1,h2/m", EINVAL);
	cr_assert_str_eq(logged[0], "bad URL (node 2 of 2): a Redlock list may only contain "
			"redis://, rediss:// and unix:// URLs, not redis-sentinel://");
	fails("redis-sentinel://h1/m,redis://a", EINVAL);
	fails("rediss-sentinel://h1/m,redis://a,redis://b", EINVAL);
}

/* A cluster URL: one template address (credentials, options) and its seeds. */
Test(url, cluster_seeds)
{
	const struct dmutex__node_addr *a;

	ok("redis-cluster://u:p,w@a:7000,b,[::1]:7002?lease_ms=500");
	cr_assert_eq(cfg.nnodes, 1);
	cr_assert_eq(cfg.lease_ms, 500);
	a = &cfg.nodes[0];
	cr_assert(a->cluster);
	cr_assert_null(a->host);
	cr_assert_str_eq(a->user, "u");
	cr_assert_str_eq(a->password, "p,w");
	cr_assert_str_eq(a->display, "redis-cluster://u:***@a:7000,b,[::1]:7002?lease_ms=500");
	cr_assert_eq(a->nseeds, 3);
	cr_assert_str_eq(a->seeds[0].host, "a");
	cr_assert_eq(a->seeds[0].port, 7000);
	cr_assert_str_eq(a->seeds[1].host, "b");
	cr_assert_eq(a->seeds[1].port, 6379);
	cr_assert_str_eq(a->seeds[2].host, "::1");
	cr_assert_eq(a->seeds[2].port, 7002);
	cr_assert_eq(a->tls, 0);
}

Test(url, cluster_tls)
{
	if (!TLS_BUILD)
		return;
	ok("rediss-cluster://a:1,b:2/0?tls_verify=off&password_file=/p");
	cr_assert(cfg.nodes[0].cluster && cfg.nodes[0].tls);
	cr_assert_eq(cfg.nodes[0].tls_verify, 0);
	cr_assert_str_eq(cfg.nodes[0].password_file, "/p");
	cr_assert_eq(cfg.nodes[0].nseeds, 2);
}

Test(url, cluster_not_in_redlock) { fails("redis://a,redis-cluster://b,c", EINVAL); }
Test(url, cluster_then_redlock) { fails("redis-cluster://b,c,redis://a", EINVAL); }
Test(url, cluster_empty_seed) { fails("redis-cluster://a,,b", EINVAL); }
Test(url, cluster_trailing_comma) { fails("redis-cluster://a,", EINVAL); }
Test(url, cluster_db) { fails("redis-cluster://a,b/1", EINVAL); }
Test(url, cluster_db_option) { fails("redis-cluster://a,b?db=2", EINVAL); }
Test(url, cluster_tls_option_plain) { fails("redis-cluster://a?tls_ca=/x", EINVAL); }
Test(url, cluster_unix) { fails("redis-cluster://u@/tmp/s", EINVAL); }

/* Splitting is linear: a run of 4,000,000 commas is refused at once
 * (a strlen per comma took minutes). */
Test(url, long_comma_run_is_refused_fast, .timeout = 10)
{
	size_t n = 4000000;
	char *url = malloc(n + 16);

	cr_assert_not_null(url);
	strcpy(url, "redis://a");
	memset(url + 9, ',', n);
	url[9 + n] = 0;
	fails(url, EINVAL);
	free(url);
}

/* etcd:// (issue 27): the members of one cluster, default port 2379. */
Test(url, etcd_members)
{
	const struct dmutex__node_addr *a;

	if (!DMUTEX_HAVE_ETCD) {
		fails("etcd://a:1", ENOTSUP);
		cr_assert_str_eq(logged[0], "etcd:// needs a libdmutex built with etcd support: "
				"meson setup -Detcd=enabled (needs libcurl4-openssl-dev libjansson-dev)");
		return;
	}
	ok("etcd://app:s3,cret@a:2381,b,[::1]:2383/?lease_ms=2000&prefix=x:");
	cr_assert_eq(cfg.nnodes, 1);
	a = &cfg.nodes[0];
	cr_assert(a->etcd);
	cr_assert_not(a->cluster);
	cr_assert_null(a->host);
	cr_assert_str_eq(a->user, "app");
	cr_assert_str_eq(a->password, "s3,cret");
	cr_assert_str_eq(a->display, "etcd://app:***@a:2381,b,[::1]:2383/?lease_ms=2000&prefix=x:");
	cr_assert_eq(a->nseeds, 3);
	cr_assert_str_eq(a->seeds[1].host, "b");
	cr_assert_eq(a->seeds[1].port, 2379);
	cr_assert_str_eq(a->seeds[2].host, "::1");
	cr_assert_str_eq(cfg.prefix, "x:");
	cr_assert_eq(cfg.lease_ms, 2000);
}

Test(url, etcd_tls_options)
{
	if (!DMUTEX_HAVE_ETCD || !TLS_BUILD)
		return;
	ok("etcds://a?tls_ca=/ca.pem&tls_server_name=etcd.test");
	cr_assert(cfg.nodes[0].etcd && cfg.nodes[0].tls);
	cr_assert_str_eq(cfg.nodes[0].tls_ca, "/ca.pem");
	cr_assert_str_eq(cfg.nodes[0].tls_server_name, "etcd.test");
	fails("etcd://a?tls_ca=/ca.pem", EINVAL);
}

Test(url, etcd_has_no_db)
{
	if (!DMUTEX_HAVE_ETCD)
		return;
	fails("etcd://a/2", EINVAL);
	cr_assert_str_eq(logged[0], "bad URL etcd://a/2: an etcd:// URL has no path (etcd has no "
			"databases): etcd://HOST:PORT,...[/][?options]");
	fails("etcd://a?db=1", EINVAL);
	cr_assert_str_eq(logged[0], "bad URL etcd://a?db=1: db is not an option of etcd:// URLs");
}

Test(url, etcd_not_in_redlock) { fails("redis://a,etcd://b", EINVAL); }
