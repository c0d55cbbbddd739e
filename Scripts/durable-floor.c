// The durable floor for the small-files scenario (docs/BENCHMARKS.md, "Small files"): what any client
// that makes each 64 KiB file durable pays on this machine's file system, with no network and no
// parsing — create `NAME.part`, write 64 KiB, fdatasync, rename to NAME, fsync the directory — on
// THREADS threads. MODE 1 only creates and writes each file under its final name (what curl does).
// MODE 3 replaces both syncs with a group commit of `syncfs`: each file waits for a syncfs that began
// after its close (its data and inode), is renamed, and waits for another (the directory) — the same
// order, one flush per group instead of two per file, but it syncs the whole file system, everyone's
// dirty data included. MODE 2 renames before the one group sync: an upper bound only, not safe (after
// a power cut the final name can hold a file whose data never reached the disk).
// MODE 4 is DownloadKit's own sequence for a new small file, with no network and no Swift: create
// `NAME.part`, lock it (`flock`), set the resume record (a 1 KiB extended attribute) before the first
// body byte, write 64 KiB, fdatasync, set the three validators (ETag, Last-Modified, the URL) as
// attributes, remove the record, `fchmod`, close, rename, and wait for a directory fsync begun after
// the rename that callers arriving meanwhile share (DownloadKit's `DirectorySync`).
// MODE 5 is MODE 4 with the body written past the page cache, as DownloadKit writes a gathered small
// body (`SmallBodyGather`): copied into a page-aligned buffer and written through a second descriptor
// opened with `O_DIRECT`.
// MODE 6 is DownloadKit's sequence since 2026-11-28 for a small body that arrives whole: create
// `NAME.part` and lock it, write the body with `O_DIRECT` through a second descriptor, fdatasync, `fchmod`,
// set the validators as one attribute (no record is set or removed), close, rename, and the shared
// directory fsync. MODE 7 is MODE 6 with the body in an unnamed file (`O_TMPFILE`, no lock) linked to NAME
// at the end and fsynced again (the link count): on a no-journal ext4 the first fdatasync of a file with a
// new directory entry also writes the directory (`ext4_sync_parent`), which an unnamed file does not have
// until it is linked (docs/BENCHMARKS.md, "Small files: the directory inside fdatasync").
//
//   cc -O2 -pthread -o /tmp/durable-floor Scripts/durable-floor.c
//   mkdir /tmp/floor-1 && /tmp/durable-floor /tmp/floor-1 1000 16 [MODE]
//
// Use a fresh directory each time and delete nothing in between (the ext4 note in docs/BENCHMARKS.md).
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static const char *directory;
static int total, mode, next_index;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char body[65536];
static char record[1024];
static void fail(const char *what, const char *path);
static pthread_mutex_t sync_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sync_done = PTHREAD_COND_INITIALIZER;
static long started, finished;
static int syncing;
static int unsafe_link;

// Returns after a syncfs (MODE 2, 3) or a directory fsync (MODE 4 to 7) that began after the call; callers
// that arrive while one runs share the next.
static void group_sync(int dfd) {
    pthread_mutex_lock(&sync_lock);
    long needed = started + 1;
    while (finished < needed) {
        if (!syncing) {
            syncing = 1;
            long mine = ++started;
            pthread_mutex_unlock(&sync_lock);
            if ((mode >= 4 ? fsync(dfd) : syncfs(dfd)) != 0) fail(mode >= 4 ? "fsync" : "syncfs", directory);
            pthread_mutex_lock(&sync_lock);
            finished = mine;
            syncing = 0;
            pthread_cond_broadcast(&sync_done);
        } else {
            pthread_cond_wait(&sync_done, &sync_lock);
        }
    }
    pthread_mutex_unlock(&sync_lock);
}

static void fail(const char *what, const char *path) {
    perror(what);
    fprintf(stderr, "  (%s)\n", path);
    exit(1);
}

