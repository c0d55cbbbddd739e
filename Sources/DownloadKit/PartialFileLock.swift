import CDownloadKitSystem
import Glibc
import HTTPClient

/// One destination, one writer: the engine holds an exclusive advisory lock (`flock`) on its open
/// `.dkpart` from `prepare()` until the final rename and cleanup are done (docs/ENGINE.md, "One
/// destination, one writer").
///
/// `flock` locks belong to the open file description, so a second `Download` in the same process
/// conflicts exactly like a second process does, and the kernel drops the lock when the holder's
/// descriptor closes — a kill -9 never leaves a stale lock. A second writer is refused at once
/// (``DownloadError/Code/destinationInUse``); it does not wait.
enum PartialFileLock {
    /// Releases the lock `handle` holds (`flock(LOCK_UN)`) without closing it. A stopping engine calls this
    /// before it reports its end: a reference to the handle that outlives the engine (a segment worker's
    /// thread still letting go of it) must not keep the partial locked against the next transfer of the
    /// same download, which starts as soon as that end is reported.
    static func release(_ handle: FileHandleFD) {
        _ = retryingInterrupts { flock(handle.fd, LOCK_UN) }
    }

    /// Opens `path` for update (creating it with mode 0600) and takes the exclusive lock.
    ///
    /// After the lock is granted the descriptor's inode is compared with the one the path names now:
    /// a holder that finished in between renamed the locked file into place, and writing through a
    /// descriptor opened before that rename would truncate the finished file. Then the open is retried
    /// (bounded) on the new path entry.
    /// - Returns: The locked handle and the file's length when the lock was taken (from the same `fstat`).
    /// - Parameter hooks: The download's fence and faults, kept by the handle for its writes and syncs.
    static func openLocked(_ path: String, destination: String, hooks: FileIOHooks) throws -> (handle: FileHandleFD, size: Int64) {
        for _ in 0..<8 {
            let handle = try FileHandleFD.openForUpdate(path, hooks: hooks)
            if let failure = retryingInterrupts({ flock(handle.fd, LOCK_EX | LOCK_NB) }).errno {
                let code = failure.rawValue
                if code == EWOULDBLOCK {
                    throw DownloadError(
                        .destinationInUse,
                        "\(destination) is in use by another download (its partial file \(path) is locked by another writer)")
                }
                throw DownloadError(.fileSystem, FileSystemError("flock", path: path, errorNumber: failure).description)
            }
            var open = stat()
            var named = stat()
            if fstat(handle.fd, &open) != 0 {
                throw DownloadError(.fileSystem, FileSystemError("fstat", path: path, errorNumber: .current).description)
            }
            if lstat(path, &named) == 0, named.st_dev == open.st_dev, named.st_ino == open.st_ino {
                return (handle, Int64(open.st_size))
            }
            // The path now names another file (the previous holder renamed ours away): try again.
        }
        throw DownloadError(
            .destinationInUse, "\(destination) is in use by another download (its partial file \(path) keeps changing)")
    }
}

/// Paths read from a resume record (ours or Apple's) are data, not instructions.
enum RecordPath {
    /// Whether `path` may be adopted as a download's partial: it lies directly in `directory` (no
    /// `..`, no other directory) and passes the checks of every file beside a destination, made on an
    /// open descriptor (``FileSystem/openOwned(_:_:role:strict:)``): a regular file, not a symbolic link,
    /// of this user, not writable by its group or others, with one link (issue #44).
    static func isAdoptable(_ path: String, in directory: String) -> Bool {
        guard !path.isEmpty else { return false }
        let name = FileSystem.lastComponent(of: path)
        guard !name.isEmpty, name != ".", name != ".." else { return false }
        guard sameDirectory(FileSystem.directory(of: path), directory) else { return false }
        guard let fd = try? FileSystem.openOwned(path, O_RDONLY, role: "partial file") else { return false }
        close(fd)
        return true
    }

    /// Renames the partial a record names to `tempPath` when ``isAdoptable(_:in:)`` allows it, never
    /// replacing a file that appeared at `tempPath` meanwhile (`renameat2(RENAME_NOREPLACE)`). The
    /// partial is checked once more on its descriptor when the engine opens and locks it.
    static func adopt(_ path: String, as tempPath: String, in directory: String) {
        guard isAdoptable(path, in: directory) else { return }
        _ = dk_rename_noreplace(path, tempPath)
    }

    private static func sameDirectory(_ a: String, _ b: String) -> Bool {
        var sa = stat()
        var sb = stat()
        guard stat(a, &sa) == 0, stat(b, &sb) == 0 else { return false }
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino
    }
}
