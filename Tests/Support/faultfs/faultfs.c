// faultfs: an LD_PRELOAD shim that counts, fails and records the file operations a process makes on
// files under one directory (issue #20). The engine is not modified: the tests run the real
// `downloadkit` executable with this library preloaded.
//
// Build: clang -shared -fPIC -O1 -o faultfs.so faultfs.c -ldl   (or cc/gcc)
// (Tests/ConformanceTests/FaultFS.swift compiles it at test time into a temporary directory.)
//
// Environment:
//   FAULTFS_DIR        absolute directory; only paths under it (and descriptors opened on them) count.
//   FAULTFS_FAIL_AT    N >= 1: the Nth counted operation fails (once; later operations pass).
//   FAULTFS_MODE       EIO | ENOSPC | EINTR | SHORT. SHORT: if the Nth operation writes data, it writes
//                      only half of it (at least 1 byte) and returns the short count; other operations
//                      pass. EINTR: the operation does nothing and fails with EINTR.
//   FAULTFS_COUNT      file: on exit (and after every counted operation) holds the number of counted
//                      operations so far and, on a second line, "injected" once the fault was injected.
//   FAULTFS_LOG        file: every counted operation is appended as one text line (see below); the
//                      data of every write is appended to FAULTFS_LOG.data, which the line points into.
//   FAULTFS_BOOT_ID    text: what the process reads from /proc/sys/kernel/random/boot_id (works without
//                      FAULTFS_DIR). A power cut is always followed by a new boot, and the engine trusts
//                      its unsynced journal and temp-file length only on the boot that wrote them; a rerun
//                      of a power-cut state on the recording's boot would trust what the cut lost.
//
// Counted operations: open/openat/creat (of a path under the directory, including the directory itself),
// write/pwrite/writev/pwritev, fsync/fdatasync/sync_file_range, ftruncate, fallocate, rename/renameat
// (either side under the directory), unlink/unlinkat, copy_file_range/splice into a tracked descriptor.
//
// Log lines (paths are absolute; <fd> is the descriptor, ino the inode number at open):
//   open <ino> <created 0|1> <trunc 0|1> <path>
//   write <ino> <offset> <length> <data offset in .data>
//   trunc <ino> <length>
//   falloc <ino> <mode> <offset> <length>
//   fsync <ino>                  (fsync, fdatasync of a file or a directory; ino of the directory for a dir)
//   rename <from> <to>           (one path per line: "rename", then the two paths on the next two lines)
//   unlink <path>
// Only the outcome of operations that succeeded is logged (a failed write logs nothing; a short write
// logs the bytes it wrote).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FD 65536

static char dir_prefix[PATH_MAX];
static size_t dir_prefix_len;
static long fail_at;
static int mode_errno; // EIO, ENOSPC, EINTR; 0 = SHORT
static int enabled;
static char count_path[PATH_MAX];
static char log_path[PATH_MAX];
static int log_fd = -1, data_fd = -1;
static long long data_size;
static long op_count;
static int injected;
static unsigned char tracked[MAX_FD];
static unsigned long long tracked_ino[MAX_FD];
static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

#define REAL(name) static __typeof__(name) *real_##name; if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

static int (*raw_open)(const char *, int, ...);
static ssize_t (*raw_write)(int, const void *, size_t);

static void write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = raw_write(fd, p, len);
        if (n < 0) { if (errno == EINTR) continue; return; }
        p += n; len -= (size_t)n;
    }
}

static void save_count(void) {
    if (!count_path[0]) return;
    int saved = errno;
    int fd = raw_open(count_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
        char buf[64];
        int n = snprintf(buf, sizeof buf, "%ld\n%s", op_count, injected ? "injected\n" : "");
        write_all(fd, buf, (size_t)n);
        close(fd);
    }
    errno = saved;
}

static char boot_id[128];

