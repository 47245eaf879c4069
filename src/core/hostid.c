/*
 * Which machine and pid namespace this process lives in, as the kernel
 * says: the boot id (new at every boot, distinct per machine) and the
 * inode of the pid namespace.  A holder records it in its lock key, and
 * `dmutex status` run where the same pair holds can ask kill(pid, 0)
 * whether the holder is alive; a hostname alone cannot tell two containers
 * (or a rebooted machine) apart.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

void
dmutex__hostid(char *buf, size_t len)
{
	char boot[64] = "";
	struct stat st;
	FILE *f;

	buf[0] = '\0';
	if (!(f = fopen("/proc/sys/kernel/random/boot_id", "re")))
		return;
	if (!fgets(boot, sizeof boot, f))
		boot[0] = '\0';
	fclose(f);
	boot[strcspn(boot, "\n")] = '\0';
	if (!boot[0] || stat("/proc/self/ns/pid", &st))
		return;
	snprintf(buf, len, "%s/%llu", boot, (unsigned long long)st.st_ino);
}
