#define _GNU_SOURCE
#include <string.h>
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

int dk_wake_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

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
    /* The kernel keeps 15 bytes and a NUL (shown by ps, top and /proc). glibc refuses a longer name with ERANGE
       and leaves the old one, so a long name is cut here instead: the thread then shows its first 15 bytes,
       not the name of the transfer it ran before. */
    char cut[16];
    size_t length = strnlen(name, sizeof cut - 1);
    memcpy(cut, name, length);
    cut[length] = '\0';
    return pthread_setname_np(pthread_self(), cut);
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

int dk_owned_check(int fd, int strict) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    if (!S_ISREG(st.st_mode)) return DK_REFUSED_NOT_REGULAR;
    if (st.st_uid != geteuid()) return DK_REFUSED_OTHER_OWNER;
    if (strict && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return DK_REFUSED_WRITABLE_BY_OTHERS;
    if (strict && st.st_nlink != 1) return DK_REFUSED_LINKED;
    return DK_ACCEPTED;
}

int dk_owned_open(const char *path, int flags, mode_t mode, int strict, int *refusal) {
    *refusal = DK_ACCEPTED;
    int truncate = (flags & O_TRUNC) != 0;
    // A FIFO planted at the name would block an O_RDONLY or O_WRONLY open until a peer comes (O_RDWR never
    // blocks on Linux): those are opened non-blocking, and the flag is cleared once the file is accepted.
    int nonblocking = (flags & O_ACCMODE) != O_RDWR && !(flags & O_NONBLOCK);
    int opened = (flags & ~O_TRUNC) | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | (nonblocking ? O_NONBLOCK : 0);
    int fd;
    do { fd = open(path, opened, mode); } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        // Name the refusal by what is there: O_NOFOLLOW fails with ELOOP on a link, but with O_CREAT some
        // kernels answer EACCES first for another user's link or file in a sticky directory.
        int saved = errno;
        struct stat st;
        if (saved == ELOOP) *refusal = DK_REFUSED_SYMLINK;
        else if (saved != ENOENT && lstat(path, &st) == 0) {
            if (S_ISLNK(st.st_mode)) *refusal = DK_REFUSED_SYMLINK;
            else if (st.st_uid != geteuid()) *refusal = DK_REFUSED_OTHER_OWNER;
        }
        errno = saved;
        return -1;
    }
    int verdict = dk_owned_check(fd, strict);
    if (verdict != DK_ACCEPTED) {
        int saved = verdict < 0 ? errno : EPERM;
        close(fd);
        if (verdict > 0) *refusal = verdict;
        errno = saved;
        return -1;
    }
    if (nonblocking) (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (truncate) {
        int status;
        do { status = ftruncate(fd, 0); } while (status != 0 && errno == EINTR);
        if (status != 0) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
    }
    return fd;
}

const char *dk_refusal_text(int refusal) {
    switch (refusal) {
    case DK_REFUSED_SYMLINK: return "is a symbolic link";
    case DK_REFUSED_NOT_REGULAR: return "is not a regular file";
    case DK_REFUSED_OTHER_OWNER: return "belongs to another user";
    case DK_REFUSED_WRITABLE_BY_OTHERS: return "is writable by its group or by others";
    case DK_REFUSED_LINKED: return "has another hard link";
    default: return "is acceptable";
    }
}

static int dk_create_exclusive(const char *name, mode_t mode) {
    int fd;
    do { fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, mode); } while (fd < 0 && errno == EINTR);
    return fd;
}

int dk_create_temporary(const char *prefix, mode_t mode, char *name, size_t capacity) {
    int length = snprintf(name, capacity, "%s%d", prefix, (int)getpid());
    if (length < 0 || (size_t)length >= capacity) { errno = ENAMETOOLONG; return -1; }
    int fd = dk_create_exclusive(name, mode);
    if (fd >= 0 || errno != EEXIST) return fd;
    // Our own leftover (a run of this pid that died, or an earlier failed write): take the name again.
    struct stat st;
    if (lstat(name, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_nlink == 1 && unlink(name) == 0) {
        fd = dk_create_exclusive(name, mode);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    // Someone else's (planted) name: left alone; a fresh unique name instead.
    for (int attempt = 0; attempt < 16; attempt++) {
        unsigned int token = 0;
        if (dk_random_bytes(&token, sizeof token) != 0) return -1;
        length = snprintf(name, capacity, "%s%d-%08x", prefix, (int)getpid(), token);
        if (length < 0 || (size_t)length >= capacity) { errno = ENAMETOOLONG; return -1; }
        fd = dk_create_exclusive(name, mode);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

int dk_rename_noreplace(const char *from, const char *to) {
    int status;
    do { status = renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE); } while (status != 0 && errno == EINTR);
    return status;
}

int dk_unlink_if_owned(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (st.st_uid != geteuid()) return 1;
    int status;
    do { status = unlink(path); } while (status != 0 && errno == EINTR);
    if (status != 0) return errno == ENOENT ? 0 : -1;
    return 0;
}

#include <sys/syscall.h>
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int dk_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}