// MODE 6 and 7 for file `i` (see the top).
static void sequence_6_or_7(int i, int dfd, const char *partial, const char *final, void *aligned) {
    int fd = mode == 7 ? open(directory, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)
                       : open(partial, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) fail("open", partial);
    if (mode == 6 && flock(fd, LOCK_EX | LOCK_NB) != 0) fail("flock", partial);
    char proc[64], value[256];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int direct = open(proc, O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (direct < 0) fail("open O_DIRECT", proc);
    memcpy(aligned, body, sizeof body);
    if (pwrite(direct, aligned, sizeof body, 0) != (ssize_t)sizeof body) fail("pwrite O_DIRECT", partial);
    close(direct);
    if (fdatasync(fd) != 0) fail("fdatasync", partial);
    if (fchmod(fd, 0644) != 0) fail("fchmod", partial);
    int n = snprintf(value, sizeof value, "1\n\"6a3f%04x-10000\"\nFri, 27 Nov 2026 07:30:%02d GMT\nhttp://127.0.0.1:18080/small/f-%04d.bin",
                     i, i % 60, i);
    if (fsetxattr(fd, "user.dk.validators", value, (size_t)n, 0) != 0) fail("fsetxattr", partial);
    if (mode == 6) {
        if (rename(partial, final) != 0) fail("rename", partial);
    } else {
        if (linkat(AT_FDCWD, proc, AT_FDCWD, final, AT_SYMLINK_FOLLOW) != 0) fail("linkat", final);
        // The inode was last synced before the link: without this a crash after the directory sync can
        // leave NAME on an inode whose link count on disk is still zero. UNSAFE=1 skips it (an upper bound
        // only, not a sequence to use).
        if (!unsafe_link && fsync(fd) != 0) fail("fsync after linkat", final);
    }
    close(fd);
    group_sync(dfd);
}

static void *work(void *unused) {
    (void)unused;
    char partial[4096], final[4096];
    void *aligned = NULL;
    if (mode >= 5 && posix_memalign(&aligned, 4096, sizeof body) != 0) fail("posix_memalign", directory);
    int dfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) fail("open directory", directory);
    for (;;) {
        pthread_mutex_lock(&lock);
        int i = next_index++;
        pthread_mutex_unlock(&lock);
        if (i >= total) break;
        snprintf(partial, sizeof partial, "%s/f-%04d.bin.part", directory, i);
        snprintf(final, sizeof final, "%s/f-%04d.bin", directory, i);
        const char *path = mode == 1 ? final : partial;
        if (mode >= 6) {
            sequence_6_or_7(i, dfd, partial, final, aligned);
            continue;
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) fail("open", path);
        if (mode >= 4) {
            if (flock(fd, LOCK_EX | LOCK_NB) != 0) fail("flock", path);
            if (fsetxattr(fd, "user.dk.record", record, sizeof record, 0) != 0) fail("fsetxattr", path);
        }
        if (mode == 5) {
            int direct = open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
            if (direct < 0) fail("open O_DIRECT", path);
            memcpy(aligned, body, sizeof body);
            if (pwrite(direct, aligned, sizeof body, 0) != (ssize_t)sizeof body) fail("pwrite O_DIRECT", path);
            close(direct);
        } else if (write(fd, body, sizeof body) != (ssize_t)sizeof body) {
            fail("write", path);
        }
        if (mode >= 4) {
            char value[128];
            if (fdatasync(fd) != 0) fail("fdatasync", path);
            int n = snprintf(value, sizeof value, "\"6a3f%04x-10000\"", i);
            if (fsetxattr(fd, "user.dk.etag", value, (size_t)n, 0) != 0) fail("fsetxattr", path);
            n = snprintf(value, sizeof value, "Fri, 27 Nov 2026 07:30:%02d GMT", i % 60);
            if (fsetxattr(fd, "user.dk.last-modified", value, (size_t)n, 0) != 0) fail("fsetxattr", path);
            n = snprintf(value, sizeof value, "http://127.0.0.1:18080/small/f-%04d.bin", i);
            if (fsetxattr(fd, "user.dk.url", value, (size_t)n, 0) != 0) fail("fsetxattr", path);
            if (fremovexattr(fd, "user.dk.record") != 0) fail("fremovexattr", path);
            if (fchmod(fd, 0644) != 0) fail("fchmod", path);
            close(fd);
            if (rename(partial, final) != 0) fail("rename", partial);
            group_sync(dfd);
        } else if (mode == 0) {
            if (fdatasync(fd) != 0) fail("fdatasync", path);
            close(fd);
            if (rename(partial, final) != 0) fail("rename", partial);
            if (fsync(dfd) != 0) fail("fsync", directory);
        } else if (mode == 3) {
            close(fd);
            group_sync(dfd);
            if (rename(partial, final) != 0) fail("rename", partial);
            group_sync(dfd);
        } else if (mode == 2) {
            close(fd);
            if (rename(partial, final) != 0) fail("rename", partial);
            group_sync(dfd);
        } else {
            close(fd);
        }
    }
    close(dfd);
    free(aligned);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s DIRECTORY FILES THREADS [MODE: 0 durable (default), 1 plain, 2 syncfs after rename (unsafe), 3 syncfs group commit, 4 DownloadKit's sequence, 5 the same written O_DIRECT, 6 DownloadKit's sequence since 2026-11-28, 7 the same in an O_TMPFILE]\n", argv[0]);
        return 2;
    }
    directory = argv[1];
    total = atoi(argv[2]);
    int threads = atoi(argv[3]);
    mode = argc > 4 ? atoi(argv[4]) : 0;
    if (total < 1 || threads < 1 || threads > 256 || mode < 0 || mode > 7) {
        fprintf(stderr, "FILES must be at least 1, THREADS 1 to 256 and MODE 0 to 7\n");
        return 2;
    }
    memset(body, 7, sizeof body);
    memset(record, 'r', sizeof record);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_t workers[256];
    for (int i = 0; i < threads; i++) pthread_create(&workers[i], NULL, work, NULL);
    for (int i = 0; i < threads; i++) pthread_join(workers[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double wall = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
    double cpu = (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec / 1e6 + (double)usage.ru_stime.tv_sec
        + (double)usage.ru_stime.tv_usec / 1e6;
    printf("%s: %.0f files/s, %.3f CPU-ms a file\n", mode == 1 ? "plain" : mode == 2 ? "syncfs after rename (unsafe)" : mode == 3 ? "syncfs group commit" : mode == 4 ? "DownloadKit's sequence" : mode == 5 ? "DownloadKit's sequence, O_DIRECT" : mode == 6 ? "DownloadKit's sequence since 2026-11-28" : mode == 7 ? "the same in an O_TMPFILE" : "durable", total / wall, cpu * 1000 / total);
    return 0;
}