__attribute__((constructor)) static void faultfs_init(void) {
    raw_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    raw_write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    const char *b = getenv("FAULTFS_BOOT_ID");
    if (b && *b) snprintf(boot_id, sizeof boot_id, "%s\n", b);
    const char *d = getenv("FAULTFS_DIR");
    if (!d || !*d) return;
    snprintf(dir_prefix, sizeof dir_prefix, "%s", d);
    dir_prefix_len = strlen(dir_prefix);
    while (dir_prefix_len > 1 && dir_prefix[dir_prefix_len - 1] == '/') dir_prefix[--dir_prefix_len] = 0;
    const char *f = getenv("FAULTFS_FAIL_AT");
    fail_at = f ? atol(f) : 0;
    const char *m = getenv("FAULTFS_MODE");
    mode_errno = EIO;
    if (m && !strcmp(m, "ENOSPC")) mode_errno = ENOSPC;
    if (m && !strcmp(m, "EINTR")) mode_errno = EINTR;
    if (m && !strcmp(m, "SHORT")) mode_errno = 0;
    const char *c = getenv("FAULTFS_COUNT");
    if (c) snprintf(count_path, sizeof count_path, "%s", c);
    const char *l = getenv("FAULTFS_LOG");
    if (l && *l) {
        snprintf(log_path, sizeof log_path, "%s", l);
        log_fd = raw_open(l, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        char dp[PATH_MAX + 8];
        snprintf(dp, sizeof dp, "%s.data", l);
        data_fd = raw_open(dp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        struct stat st;
        if (data_fd >= 0 && fstat(data_fd, &st) == 0) data_size = st.st_size;
    }
    enabled = 1;
    save_count();
}

// Whether `path` (absolute, or relative to dirfd / the working directory) is the directory or under it.
// A file opened again through /proc/self/fd/N (the engine's O_DIRECT descriptor, dk_reopen_direct) is the
// file the link names: without this its writes went unrecorded, and the power-cut replay then rebuilt
// files the real run never had.
static int path_in_dir(int dirfd, const char *path, char *out, size_t outlen) {
    if (!enabled || !path) return 0;
    char full[PATH_MAX * 2];
    char own[64];
    snprintf(own, sizeof own, "/proc/%d/fd/", (int)getpid());
    if (strncmp(path, "/proc/self/fd/", 14) == 0 || strncmp(path, "/dev/fd/", 8) == 0 || strncmp(path, own, strlen(own)) == 0) {
        ssize_t n = readlink(path, full, sizeof full - 1);
        if (n <= 0 || full[0] != '/') return 0;
        full[n] = 0;
    } else if (path[0] == '/') {
        snprintf(full, sizeof full, "%s", path);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base)) return 0;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n < 0) return 0;
            base[n] = 0;
        }
        snprintf(full, sizeof full, "%s/%s", base, path);
    }
    if (strncmp(full, dir_prefix, dir_prefix_len) != 0) return 0;
    char next = full[dir_prefix_len];
    if (next != 0 && next != '/') return 0;
    if (out) snprintf(out, outlen, "%s", full);
    return 1;
}

static int fd_tracked(int fd) { return enabled && fd >= 0 && fd < MAX_FD && tracked[fd]; }

// Counts one operation; returns 1 when this one is to fail.
static int count_op(void) {
    op_count++;
    int fail = (fail_at > 0 && op_count == fail_at && !injected);
    if (fail) injected = 1;
    save_count();
    return fail;
}

