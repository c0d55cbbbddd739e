#ifndef DK_FILE_H
#define DK_FILE_H

#include <sys/types.h>

/// Wraps `fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length)`: reserves disk blocks without changing
/// the file's size (glibc declares `fallocate` only under _GNU_SOURCE, which Swift's Glibc module
/// does not define). Returns 0 or -1 with errno set.
int dk_fallocate_keep_size(int fd, off_t offset, off_t length);

/// Wraps `splice(2)`: moves up to `length` bytes between a pipe and another descriptor without
/// copying through user space. `offset_out` may be NULL. Returns the count, 0 at EOF, or -1 with errno.
ssize_t dk_splice(int fd_in, off_t *offset_in, int fd_out, off_t *offset_out, size_t length, unsigned int flags);

/// Creates a non-blocking, close-on-exec pipe for splicing (`pipe2`) and asks for `size` bytes of
/// capacity (`F_SETPIPE_SZ`, best effort). Returns the capacity in bytes, or -1 with errno set.
int dk_splice_pipe(int fds[2], int size);

/// Creates a close-on-exec pipe (`pipe2(fds, O_CLOEXEC)`, atomically: no process started meanwhile inherits an
/// end), for waking a thread blocked in `poll` (a byte written, or the write end closed). Returns 0, or -1 with
/// errno set.
int dk_wake_pipe(int fds[2]);

/// The bytes waiting in a pipe (`FIONREAD` on its read end), or -1 with errno set.
int dk_pipe_pending(int fd);

/// `SPLICE_F_MOVE | SPLICE_F_NONBLOCK`, for reading a socket into a pipe.
unsigned int dk_splice_flags_nonblocking(void);

/// `SPLICE_F_MOVE`, for draining a pipe into a file.
unsigned int dk_splice_flags_move(void);

/// Wraps `sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE)`: starts writeback of the range's
/// dirty pages without waiting for it, so a later `fdatasync` has little left to wait for.
/// Returns 0 or -1 with errno set.
int dk_start_writeback(int fd, off_t offset, off_t length);

/// The type of the file system holding `fd`'s file (`fstatfs`'s `f_type`: 0xEF53 for ext4, 0x58465342
/// for XFS), or -1 with errno set. Swift's Glibc module does not import <sys/vfs.h>.
long dk_file_system_type(int fd);

/// Opens the file `fd` refers to once more, write-only with `O_DIRECT` (writes go from the caller's
/// memory to the device, past the page cache), as a new open file description: through
/// `/proc/self/fd/FD`, so no other file can be put in its place by a rename in between, and checked to
/// be the same inode. Returns the descriptor, or -1 with errno set (EINVAL where the file system refuses
/// `O_DIRECT`, ENOENT without /proc, ESTALE if the inode differs).
int dk_reopen_direct(int fd);

/// Fills `length` bytes from the kernel's random generator (`getrandom(2)`, flags 0: blocks only until
/// the generator is first seeded at boot), looping over short reads and EINTR. Returns 0, or -1 with
/// errno set. Swift's `SystemRandomNumberGenerator` makes one such call per 8 bytes.
int dk_random_bytes(void *buffer, size_t length);

/// Names the calling thread for ps/top//proc (pthread_setname_np; at most 15 bytes are kept).
int dk_set_current_thread_name(const char *name);

/// fsetxattr(fd, name, value, size, 0); 0 or -1 with errno set (ENOTSUP where there are no user xattrs).
int dk_fsetxattr(int fd, const char *name, const void *value, size_t size);

/// fgetxattr; the value's length or -1 with errno set.
ssize_t dk_fgetxattr(int fd, const char *name, void *value, size_t size);

/// lgetxattr (the path itself, never a symbolic link's target); the value's length or -1 with errno set
/// (ENOENT when there is no such file: one system call answers "is there a partial, and a record on it").
ssize_t dk_lgetxattr(const char *path, const char *name, void *value, size_t size);

/// fremovexattr; 0 or -1 with errno set.
int dk_fremovexattr(int fd, const char *name);

// MARK: Files beside a destination (issue #44, docs/ENGINE.md "Files beside a destination")
//
// The one implementation, for DownloadKit (partial, record, journal, staging names), HTTPClient (the
// cookie jar's temporary name) and the CLI (--log-file): a name in a directory others can write is
// opened without following a symbolic link, checked on the open descriptor (fstat, as ssh checks its
// keys), created exclusively when it is a temporary name, and removed only when it is ours.

/// Why ``dk_owned_check`` refused a file (0: accepted).
enum {
    DK_ACCEPTED = 0,
    /// The name is a symbolic link (`O_NOFOLLOW` failed with ELOOP).
    DK_REFUSED_SYMLINK = 1,
    /// Not a regular file (a directory, FIFO, device, socket).
    DK_REFUSED_NOT_REGULAR = 2,
    /// Owned by another user than the effective one.
    DK_REFUSED_OTHER_OWNER = 3,
    /// Writable by its group or by others (strict check only).
    DK_REFUSED_WRITABLE_BY_OTHERS = 4,
    /// Has more than one hard link (strict check only): another name reaches the same bytes.
    DK_REFUSED_LINKED = 5,
};

/// Checks the file open on `fd` (fstat): a regular file owned by the effective user; with `strict`
/// also neither group- nor other-writable and with exactly one link. Returns a `DK_REFUSED_*` code,
/// `DK_ACCEPTED`, or -1 with errno set when fstat fails.
int dk_owned_check(int fd, int strict);

/// Opens `path` with `flags | O_NOFOLLOW | O_CLOEXEC` (and `mode` when creating) and applies
/// ``dk_owned_check`` to the descriptor. `O_TRUNC` is applied only after the check passed (ftruncate),
/// so a refused file never loses a byte; a FIFO never blocks the open (non-blocking unless `O_RDWR`) and is refused. Returns the
/// descriptor, or -1 with errno set and `*refusal` set to the `DK_REFUSED_*` code (or 0 when the open
/// itself failed for another reason; errno is then that failure's, EPERM for a refusal).
int dk_owned_open(const char *path, int flags, mode_t mode, int strict, int *refusal);

/// A short phrase for a `DK_REFUSED_*` code ("is a symbolic link", "belongs to another user", …).
const char *dk_refusal_text(int refusal);

/// Creates a fresh temporary file exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`, `O_WRONLY`) named
/// `prefix` + the pid. When that name exists and is a regular file of ours with one link (our own
/// leftover) it is removed and the name taken again; anything else there (a planted file or link) is
/// left alone and a unique name `prefix` + pid + `-` + random hex is taken instead. The name used is
/// written to `name` (`capacity` bytes). Returns the descriptor or -1 with errno set.
int dk_create_temporary(const char *prefix, mode_t mode, char *name, size_t capacity);

/// `renameat2(RENAME_NOREPLACE)`: moves `from` to `to` only if `to` does not exist (EEXIST otherwise).
/// Returns 0 or -1 with errno set.
int dk_rename_noreplace(const char *from, const char *to);

/// Unlinks `path` only when it is ours (lstat: owned by the effective user, a link or file alike).
/// Returns 0 when removed or absent, 1 when left alone (another user's), -1 with errno on failure.
int dk_unlink_if_owned(const char *path);

/// A descriptor that becomes readable when process `pid` (a child of ours) has ended (pidfd_open(2), Linux 5.3);
/// -1 with errno otherwise.
int dk_pidfd_open(pid_t pid);

#endif
