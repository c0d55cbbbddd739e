import CDownloadKitSystem
import Glibc
import HTTPClient

/// A failed file-system call: the operation, the path and `errno`.
public struct FileSystemError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The C function or step that failed (`open`, `pwrite`, `rename`, …).
    public var operation: String
    /// The path involved.
    public var path: String
    /// The error number captured right after the call.
    public var errorNumber: DKErrno

    /// ``errorNumber``'s raw C value.
    @available(*, deprecated, renamed: "errorNumber")
    public var errno: Int32 {
        get { errorNumber.rawValue }
        set { errorNumber = DKErrno(rawValue: newValue) }
    }

    init(_ operation: String, path: String, errorNumber: DKErrno) {
        self.operation = operation
        self.path = path
        self.errorNumber = errorNumber
    }

    public var description: String {
        "\(operation) \(path): \(errorNumber) (errno \(errorNumber.rawValue))"
    }
}

/// An open file descriptor used for positional I/O on a download's temp file.
///
/// Not `Sendable`: owned by the thread running the transfer. Closed in `deinit`.
final class FileHandleFD {
    let fd: Int32
    let path: String
    /// The download's fence and faults (``FileIOHooks``), consulted by every write and data sync.
    let hooks: FileIOHooks

    private init(fd: Int32, path: String, hooks: FileIOHooks) {
        self.fd = fd
        self.path = path
        self.hooks = hooks
    }

    /// Opens (creating if needed, mode 0600: partial data is private until it is renamed into place)
    /// a file for reading and writing, without truncating it and without following a symbolic link.
    /// - Throws: ``DownloadError/Code/untrustedFile`` naming the file when it is not one this user could
    ///   have created as a partial (``FileSystem/openOwned(_:_:role:strict:)``), else ``FileSystemError``.
    /// - Parameter hooks: The download's fence and faults (none by default), asked by every write and sync.
    static func openForUpdate(_ path: String, hooks: FileIOHooks = FileIOHooks()) throws -> FileHandleFD {
        FileHandleFD(fd: try FileSystem.openOwned(path, O_RDWR | O_CREAT, role: "partial file"), path: path, hooks: hooks)
    }

    /// Opens an existing file read-only, without following a symbolic link.
    static func openForReading(_ path: String) throws(FileSystemError) -> FileHandleFD {
        let (fd, failure) = retryingInterrupts { open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) }
        if let failure { throw FileSystemError("open", path: path, errorNumber: failure) }
        return FileHandleFD(fd: fd, path: path, hooks: FileIOHooks())
    }

    deinit { close(fd) }

    /// The file's current size in bytes.
    func size() throws(FileSystemError) -> Int64 {
        var st = stat()
        if fstat(fd, &st) != 0 { throw FileSystemError("fstat", path: path, errorNumber: .current) }
        return Int64(st.st_size)
    }

    /// Writes all of `bytes` at `offset`, looping over short writes and `EINTR`. On failure the bytes
    /// written before the error are reported through `written` so the caller never loses track of
    /// what reached the file.
    func write(_ bytes: UnsafeRawBufferPointer, toAbsoluteOffset offset: Int64, written: inout Int) throws(FileSystemError) {
        written = 0
        guard let base = bytes.baseAddress else { return }
        try hooks.check("pwrite", path)
        while written < bytes.count {
            let (n, failure) = retryingInterrupts { pwrite(fd, base + written, bytes.count - written, off_t(offset) + off_t(written)) }
            if let failure { throw FileSystemError("pwrite", path: path, errorNumber: failure) }
            if n == 0 { throw FileSystemError("pwrite", path: path, errorNumber: .ioError) }
            written += n
        }
    }

    /// Reads up to `buffer.count` bytes at `offset`; returns the count (0 at end of file).
    func read(into buffer: UnsafeMutableRawBufferPointer, fromAbsoluteOffset offset: Int64) throws(FileSystemError) -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        let (n, failure) = retryingInterrupts { pread(fd, base, buffer.count, off_t(offset)) }
        if let failure { throw FileSystemError("pread", path: path, errorNumber: failure) }
        return n
    }

    /// Flushes the file's data (and the size, which `fdatasync` includes when it changed) to stable storage,
    /// through the download's ``hooks`` (its fence, injected faults).
    func syncData() throws(FileSystemError) {
        try hooks.syncData(fd, path: path)
    }

    /// Starts writing the file's dirty pages to disk without waiting (`sync_file_range` with
    /// `SYNC_FILE_RANGE_WRITE`), so the durability `fdatasync` before the final rename mostly finds
    /// them written already. Best effort: failures are ignored (the later sync reports real errors).
    func startWriteback() {
        _ = dk_start_writeback(fd, 0, 0)
    }

    /// Flushes data and metadata to stable storage.
    func sync() throws(FileSystemError) {
        if let failure = retryingInterrupts({ fsync(fd) }).errno {
            throw FileSystemError("fsync", path: path, errorNumber: failure)
        }
    }

    /// Sets the file's length.
    func truncate(to length: Int64) throws(FileSystemError) {
        try hooks.check("ftruncate", path)
        if let failure = retryingInterrupts({ ftruncate(fd, off_t(length)) }).errno {
            throw FileSystemError("ftruncate", path: path, errorNumber: failure)
        }
    }

    /// Reserves disk blocks for `[offset, offset+length)` without changing the file's size, so the size
    /// keeps meaning "bytes written" for crash recovery. Best effort: file systems without support
    /// (EOPNOTSUPP) are ignored; ENOSPC is reported.
    func reserve(offset: Int64, length: Int64) throws(FileSystemError) {
        guard length > 0 else { return }
        if retryingInterrupts({ dk_fallocate_keep_size(fd, off_t(offset), off_t(length)) }).errno?.rawValue == ENOSPC {
            throw FileSystemError("fallocate", path: path, errorNumber: .noSpace)
        }
    }
}