static void logf_line(const char *fmt, ...) {
    if (log_fd < 0) return;
    char buf[PATH_MAX * 3];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) write_all(log_fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

static void log_data(int fd, long long offset, const void *buf, size_t len) {
    if (log_fd < 0 || len == 0) return;
    logf_line("write %llu %lld %zu %lld\n", tracked_ino[fd], offset, len, data_size);
    write_all(data_fd, buf, len);
    data_size += (long long)len;
}

static void track(int fd, const char *full, int flags, int existed) {
    if (fd < 0 || fd >= MAX_FD) return;
    struct stat st;
    tracked[fd] = 1;
    tracked_ino[fd] = (fstat(fd, &st) == 0) ? (unsigned long long)st.st_ino : 0;
    logf_line("open %llu %d %d %s\n", tracked_ino[fd], !existed, (flags & O_TRUNC) ? 1 : 0, full);
}

// FAULTFS_BOOT_ID: the boot id file, served from memory.
static int open_boot_id(int flags) {
    int fd = memfd_create("faultfs-boot-id", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
    if (fd < 0) return -1;
    size_t len = strlen(boot_id);
    if (raw_write(fd, boot_id, len) != (ssize_t)len || lseek(fd, 0, SEEK_SET) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

static int do_openat(int dirfd, const char *path, int flags, mode_t mode, int use_at) {
    REAL(openat);
    if (boot_id[0] && path && !strcmp(path, "/proc/sys/kernel/random/boot_id")) return open_boot_id(flags);
    char full[PATH_MAX * 2];
    if (!path_in_dir(dirfd, path, full, sizeof full)) return real_openat(use_at ? dirfd : AT_FDCWD, path, flags, mode);
    pthread_mutex_lock(&lock);
    int fail = count_op();
    if (fail && mode_errno != 0) {
        pthread_mutex_unlock(&lock);
        errno = mode_errno;
        return -1;
    }
    struct stat st;
    int existed = (fstatat(use_at ? dirfd : AT_FDCWD, path, &st, 0) == 0);
    int fd = real_openat(use_at ? dirfd : AT_FDCWD, path, flags, mode);
    int saved = errno;
    if (fd >= 0) track(fd, full, flags, existed);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return fd;
}

static mode_t mode_arg(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) { va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap); return do_openat(AT_FDCWD, path, flags, m, 0); }
int open64(const char *path, int flags, ...) { va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap); return do_openat(AT_FDCWD, path, flags, m, 0); }
int openat(int d, const char *path, int flags, ...) { va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap); return do_openat(d, path, flags, m, 1); }
int openat64(int d, const char *path, int flags, ...) { va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap); return do_openat(d, path, flags, m, 1); }
int __open_2(const char *path, int flags) { return do_openat(AT_FDCWD, path, flags, 0, 0); }
int __open64_2(const char *path, int flags) { return do_openat(AT_FDCWD, path, flags, 0, 0); }
int __openat_2(int d, const char *path, int flags) { return do_openat(d, path, flags, 0, 1); }
int __openat64_2(int d, const char *path, int flags) { return do_openat(d, path, flags, 0, 1); }
int creat(const char *path, mode_t m) { return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, m, 0); }
int creat64(const char *path, mode_t m) { return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, m, 0); }

int close(int fd) {
    REAL(close);
    if (fd >= 0 && fd < MAX_FD) tracked[fd] = 0;
    return real_close(fd);
}

// The common step of every data-writing call: counts it, says whether it fails, and how many bytes to
// write (half, at least 1, for an injected short write).
static void fault_write(size_t len, int *fail_out, size_t *len_out) {
    int fail = count_op();
    *fail_out = fail;
    *len_out = len;
    if (fail && mode_errno == 0 && len > 1) *len_out = len / 2;
}

ssize_t write(int fd, const void *buf, size_t len) {
    REAL(write);
    if (!fd_tracked(fd)) return real_write(fd, buf, len);
    pthread_mutex_lock(&lock);
    int fail; size_t n;
    fault_write(len, &fail, &n);
    if (fail && mode_errno) { pthread_mutex_unlock(&lock); errno = mode_errno; return -1; }
    off_t off = lseek(fd, 0, SEEK_CUR);
    if (fcntl(fd, F_GETFL) & O_APPEND) { struct stat st; if (fstat(fd, &st) == 0) off = st.st_size; }
    ssize_t r = real_write(fd, buf, n);
    int saved = errno;
    if (r > 0) log_data(fd, off, buf, (size_t)r);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}

static ssize_t do_pwrite(int fd, const void *buf, size_t len, off_t off) {
    REAL(pwrite);
    if (!fd_tracked(fd)) return real_pwrite(fd, buf, len, off);
    pthread_mutex_lock(&lock);
    int fail; size_t n;
    fault_write(len, &fail, &n);
    if (fail && mode_errno) { pthread_mutex_unlock(&lock); errno = mode_errno; return -1; }
    ssize_t r = real_pwrite(fd, buf, n, off);
    int saved = errno;
    if (r > 0) log_data(fd, off, buf, (size_t)r);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}
