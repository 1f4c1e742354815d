/* dirlock.c - one process per data directory (dirlock.h). */
#include "dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int dirlock_take(const char *dir, const char *name, const char *program, const char *flag,
                 struct shoal_err *err)
{
    char path[4096], pid[32] = "";
    int fd, n;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return err_set(err, 500, "data_dir", flag, "data directory path too long: %s", dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return err_set(err, 500, "data_dir", flag, "cannot open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        n = (int)pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? strcspn(pid, "\n") : 0] = '\0';
        close(fd);
        if (e != EWOULDBLOCK)
            return err_set(err, 500, "data_dir", flag, "cannot lock %s: %s", path, strerror(e));
        return err_set(err, 409, "data_dir_in_use", flag,
                       "another %s (pid %s) is using the data directory %s; give each %s its own %s, or stop "
                       "that one first", program, pid[0] ? pid : "unknown", dir, program, flag);
    }
    n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return err_set(err, 500, "data_dir", flag, "cannot write %s: %s", path, strerror(e));
    }
    return fd;
}