/// Path and directory helpers for the engine.
///
/// Files beside a destination (issue #44, docs/ENGINE.md "Files beside a destination"): the partial,
/// the record and its temporary name, the journal and the staging name of a cross-device move are opened,
/// created and removed only through ``openOwned(_:_:role:strict:)``, ``createTemporary(_:role:)`` and
/// ``removeIfOwned(_:)``, which call the one implementation in CDownloadKitSystem (`dk_owned_open`,
/// `dk_create_temporary`, `dk_unlink_if_owned`; the cookie jar and `--log-file` call the same functions).
///
/// Decision: by path, with `O_NOFOLLOW` on the last component and every check made on the open
/// descriptor (fstat), not relative to an open directory descriptor (openat/renameat/unlinkat). The
/// attacker of issue #44 plants names inside a shared directory; the directory's own path is the
/// caller's choice. The engine, the manager, the fleet and the CLI pass working files around as paths,
/// and moving all of them to directory descriptors was more than the change could carry safely.
package enum FileSystem {
    /// Opens `path` without following a symbolic link and checks the open descriptor: a regular file
    /// of the effective user; with `strict` (records, partials, journals) also not writable by its group
    /// or others and with one link, as ssh checks its keys. `O_TRUNC` is applied only after the check.
    /// - Parameters:
    ///   - role: What the file is to the download ("partial file", "resume record", "segment journal"),
    ///     for the error.
    /// - Returns: The descriptor (close-on-exec).
    /// - Throws: ``DownloadError`` with ``DownloadError/Code/untrustedFile`` naming the file and why it was
    ///   refused; ``FileSystemError`` when the open itself fails.
    package static func openOwned(_ path: String, _ flags: Int32, role: String, strict: Bool = true) throws -> Int32 {
        var refusal: Int32 = 0
        let fd = dk_owned_open(path, flags, 0o600, strict ? 1 : 0, &refusal)
        if fd >= 0 { return fd }
        let code = DKErrno.current
        if refusal != 0 { throw untrusted(path, role: role, refusal: refusal) }
        throw FileSystemError("open", path: path, errorNumber: code)
    }

    /// The error for a file beside a destination that this download did not create.
    static func untrusted(_ path: String, role: String, refusal: Int32) -> DownloadError {
        DownloadError(
            .untrustedFile,
            "refusing the \(role) \(path): it \(String(cString: dk_refusal_text(refusal))), so it is not a file this user "
                + "created (remove it, or use another path)")
    }

    /// Creates a temporary file beside `path` exclusively (`<path>.tmp-<pid>`, or a unique name when a
    /// file or link that is not ours holds that one; ``dk_create_temporary``), mode 0600.
    /// - Returns: The descriptor and the name used.
    static func createTemporary(_ prefix: String) throws(FileSystemError) -> (fd: Int32, path: String) {
        var name = [CChar](repeating: 0, count: Int(PATH_MAX) + 64)
        let fd = dk_create_temporary(prefix, 0o600, &name, name.count)
        if fd < 0 { throw FileSystemError("open", path: prefix + "<pid>", errorNumber: .current) }
        return (fd, String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    /// Removes `path` (a file or a link) only when it belongs to this user; another user's file stays
    /// (a planted name costs a refused or restarted download, never another user's file). A missing
    /// file is not an error.
    /// - Parameter hooks: The download's fence (a working file of a fenced download).
    package static func removeIfOwned(_ path: String, hooks: FileIOHooks = FileIOHooks()) throws(FileSystemError) {
        try hooks.check("unlink", path)
        if dk_unlink_if_owned(path) < 0 { throw FileSystemError("unlink", path: path, errorNumber: .current) }
    }

    /// Whether `directory` holds an entry whose name ends in `suffix`: one `readdir`, each name compared
    /// in place. `true` when the directory cannot be read (the caller then looks at each path itself).
    package static func containsName(endingWith suffix: String, in directory: String) -> Bool {
        guard let handle = opendir(directory) else { return errno != ENOENT }
        defer { closedir(handle) }
        let wanted = Array(suffix.utf8)
        while let entry = readdir(handle) {
            let matches = withUnsafeBytes(of: &entry.pointee.d_name) { name -> Bool in
                let length = name.firstIndex(of: 0) ?? name.count
                guard length >= wanted.count else { return false }
                return name[(length - wanted.count)..<length].elementsEqual(wanted)
            }
            if matches { return true }
        }
        return false
    }

    package static func exists(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0
    }

    static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    static func size(of path: String) -> Int64? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return Int64(st.st_size)
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }

    static func lastComponent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }

    static func join(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }

    /// Removes a file; a missing file is not an error.
    /// - Parameter hooks: The download's fence (a working file of a fenced download).
    static func remove(_ path: String, hooks: FileIOHooks = FileIOHooks()) throws(FileSystemError) {
        try hooks.check("unlink", path)
        if let failure = retryingInterrupts({ unlink(path) }).errno, failure.rawValue != ENOENT {
            throw FileSystemError("unlink", path: path, errorNumber: failure)
        }
    }

    /// Makes a rename or unlink in `directory` durable: the one directory `fsync` of the file layer (the
    /// engine's renames, the resume info's atomic writes, new parent directories). Some file systems cannot
    /// sync a directory (`EINVAL`, `ENOTSUP`); the rename is then as durable as they allow.
    /// Concurrent callers for one directory share syncs (``DirectorySync``): each returns after a sync
    /// that began after it was called.
    static func syncDirectory(_ directory: String) throws(FileSystemError) {
        try DirectorySync.shared.sync(directory) { () throws(FileSystemError) in
            let (fd, failure) = retryingInterrupts { open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
            if let failure { throw FileSystemError("open", path: directory, errorNumber: failure) }
            defer { close(fd) }
            if let failure = retryingInterrupts({ fsync(fd) }).errno, failure.rawValue != EINVAL, failure.rawValue != ENOTSUP {
                throw FileSystemError("fsync", path: directory, errorNumber: failure)
            }
        }
    }

    /// Creates a directory and its parents (mode 0755). Existing directories are fine. Each directory
    /// created is made durable by an `fsync` of its parent, so a power loss cannot take away the
    /// directory that later checkpoints and the final rename rely on.
    static func createDirectories(_ path: String) throws(FileSystemError) {
        if isDirectory(path) { return }
        let parent = directory(of: path)
        if parent != path && parent != "." && parent != "/" { try createDirectories(parent) }
        if let failure = retryingInterrupts({ mkdir(path, 0o755) }).errno {
            if failure.rawValue != EEXIST { throw FileSystemError("mkdir", path: path, errorNumber: failure) }
            return
        }
        try syncDirectory(parent)
    }

    /// Bytes available to an unprivileged user on the file system holding `path` (statvfs `f_bavail`,
    /// not `f_bfree`, which counts blocks reserved for root).
    static func availableBytes(at path: String) -> Int64? {
        var st = statvfs()
        guard statvfs(path, &st) == 0 else { return nil }
        return Int64(st.f_bavail) &* Int64(st.f_frsize)
    }

    /// Moves `source` to `destination` atomically: `rename` on the same file system, otherwise copy to
    /// a temporary name beside the destination, fsync, rename. The destination directory is fsynced.
    /// - Parameter hooks: The download's fence, asked before the rename (``WriteFence/Operation/finalRename``).
    static func moveDurably(from source: String, to destination: String, hooks: FileIOHooks = FileIOHooks()) throws(FileSystemError) {
        try hooks.check("rename", source, .finalRename)
        guard let renameFailure = retryingInterrupts({ rename(source, destination) }).errno else {
            try syncDirectory(directory(of: destination))
            return
        }
        let code = renameFailure.rawValue
        guard code == EXDEV else { throw FileSystemError("rename", path: destination, errorNumber: renameFailure) }
        let staging = try copyFile(from: source, besideDestination: destination)
        if let failure = retryingInterrupts({ rename(staging, destination) }).errno {
            _ = retryingInterrupts { unlink(staging) }
            throw FileSystemError("rename", path: destination, errorNumber: failure)
        }
        try syncDirectory(directory(of: destination))
        try remove(source, hooks: hooks)
    }

    /// Like ``moveDurably(from:to:)`` but never replaces an existing `destination`: the file is linked
    /// in (`link` fails with `EEXIST` atomically, even against a concurrent writer), then `source` is
    /// unlinked. Returns false, touching nothing, when `destination` exists.
    /// - Parameter hooks: The download's fence, asked before the link (``WriteFence/Operation/finalRename``).
    static func moveDurablyWithoutReplacing(
        from source: String, to destination: String, hooks: FileIOHooks = FileIOHooks()
    ) throws(FileSystemError) -> Bool {
        try hooks.check("link", source, .finalRename)
        guard let linkFailure = retryingInterrupts({ link(source, destination) }).errno else {
            try syncDirectory(directory(of: destination))
            try remove(source, hooks: hooks)
            return true
        }
        let code = linkFailure.rawValue
        if code == EEXIST { return false }
        guard code == EXDEV || code == EPERM || code == ENOTSUP else {
            throw FileSystemError("link", path: destination, errorNumber: linkFailure)
        }
        // No hard links here (another file system, or one without links): copy beside the destination,
        // then link the copy in (or, without link support at all, check and rename).
        let staging: String
        if code == EXDEV {
            staging = try copyFile(from: source, besideDestination: destination)
        } else {
            // Without link support: the staging name is created exclusively (never a planted one), then
            // the partial renamed over that empty file of ours.
            let created = try createTemporary(destination + ".dkmove-")
            close(created.fd)
            staging = created.path
            if let failure = retryingInterrupts({ rename(source, staging) }).errno {
                _ = retryingInterrupts { unlink(staging) }
                throw FileSystemError("rename", path: staging, errorNumber: failure)
            }
        }
        var failure = retryingInterrupts({ link(staging, destination) }).errno
        if let linkError = failure, linkError.rawValue != EEXIST, !exists(destination) {
            failure = retryingInterrupts({ rename(staging, destination) }).errno
        }
        if let failure {
            if code == EXDEV { _ = retryingInterrupts { unlink(staging) } } else { _ = retryingInterrupts { rename(staging, source) } }
            if exists(destination) { return false }
            throw FileSystemError("rename", path: destination, errorNumber: failure)
        }
        _ = retryingInterrupts { unlink(staging) }
        try syncDirectory(directory(of: destination))
        if code == EXDEV { try remove(source, hooks: hooks) }
        return true
    }

    /// Copies `source` into a staging file created exclusively beside `finalPath` (`<finalPath>.dkmove-<pid>`
    /// or a unique name, never a planted file or link), fsynced, mode 0644 like the finished file.
    /// - Returns: The staging path; it is removed when the copy fails.
    private static func copyFile(from source: String, besideDestination finalPath: String) throws(FileSystemError) -> String {
        let input = try FileHandleFD.openForReading(source)
        let (outputFD, destination) = try createTemporary(finalPath + ".dkmove-")
        defer { close(outputFD) }
        do throws(FileSystemError) {
            try copy(input, to: outputFD, path: destination)
        } catch {
            _ = retryingInterrupts { unlink(destination) }
            throw error
        }
        return destination
    }

    private static func copy(_ input: FileHandleFD, to outputFD: Int32, path destination: String) throws(FileSystemError) {
        _ = fchmod(outputFD, 0o644)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        guard let base = buffer.baseAddress else { return }
        var offset: Int64 = 0
        while true {
            let n = try input.read(into: buffer, fromAbsoluteOffset: offset)
            if n == 0 { break }
            var done = 0
            while done < n {
                let (w, failure) = retryingInterrupts { write(outputFD, base + done, n - done) }
                if let failure { throw FileSystemError("write", path: destination, errorNumber: failure) }
                done += w
            }
            offset += Int64(n)
        }
        if let failure = retryingInterrupts({ fsync(outputFD) }).errno {
            throw FileSystemError("fsync", path: destination, errorNumber: failure)
        }
    }

    /// This boot's identity (`/proc/sys/kernel/random/boot_id`), used to tell a process crash (page cache
    /// intact, the temp file's length is trustworthy) from a reboot (only checkpointed bytes are).
    static let bootID: String? = {
        let fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 64)
        let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, 64) }
        guard n > 0 else { return nil }
        return String(decoding: bytes[0..<n], as: UTF8.self).trimmingCharacters(in: " \n")
    }()
}

extension String {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var slice = self[...]
        while let first = slice.first, set.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, set.contains(last) { slice = slice.dropLast() }
        return String(slice)
    }
}