ssize_t pwrite(int fd, const void *buf, size_t len, off_t off) { return do_pwrite(fd, buf, len, off); }
ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off) { return do_pwrite(fd, buf, len, off); }

// writev/pwritev: gathered into one buffer so the log and short writes stay simple.
static ssize_t do_pwritev(int fd, const struct iovec *iov, int cnt, off_t off, int positional) {
    size_t total = 0;
    for (int i = 0; i < cnt; i++) total += iov[i].iov_len;
    char *buf = malloc(total ? total : 1);
    if (!buf) { errno = ENOMEM; return -1; }
    size_t at = 0;
    for (int i = 0; i < cnt; i++) { memcpy(buf + at, iov[i].iov_base, iov[i].iov_len); at += iov[i].iov_len; }
    ssize_t r = positional ? do_pwrite(fd, buf, total, off) : write(fd, buf, total);
    int saved = errno;
    free(buf);
    errno = saved;
    return r;
}
ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    REAL(writev);
    if (!fd_tracked(fd)) return real_writev(fd, iov, cnt);
    return do_pwritev(fd, iov, cnt, 0, 0);
}
ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    REAL(pwritev);
    if (!fd_tracked(fd)) return real_pwritev(fd, iov, cnt, off);
    return do_pwritev(fd, iov, cnt, off, 1);
}
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off) { return pwritev(fd, iov, cnt, off); }

// A non-data operation on a tracked descriptor: counts, fails with the mode's errno (SHORT: passes).
#define SIMPLE_FD_OP(call, logline...) \
    pthread_mutex_lock(&lock); \
    int fail = count_op(); \
    if (fail && mode_errno) { pthread_mutex_unlock(&lock); errno = mode_errno; return -1; } \
    int r = call; \
    int saved = errno; \
    if (r == 0) logf_line(logline); \
    pthread_mutex_unlock(&lock); \
    errno = saved; \
    return r;

int fsync(int fd) {
    REAL(fsync);
    if (!fd_tracked(fd)) return real_fsync(fd);
    SIMPLE_FD_OP(real_fsync(fd), "fsync %llu\n", tracked_ino[fd])
}
int fdatasync(int fd) {
    REAL(fdatasync);
    if (!fd_tracked(fd)) return real_fdatasync(fd);
    SIMPLE_FD_OP(real_fdatasync(fd), "fsync %llu\n", tracked_ino[fd])
}
int sync_file_range(int fd, off_t off, off_t len, unsigned int flags) {
    REAL(sync_file_range);
    if (!fd_tracked(fd)) return real_sync_file_range(fd, off, len, flags);
    // Starts writeback only: no durability promise, so nothing is logged.
    pthread_mutex_lock(&lock);
    int fail = count_op();
    pthread_mutex_unlock(&lock);
    if (fail && mode_errno) { errno = mode_errno; return -1; }
    return real_sync_file_range(fd, off, len, flags);
}
static int do_ftruncate(int fd, off_t len) {
    REAL(ftruncate);
    if (!fd_tracked(fd)) return real_ftruncate(fd, len);
    SIMPLE_FD_OP(real_ftruncate(fd, len), "trunc %llu %lld\n", tracked_ino[fd], (long long)len)
}
int ftruncate(int fd, off_t len) { return do_ftruncate(fd, len); }
int ftruncate64(int fd, off_t len) { return do_ftruncate(fd, len); }
static int do_fallocate(int fd, int mode, off_t off, off_t len) {
    REAL(fallocate);
    if (!fd_tracked(fd)) return real_fallocate(fd, mode, off, len);
    SIMPLE_FD_OP(real_fallocate(fd, mode, off, len), "falloc %llu %d %lld %lld\n", tracked_ino[fd], mode, (long long)off, (long long)len)
}
int fallocate(int fd, int mode, off_t off, off_t len) { return do_fallocate(fd, mode, off, len); }
int fallocate64(int fd, int mode, off_t off, off_t len) { return do_fallocate(fd, mode, off, len); }
int posix_fallocate(int fd, off_t off, off_t len) {
    REAL(posix_fallocate);
    if (!fd_tracked(fd)) return real_posix_fallocate(fd, off, len);
    pthread_mutex_lock(&lock);
    int fail = count_op();
    pthread_mutex_unlock(&lock);
    if (fail && mode_errno) return mode_errno;
    int r = real_posix_fallocate(fd, off, len);
    if (r == 0) logf_line("falloc %llu 0 %lld %lld\n", tracked_ino[fd], (long long)off, (long long)len);
    return r;
}

