#define _GNU_SOURCE
#include "dk_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <errno.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <linux/falloc.h>
#include <unistd.h>

int dk_fallocate_keep_size(int fd, off_t offset, off_t length) {
    return fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length);
}

ssize_t dk_splice(int fd_in, off_t *offset_in, int fd_out, off_t *offset_out, size_t length, unsigned int flags) {
    return splice(fd_in, offset_in, fd_out, offset_out, length, flags);
}

int dk_splice_pipe(int fds[2], int size) {
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    int capacity = fcntl(fds[1], F_SETPIPE_SZ, size);
    if (capacity < 0) capacity = fcntl(fds[1], F_GETPIPE_SZ);
    return capacity < 0 ? 65536 : capacity;
}

int dk_pipe_pending(int fd) {
    int pending = 0;
    return ioctl(fd, FIONREAD, &pending) == 0 ? pending : -1;
}

unsigned int dk_splice_flags_nonblocking(void) { return SPLICE_F_MOVE | SPLICE_F_NONBLOCK; }

unsigned int dk_splice_flags_move(void) { return SPLICE_F_MOVE; }

int dk_start_writeback(int fd, off_t offset, off_t length) {
    return sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE);
}

long dk_file_system_type(int fd) {
    struct statfs system;
    return fstatfs(fd, &system) == 0 ? (long)system.f_type : -1;
}

int dk_reopen_direct(int fd) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int direct = open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (direct < 0) return -1;
    struct stat original, reopened;
    if (fstat(fd, &original) != 0 || fstat(direct, &reopened) != 0) {
        int saved = errno;
        close(direct);
        errno = saved;
        return -1;
    }
    if (original.st_dev != reopened.st_dev || original.st_ino != reopened.st_ino) {
        close(direct);
        errno = ESTALE;
        return -1;
    }
    return direct;
}

int dk_random_bytes(void *buffer, size_t length) {
    unsigned char *next = buffer;
    while (length > 0) {
        ssize_t got = getrandom(next, length, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        next += got;
        length -= (size_t)got;
    }
    return 0;
}

int dk_set_current_thread_name(const char *name) {
    /* The kernel keeps 15 bytes and a NUL; longer names are cut. Shown by ps, top and /proc. */
    return pthread_setname_np(pthread_self(), name);
}

int dk_fsetxattr(int fd, const char *name, const void *value, size_t size) {
    return fsetxattr(fd, name, value, size, 0);
}

ssize_t dk_fgetxattr(int fd, const char *name, void *value, size_t size) {
    return fgetxattr(fd, name, value, size);
}

ssize_t dk_lgetxattr(const char *path, const char *name, void *value, size_t size) {
    return lgetxattr(path, name, value, size);
}

int dk_fremovexattr(int fd, const char *name) {
    return fremovexattr(fd, name);
}
