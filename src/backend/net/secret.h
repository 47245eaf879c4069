/* Credentials kept out of URLs (which ps and /proc show): password_file=. */
#ifndef DMUTEX_SECRET_H
#define DMUTEX_SECRET_H

/*
 * The password in the file at path: its first line, without the line end
 * ("\n" or "\r\n").  0 and *out (the caller wipes and frees it); EINVAL
 * when the file cannot be read, is empty or too long (logged with display,
 * the URL, and the path; never the content); ENOMEM.
 */
int dmutex__secret_read(const char *display, const char *path, char **out);

#endif