static int do_renameat(int olddir, const char *from, int newdir, const char *to, unsigned int flags, int use_at) {
    REAL(renameat2);
    char f[PATH_MAX * 2], t[PATH_MAX * 2];
    int in_from = path_in_dir(olddir, from, f, sizeof f);
    int in_to = path_in_dir(newdir, to, t, sizeof t);
    int od = use_at ? olddir : AT_FDCWD, nd = use_at ? newdir : AT_FDCWD;
    if (!in_from && !in_to) return real_renameat2(od, from, nd, to, flags);
    if (!in_from) snprintf(f, sizeof f, "%s", from);
    if (!in_to) snprintf(t, sizeof t, "%s", to);
    SIMPLE_FD_OP(real_renameat2(od, from, nd, to, flags), "rename\n%s\n%s\n", f, t)
}
int rename(const char *from, const char *to) { return do_renameat(AT_FDCWD, from, AT_FDCWD, to, 0, 0); }
int renameat(int od, const char *from, int nd, const char *to) { return do_renameat(od, from, nd, to, 0, 1); }
int renameat2(int od, const char *from, int nd, const char *to, unsigned int flags) { return do_renameat(od, from, nd, to, flags, 1); }

static int do_unlinkat(int d, const char *path, int flags, int use_at) {
    REAL(unlinkat);
    char full[PATH_MAX * 2];
    if (!path_in_dir(d, path, full, sizeof full)) return real_unlinkat(use_at ? d : AT_FDCWD, path, flags);
    SIMPLE_FD_OP(real_unlinkat(use_at ? d : AT_FDCWD, path, flags), "unlink %s\n", full)
}
int unlink(const char *path) { return do_unlinkat(AT_FDCWD, path, 0, 0); }
int unlinkat(int d, const char *path, int flags) { return do_unlinkat(d, path, flags, 1); }

ssize_t copy_file_range(int in, off_t *oin, int out, off_t *oout, size_t len, unsigned int flags) {
    REAL(copy_file_range);
    if (!fd_tracked(out)) return real_copy_file_range(in, oin, out, oout, len, flags);
    // Data moved without passing through user space cannot be logged for the power-cut replay; fail
    // the call with EXDEV (the documented "fall back to read/write" answer) when logging.
    pthread_mutex_lock(&lock);
    int fail = count_op();
    pthread_mutex_unlock(&lock);
    if (fail && mode_errno) { errno = mode_errno; return -1; }
    if (log_fd >= 0) { errno = EXDEV; return -1; }
    if (fail && len > 1) len /= 2;
    return real_copy_file_range(in, oin, out, oout, len, flags);
}
ssize_t splice(int in, loff_t *oin, int out, loff_t *oout, size_t len, unsigned int flags) {
    REAL(splice);
    if (!fd_tracked(out)) return real_splice(in, oin, out, oout, len, flags);
    pthread_mutex_lock(&lock);
    int fail = count_op();
    pthread_mutex_unlock(&lock);
    if (fail && mode_errno) { errno = mode_errno; return -1; }
    if (log_fd >= 0) { errno = EINVAL; return -1; }
    if (fail && len > 1) len /= 2;
    return real_splice(in, oin, out, oout, len, flags);
}

__attribute__((destructor)) static void faultfs_fini(void) { if (enabled) save_count(); }
