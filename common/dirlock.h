/* dirlock.h - one process per data directory: an exclusive lock on a file
 * in it (flock, so it ends with the process however it ends, kill -9
 * included), holding the owner's pid for the message a second process
 * gets. shoal-server and shoal-agent each take one on their --data-dir
 * before they touch anything in it. */
#ifndef SHOAL_DIRLOCK_H
#define SHOAL_DIRLOCK_H

#include "err.h"

/* Locks dir/name (created 0600) and writes this process's pid into it.
 * Returns the open descriptor (kept for the process's life; closing it
 * releases the lock), or -1 with err set: status 409, code "data_dir_in_use"
 * and a message naming `program`, the directory and the other's pid when
 * another process holds it; 500 when the file cannot be opened. */
int dirlock_take(const char *dir, const char *name, const char *program, const char *flag,
                 struct shoal_err *err);

#endif
