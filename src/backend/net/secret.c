#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "secret.h"

/* Longer than any password Redis would be given; a bigger file is not one. */
#define SECRET_MAX 4096

int
dmutex__secret_read(const char *display, const char *path, char **out)
{
	char buf[SECRET_MAX + 1];
	size_t len = 0, line;
	struct stat st;
	int fd, err = 0;

	*out = NULL;
	/* O_NONBLOCK: a FIFO with no writer must not hang the open; and only
	 * a regular file is read (a FIFO's writer could feed it slowly). */
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
		dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot read password_file %s: %s", display, path,
				strerror(errno));
		return EINVAL;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot read password_file %s: not a regular file",
				display, path);
		return EINVAL;
	}
	while (len < sizeof buf) {
		ssize_t k = read(fd, buf + len, sizeof buf - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			err = errno;
			break;
		}
		if (k == 0)
			break;
		len += (size_t)k;
	}
	close(fd);
	line = len;
	for (size_t i = 0; i < len; i++)
		if (buf[i] == '\n') {
			line = i;
			break;
		}
	if (line && buf[line - 1] == '\r')
		line--;
	if (err)
		dmutex__log(DMUTEX_LOG_ERROR, "%s: cannot read password_file %s: %s", display, path,
				strerror(err));
	else if (line > SECRET_MAX - 1 || memchr(buf, 0, line))
		dmutex__log(DMUTEX_LOG_ERROR, "%s: password_file %s: its first line is not a password "
				"(longer than %d bytes, or a NUL byte)", display, path, SECRET_MAX - 1);
	else if (!line)
		dmutex__log(DMUTEX_LOG_ERROR, "%s: password_file %s: its first line is empty", display,
				path);
	else if (!(*out = malloc(line + 1)))
		err = ENOMEM;
	else {
		memcpy(*out, buf, line);
		(*out)[line] = 0;
	}
	explicit_bzero(buf, sizeof buf);
	if (err == ENOMEM)
		return ENOMEM;
	return *out ? 0 : EINVAL;
}
